package jsontext

import (
	"testing"
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
