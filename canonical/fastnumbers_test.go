package canonical

import (
	"testing"

	"github.com/gowebpki/jcs"
)

func TestShortIntegersOnly(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{"a":1,"b":[true,false,null],"c":"x"}`, true},
		{`{"n":-123456789012345}`, true},
		{`{"n":1234567890123456}`, false}, // 16 digits: the tokenising way decides
		{`{"n":1.5}`, false},
		{`{"n":1e3}`, false},
		{`{"n":-0}`, true},
		{`{"s":"1.5e999 \" 12345678901234567890"}`, true}, // numbers inside strings do not count
		{`{"s":"\\"}`, true},
		{`{"a":1`, false},   // invalid JSON
		{`{"a":01}`, false}, // invalid JSON
		{`1 2`, false},      // two values
		{`"x`, false},
		{``, false},
		{`-`, false},
	}
	for _, tc := range tests {
		if got := shortIntegersOnly([]byte(tc.in)); got != tc.want {
			t.Errorf("shortIntegersOnly(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzShortIntegersFastPath checks that the fast path answers only what the
// tokenising way would: no unsafe number and no error.
func FuzzShortIntegersFastPath(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[9007199254740993]`, `{"a":"1\"2"}`, `[1.0]`, `[-0,0,1]`, `{"a":[{"b":123456789012345}]}`, `[1]x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !shortIntegersOnly(data) {
			return
		}
		got, err := unsafeNumbersTokens(data, 0)
		if err != nil || len(got) > 0 {
			t.Errorf("fast path took %q, but the tokenising way answers %v, %v", data, got, err)
		}
	})
}

func TestSimpleCanonical(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{"a":1,"b":[true,false,null],"c":"x y/<&>"}`, true},
		{`{}`, true},
		{`[]`, true},
		{`0`, true},
		{`-12`, true},
		{`{"a":{"b":[{"c":-1}]},"b":"0"}`, true},
		{`{"b":1,"a":2}`, false},  // unsorted
		{`{"a":1,"a":2}`, false},  // duplicate
		{`{"a": 1}`, false},       // whitespace
		{`{"a":1.0}`, false},      // a float
		{`{"a":-0}`, false},       // canonical is 0
		{`{"a":01}`, false},       // invalid
		{`{"a":"\u0041"}`, false}, // an escape
		{`{"a":"é"}`, false},      // non-ASCII
		{`{"a":1234567890123456}`, false},
		{`{"a":1}x`, false},
		{`{"a":1,}`, false},
		{`[1,]`, false},
		{`tru`, false},
		{``, false},
	}
	for _, tc := range tests {
		if got := simpleCanonical([]byte(tc.in)); got != tc.want {
			t.Errorf("simpleCanonical(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzSimpleCanonical checks that whatever simpleCanonical accepts is its
// own canonical form as the general transform writes it.
func FuzzSimpleCanonical(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null]}`, `{"b":1,"a":2}`, `[-1,0,"x"]`, `{"":{"":""}}`, `{"a":"~"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !simpleCanonical(data) {
			return
		}
		out, err := jcs.Transform(data)
		if err != nil || string(out) != string(data) {
			t.Errorf("simpleCanonical accepted %q, but its canonical form is %q (%v)", data, out, err)
		}
	})
}
