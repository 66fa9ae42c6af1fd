package jsontext

import (
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{`<a&b>`, `"<a&b>"`},
		{"q\"b\\", `"q\"b\\"`},
		{"\n\r\t\x01", `"\n\r\t\u0001"`},
		{"\u2028\u2029", `"\u2028\u2029"`},
		{"\xff", `"\ufffd"`},
		{"グループ", `"グループ"`},
	}
	for _, tt := range tests {
		if got := string(AppendString(nil, tt.in)); got != tt.want {
			t.Errorf("AppendString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzAppendString holds AppendString to Marshal: the one writer writes a
// string the way the one encoder does.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "<>&", "\u2028", "\xff\xfe", "\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, Marshal = %s", s, got, want)
		}
	})
}

// TestAppendCanonicalString: the canonical form of a string is what RFC
// 8785 makes of AppendString's output (U+2028 and U+2029 unescaped, the
// replacement of invalid UTF-8 as the character itself), and both decode to
// the same text.
func TestAppendCanonicalString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x1f\n\t\b\f\r", "\u2028\u2029", "é日\x7f", "bad \xff byte", "<&>"} {
		ours := AppendString(nil, s)
		want, err := jcs.Transform(ours)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got := AppendCanonicalString(nil, s); string(got) != string(want) {
			t.Errorf("%q: canonical %s, RFC 8785 gives %s", s, got, want)
		}
		var a, b string
		if json.Unmarshal(ours, &a) != nil || json.Unmarshal(want, &b) != nil || a != b {
			t.Errorf("%q: the two forms decode to %q and %q", s, a, b)
		}
	}
}
