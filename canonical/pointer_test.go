package canonical_test

import (
	"testing"

	"github.com/varplane/varplane/canonical"
)

func TestPointerToken(t *testing.T) {
	for _, tc := range []struct{ raw, escaped string }{
		{"", ""}, {"a", "a"}, {"a/b", "a~1b"}, {"~", "~0"}, {"~1", "~01"}, {"/~/", "~1~0~1"}, {"é/ü", "é~1ü"},
	} {
		if got := canonical.EscapeToken(tc.raw); got != tc.escaped {
			t.Errorf("EscapeToken(%q) = %q, want %q", tc.raw, got, tc.escaped)
		}
		if got, ok := canonical.UnescapeToken(tc.escaped); !ok || got != tc.raw {
			t.Errorf("UnescapeToken(%q) = %q, %v, want %q", tc.escaped, got, ok, tc.raw)
		}
	}
	for _, bad := range []string{"~", "a~", "~2", "~~0"} {
		if _, ok := canonical.UnescapeToken(bad); ok {
			t.Errorf("UnescapeToken(%q) accepted a bad escape", bad)
		}
	}
}

func FuzzPointerToken(f *testing.F) {
	for _, s := range []string{"", "a/b", "~0~1", "~", "/~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, ok := canonical.UnescapeToken(canonical.EscapeToken(s)); !ok || got != s {
			t.Fatalf("round trip of %q = %q, %v", s, got, ok)
		}
	})
}
