package varplane_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/varplane/varplane"
)

func TestLimitsCheckJSON(t *testing.T) {
	small := varplane.Limits{MaxBodyBytes: 1 << 10, MaxDepth: 3, MaxStringBytes: 10, MaxNumberBytes: 6, MaxMembers: 3}
	tests := []struct {
		name  string
		in    string
		extra int
		code  varplane.Code
	}{
		{"scalar", `1`, 0, ""},
		{"depth at the limit", `{"a":[{"b":1}]}`, 0, ""},
		{"depth over the limit", `{"a":[{"b":[1]}]}`, 0, varplane.CodeLimitExceeded},
		{"envelope allowance", `{"a":[{"b":[1]}]}`, 1, ""},
		{"empty containers count", `[[[[]]]]`, 0, varplane.CodeLimitExceeded},
		{"string at the limit", `"1234567890"`, 0, ""},
		{"string over the limit", `"12345678901"`, 0, varplane.CodeLimitExceeded},
		{"member name over the limit", `{"12345678901":1}`, 0, varplane.CodeLimitExceeded},
		{"unterminated at one over the limit", `"12345678901`, 0, varplane.CodeBadRequest},
		{"unterminated at two over the limit", `"123456789012`, 0, varplane.CodeLimitExceeded},
		{"unterminated within the limit", `"1234567890`, 0, varplane.CodeBadRequest},
		{"over the limit before an escape", `"12345678901\n"`, 0, varplane.CodeLimitExceeded},
		{"over the limit before non-ASCII", `"12345678901é"`, 0, varplane.CodeLimitExceeded},
		{"at the limit with an escape", `"12345678\n"`, 0, ""},
		{"over the limit by an escape", `"123456789\n"`, 0, varplane.CodeLimitExceeded},
		{"control character over the limit", "\"12345678901\x01\"", 0, varplane.CodeLimitExceeded},
		{"number at the limit", `123456`, 0, ""},
		{"number over the limit", `1234567`, 0, varplane.CodeLimitExceeded},
		{"members at the limit", `[1,2,3]`, 0, ""},
		{"members over the limit", `[1,2,3,4]`, 0, varplane.CodeLimitExceeded},
		{"object members over the limit", `{"a":1,"b":2,"c":3,"d":4}`, 0, varplane.CodeLimitExceeded},
		{"body over the limit", `"` + strings.Repeat("a", 2000) + `"`, 0, varplane.CodePayloadTooLarge},
		{"trailing data", `{} {}`, 0, varplane.CodeBadRequest},
		{"trailing comma", `[1,]`, 0, varplane.CodeBadRequest},
		{"bad utf-8", "\"\xff\"", 0, varplane.CodeBadRequest},
		{"control character", "\"\x01\"", 0, varplane.CodeBadRequest},
		{"bad escape", `"\x"`, 0, varplane.CodeBadRequest},
		{"leading zero", `01`, 0, varplane.CodeBadRequest},
		{"empty", ``, 0, varplane.CodeBadRequest},
		{"white space", " \n[ 1 , 2 ]\t", 0, ""},
		{"unclosed", `[1`, 0, varplane.CodeBadRequest},
		{"mismatched", `[1}`, 0, varplane.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := small.CheckJSON([]byte(tt.in), tt.extra)
			if got := code(err); got != tt.code {
				t.Fatalf("CheckJSON(%q) = %v, want code %q", tt.in, err, tt.code)
			}
		})
	}
}

func code(err error) varplane.Code {
	if err == nil {
		return ""
	}
	return varplane.ErrorCode(err)
}

