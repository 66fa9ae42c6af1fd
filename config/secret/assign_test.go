package secret

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// valueMark is in every secret value below: an error that contains it
// showed a secret.
const valueMark = "V4lSECRET"

// TestParseAssignmentsNeverShowsValues: every refusal names the position or
// the NAME, and never the value nor an argument that may be one.
func TestParseAssignmentsNeverShowsValues(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", MaxValueBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	in := Inputs{Stdin: strings.NewReader(valueMark), Open: func(p string) (io.ReadCloser, error) { return os.Open(p) }}
	for _, tt := range []struct {
		name string
		args []string
		in   Inputs
		want string
	}{
		{"no '='", []string{"A=1", valueMark}, in, "NAME=value #2 has no '='"},
		{"lower-case name", []string{"x" + valueMark + "=1"}, in, "NAME=value #1: the name is not a secret name"},
		{"value without a name", []string{"=" + valueMark}, in, "NAME=value #1: the name is not a secret name"},
		{"base64 with padding, no name", []string{"c2VjcmV0" + valueMark + "=="}, in, "NAME=value #1: the name is not a secret name"},
		{"name too long", []string{strings.Repeat("A", 33) + "=" + valueMark}, in, "#1: the name is not a secret name"},
		{"name twice", []string{"A=" + valueMark, "B=2", "$A=" + valueMark + "2"}, in, "A is given twice (NAME=value #1 and #3)"},
		{"stdin twice", []string{"A=-", "B=-"}, in, "A and B both read standard input"},
		{"stdin unavailable", []string{"A=-"}, Inputs{}, "A=-: standard input is not available"},
		{"files unavailable", []string{"A=@" + big}, Inputs{}, "A=@…: reading files is not available"},
		{"missing file", []string{"A=@" + filepath.Join(dir, "missing")}, in, "A: open " + filepath.Join(dir, "missing")},
		{"empty path", []string{"A=@"}, in, "A=@ names no file"},
		{"file too large", []string{"A=@" + big}, in, "A: read " + big + ": the value is larger than"},
		{"stdin fails", []string{"A=-"}, Inputs{Stdin: iotest.ErrReader(errors.New("boom"))}, "A=-: read standard input: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAssignments(tt.args, tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), valueMark) {
				t.Errorf("error %q shows a value", err)
			}
		})
	}
}

// TestParseAssignmentsInputs: @PATH and - read the value, losing one
// trailing line break; @@ escapes a literal '@'.
func TestParseAssignmentsInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lf, crlf, two, empty := write("lf", "k3y\n"), write("crlf", "k3y\r\n"), write("two", "k3y\n\n"), write("empty", "")
	var opened []string
	in := Inputs{
		Stdin: strings.NewReader("fr0m-stdin\n"),
		Open: func(p string) (io.ReadCloser, error) {
			opened = append(opened, p)
			return os.Open(p)
		},
	}
	got, err := ParseAssignments([]string{"LF=@" + lf, "CRLF=@" + crlf, "TWO=@" + two, "EMPTY=@" + empty, "IN=-", "AT=@@literal", "LIT=plain=@x", "DASHES=--", "BLANK="}, in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"LF": "k3y", "CRLF": "k3y", "TWO": "k3y\n", "EMPTY": "", "IN": "fr0m-stdin", "AT": "@literal", "LIT": "plain=@x", "DASHES": "--", "BLANK": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) || len(opened) != 4 {
		t.Errorf("got %q, opened %q", got, opened)
	}
	// A value with a line break left (TWO) is refused by the env file, by
	// name.
	if _, err := EnvFile(got); !errors.Is(err, ErrMultiline) || !strings.Contains(err.Error(), "(TWO)") {
		t.Errorf("EnvFile: %v", err)
	}
	if _, err := ParseAssignments([]string{"A=@" + dir}, in); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory as the file: %v", err)
	}
}
