package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConcealNeverShowsSecrets runs every way `config conceal` can fail
// with a secret among its inputs: none shows the secret on stdout or
// stderr, and each exits as the CLI does elsewhere.
func TestConcealNeverShowsSecrets(t *testing.T) {
	const sec = "T0PSECRETv4l"
	deployment, _ := deployFixture(t)
	dir := t.TempDir()
	twoLines := filepath.Join(dir, "two-lines")
	if err := os.WriteFile(twoLines, []byte(sec+"\n"+sec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"no '='", "", []string{sec}, ExitUsage, "NAME=value #1 has no '='"},
		{"no '=' after flags", "", []string{"--namespace", "ns", "A=1", sec}, ExitUsage, "NAME=value #2 has no '='"},
		{"invalid name", "", []string{"lower" + sec + "=1"}, ExitUsage, "NAME=value #1: the name is not a secret name"},
		{"no name", "", []string{"=" + sec}, ExitUsage, "NAME=value #1: the name is not a secret name"},
		{"name twice", "", []string{"A=" + sec, "A=" + sec + "2"}, ExitUsage, "A is given twice (NAME=value #1 and #2)"},
		{"looks like a flag", "", []string{"A=1", "-" + sec}, ExitUsage, "argument 2 is neither a flag of conceal nor NAME=value"},
		{"unknown flag with a value", "", []string{"--" + sec + "=x"}, ExitUsage, "argument 1 is neither a flag"},
		{"stdin twice", sec, []string{"A=-", "B=-"}, ExitUsage, "A and B both read standard input"},
		{"missing file", "", []string{"A=@" + filepath.Join(dir, "missing"), "B=" + sec}, ExitUsage, "A: open "},
		{"line break from a file", "", []string{"A=@" + twoLines}, ExitUsage, "cannot carry a value with a line break (A)"},
		{"line break from stdin", sec + "\n" + sec, []string{"A=-"}, ExitUsage, "(A)"},
		{"missing deployment", "", []string{"--components", filepath.Join(dir, "missing.json"), "BAZ_VALUE=" + sec}, ExitUsage, "--components"},
		{"secret the deployment needs", "", []string{"--components", deployment, "OTHER=" + sec}, ExitRefused, "references secrets that are not given: BAZ_VALUE"},
		{"unwritable output", "", []string{"--env-file", filepath.Join(dir, "no", "such", "dir", "env"), "A=" + sec}, ExitRefused, "write "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, tt.stdin, append([]string{"config", "conceal"}, tt.args...)...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tt.code, tt.want)
			}
			if strings.Contains(r.stdout+r.stderr, sec) {
				t.Errorf("output shows the secret:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
			}
		})
	}
}

// TestConcealInputs: values read from a file (NAME=@PATH) and from
// standard input (NAME=-) land in the env file like literal ones, and the
// summary names the secrets only.
func TestConcealInputs(t *testing.T) {
	dir := t.TempDir()
	keyFile, envFile := filepath.Join(dir, "stripe.key"), filepath.Join(dir, "configuration.env")
	if err := os.WriteFile(keyFile, []byte("sk_fr0m_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "pw_fr0m_stdin\r\n", "config", "conceal", "STRIPE_API_KEY=@"+keyFile, "--env-file", envFile, "DB_PASSWORD=-", "AT=@@home")
	if r.code != ExitOK {
		t.Fatalf("conceal: %+v", r)
	}
	if strings.Contains(r.stdout+r.stderr, "fr0m") || !strings.Contains(r.stdout, "wrote 3 secret(s) (AT, DB_PASSWORD, STRIPE_API_KEY)") {
		t.Fatalf("conceal output: %+v", r)
	}
	got, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	want := "VARPLANE_CONFIGURATION__AT=@home\nVARPLANE_CONFIGURATION__DB_PASSWORD=pw_fr0m_stdin\nVARPLANE_CONFIGURATION__STRIPE_API_KEY=sk_fr0m_file\n"
	if string(got) != want {
		t.Fatalf("env file = %q, want %q", got, want)
	}
	// --help still works next to the unknown-flag check.
	if r := runCLI(t, nil, "", "config", "conceal", "-h"); r.code != ExitOK || !strings.Contains(r.stderr, "NAME=@PATH") {
		t.Fatalf("conceal -h: %+v", r)
	}
}