func TestLimitsDeepDocumentIsRefusedCheaply(t *testing.T) {
	// 200 KB of brackets: refused at the 65th level without recursion.
	doc := []byte(strings.Repeat("[", 200_000) + strings.Repeat("]", 200_000))
	err := varplane.DefaultLimits().CheckJSON(doc, 0)
	var e *varplane.Error
	if !errors.As(err, &e) || e.Code != varplane.CodeLimitExceeded || !strings.Contains(e.Message, "byte 64") {
		t.Fatalf("got %v, want limit-exceeded at byte 64", err)
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := (varplane.Limits{MaxDepth: varplane.MaxDepthCeiling}).Validate(); err != nil {
		t.Fatalf("the ceiling itself: %v", err)
	}
	if err := (varplane.Limits{MaxDepth: varplane.MaxDepthCeiling + 1}).Validate(); err == nil {
		t.Fatal("a depth over the ceiling was accepted")
	}
	if err := (varplane.Limits{MaxBodyBytes: varplane.MaxBodyCeiling + 1}).Validate(); err == nil {
		t.Fatal("a body limit over the ceiling was accepted")
	}
}

// FuzzLimitsCheckJSON holds the scanner to encoding/json's grammar: with
// limits too wide to matter, it accepts exactly the valid UTF-8 that
// json.Valid accepts (encoding/json alone lets invalid UTF-8 through).
func FuzzLimitsCheckJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2]`, `{"a":"b\u00e9"}`, `-0.5e+3`, `"\ud800"`, `[`, `{"a" 1}`, "\"\xc3\x28\"", ` true `, `nul`} {
		f.Add([]byte(s))
	}
	wide := varplane.Limits{MaxBodyBytes: 1 << 30, MaxDepth: 1 << 20, MaxStringBytes: 1 << 30, MaxNumberBytes: 1 << 30, MaxMembers: 1 << 30}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := wide.CheckJSON(b, 0)
		if got, want := err == nil, json.Valid(b) && utf8.Valid(b); got != want {
			t.Fatalf("CheckJSON(%q) = %v, json.Valid = %v", b, err, want)
		}
	})
}

func TestLimitsCheckAndCompact(t *testing.T) {
	small := varplane.Limits{MaxBodyBytes: 1 << 10, MaxDepth: 3, MaxStringBytes: 10, MaxNumberBytes: 6, MaxMembers: 3}
	tests := []struct {
		name string
		in   string
		want string
		code varplane.Code
	}{
		{"compact already", `{"a":[1,2]}`, `{"a":[1,2]}`, ""},
		{"white space everywhere", " \n{ \"a\" :\t[ 1 , 2 ] }\r\n", `{"a":[1,2]}`, ""},
		{"white space inside strings kept", `[ "a b" , "\t" ]`, `["a b","\t"]`, ""},
		{"escapes and number text kept", `[ "\u00e9\/" , 1.5E+3 ]`, `["\u00e9\/",1.5E+3]`, ""},
		{"leading white space only", `  1`, `1`, ""},
		{"trailing white space only", `true  `, `true`, ""},
		{"a limit still refused", `[ 1 , 2 , 3 , 4 ]`, "", varplane.CodeLimitExceeded},
		{"malformed still refused", `[ 1 , ]`, "", varplane.CodeBadRequest},
		{"size counts the white space", `"` + strings.Repeat(" ", 1030) + `"`, "", varplane.CodePayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := small.CheckAndCompact([]byte(tt.in), 0)
			if c := code(err); c != tt.code {
				t.Fatalf("CheckAndCompact(%q) = %v, want code %q", tt.in, err, tt.code)
			}
			if err == nil && string(got) != tt.want {
				t.Fatalf("CheckAndCompact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzLimitsCheckAndCompact holds the one-pass check and compaction to the
// two passes it replaces: the verdict of CheckJSON, with the same code, and
// the bytes of json.Compact, at small limits (so that limits are reached)
// and at limits too wide to matter.
func FuzzLimitsCheckAndCompact(f *testing.F) {
	for _, s := range []string{`{}`, ` [ 1 , 2 ] `, "{\"a\" :\n\"b\\u00e9\"}", `-0.5e+3`, `"\ud800"`, `[`, `{"a" 1}`, "\"\xc3\x28\"", ` true `, `nul`, `[[[[1]]]]`, `"a  b"`} {
		f.Add([]byte(s))
	}
	small := varplane.Limits{MaxBodyBytes: 64, MaxDepth: 3, MaxStringBytes: 8, MaxNumberBytes: 6, MaxMembers: 4}
	wide := varplane.Limits{MaxBodyBytes: 1 << 30, MaxDepth: 1 << 20, MaxStringBytes: 1 << 30, MaxNumberBytes: 1 << 30, MaxMembers: 1 << 30}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, lim := range []varplane.Limits{small, wide} {
			in := bytes.Clone(b)
			got, err := lim.CheckAndCompact(in, 0)
			want := lim.CheckJSON(b, 0)
			if code(err) != code(want) {
				t.Fatalf("CheckAndCompact(%q) = %v, CheckJSON = %v", b, err, want)
			}
			if !bytes.Equal(in, b) {
				t.Fatalf("CheckAndCompact(%q) changed its input to %q", b, in)
			}
			if err != nil {
				continue
			}
			var c bytes.Buffer
			if err := json.Compact(&c, b); err != nil {
				t.Fatalf("CheckAndCompact(%q) accepted what json.Compact refuses: %v", b, err)
			}
			if !bytes.Equal(got, c.Bytes()) {
				t.Fatalf("CheckAndCompact(%q) = %q, json.Compact = %q", b, got, c.Bytes())
			}
		}
	})
}
