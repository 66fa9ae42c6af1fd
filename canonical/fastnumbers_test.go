package canonical

import "testing"

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
