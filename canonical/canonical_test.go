package canonical_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/varplane/varplane/canonical"
)

func mustTransform(t *testing.T, in string) string {
	t.Helper()
	out, err := canonical.Transform([]byte(in))
	if err != nil {
		t.Fatalf("Transform(%q): %v", in, err)
	}
	return string(out)
}

// TestNumberFormattingRFCVectors feeds the IEEE 754 values of RFC 8785
// Appendix B, written in Go's shortest form, and expects the ECMAScript
// serialisation the RFC lists.
func TestNumberFormattingRFCVectors(t *testing.T) {
	tests := []struct {
		bits uint64
		want string // "" when refused: the canonical form is an integer beyond 2^53
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, ""}, // RFC: 295147905179352830000
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, ""}, // RFC: 999999999999999700000
		{0x444b1ae4d6e2ef4f, ""}, // RFC: 999999999999999900000
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		// The exponent form keeps large integral doubles out of the
		// integer-literal check, which is about literals, not values.
		in := strconv.FormatFloat(math.Float64frombits(tt.bits), 'e', -1, 64)
		t.Run(in, func(t *testing.T) {
			if tt.want == "" {
				if out, err := canonical.Transform([]byte(in)); !errors.Is(err, canonical.ErrUnsafeNumber) {
					t.Errorf("Transform(%s) = %s, %v; want ErrUnsafeNumber", in, out, err)
				}
				return
			}
			if got := mustTransform(t, in); got != tt.want {
				t.Errorf("Transform(%s) = %s, want %s", in, got, tt.want)
			}
		})
	}
}

func TestNumberFormattingLiterals(t *testing.T) {
	tests := []struct{ in, want string }{
		{"1e+30", "1e+30"},
		{"1E30", "1e+30"},
		{"1e30", "1e+30"},
		{"4.50", "4.5"},
		{"2e-3", "0.002"},
		{"0.000001", "0.000001"},
		{"1e-7", "1e-7"},
		{"0.0000001", "1e-7"},
		{"-0", "0"},
		{"-0.0", "0"},
		{"333333333.33333329", "333333333.3333333"},
		{"0.000000000000000000000000001", "1e-27"},
		{"1e21", "1e+21"},
		{"100", "100"},
		{"-17", "-17"},
		{"1.5e300", "1.5e+300"},
		{"9007199254740992", "9007199254740992"},
		{"-9007199254740992", "-9007199254740992"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := mustTransform(t, tt.in); got != tt.want {
				t.Errorf("Transform(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// TestRFCExample is the complete example of RFC 8785 section 3.2.3.
func TestRFCExample(t *testing.T) {
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
	if got := mustTransform(t, in); got != want {
		t.Errorf("Transform =\n%s\nwant\n%s", got, want)
	}
}

// TestKeySortUTF16 is the sorting example of RFC 8785 section 3.2.3: keys
// order by UTF-16 code units, so U+1F600 (a surrogate pair starting 0xD83D)
// sorts before U+FB33.
func TestKeySortUTF16(t *testing.T) {
	in := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := `{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign","😀":"Emoji: Grinning Face","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}`
	if got := mustTransform(t, in); got != want {
		t.Errorf("Transform =\n%q\nwant\n%q", got, want)
	}
}

func TestNestedKeySort(t *testing.T) {
	in := `{"b":{"z":1,"a":[{"y":true,"x":null}]},"a":"first","aa":0,"A":1}`
	want := `{"A":1,"a":"first","aa":0,"b":{"a":[{"x":null,"y":true}],"z":1}}`
	if got := mustTransform(t, in); got != want {
		t.Errorf("Transform = %s, want %s", got, want)
	}
}

func TestStringEscaping(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"named control escapes", `"\b\t\n\f\r"`, `"\b\t\n\f\r"`},
		{"other controls lowercase hex", `"\u0000\u0001\u000B\u001F"`, `"\u0000\u0001\u000b\u001f"`},
		{"solidus unescaped", `"a\/b/c"`, `"a/b/c"`},
		{"html characters unescaped", `"\u003c<>&\u0026\u003e"`, `"<<>&&>"`},
		{"quote and backslash", `"\"\\"`, `"\"\\"`},
		{"unicode escape decoded", `"\u00e9\u4e2d"`, `"é中"`},
		{"raw unicode passed through", `"グループ.日本.ключ"`, `"グループ.日本.ключ"`},
		{"surrogate pair decoded", `"\uD83D\uDE00"`, `"😀"`},
		{"line separators raw", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"DEL raw", `"\u007f"`, "\"\x7f\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustTransform(t, tt.in); got != tt.want {
				t.Errorf("Transform(%s) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestWhitespaceRemoved(t *testing.T) {
	in := " \t\r\n{ \"a\" :\n[ 1 ,\t2 , { } , [ ] ] ,\r\n \"b\" : \"x y\" } \n"
	want := `{"a":[1,2,{},[]],"b":"x y"}`
	if got := mustTransform(t, in); got != want {
		t.Errorf("Transform = %q, want %q", got, want)
	}
}

func TestTransformRejects(t *testing.T) {
	tests := []struct{ name, in string }{
		{"duplicate key", `{"a":1,"a":2}`},
		{"nested duplicate key", `{"x":{"a":1,"b":2,"a":1}}`},
		{"duplicate key after escape decoding", `{"a":1,"\u0061":1}`},
		{"lone high surrogate", `"\ud800"`},
		{"lone high surrogate then char", `"\ud800x"`},
		{"lone low surrogate", `"\udc00"`},
		{"high surrogate then non-surrogate", `"\ud800\u0041"`},
		{"invalid utf-8", "\"\xff\""},
		{"raw control char", "\"a\x01\""},
		{"trailing garbage", `{"a":1}x`},
		{"two values", `1 2`},
		{"trailing comma", `[1,]`},
		{"empty", ``},
		{"leading zero", `01`},
		{"hex number", `0x10`},
		{"NaN", `NaN`},
		{"single quotes", `'a'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := canonical.Transform([]byte(tt.in)); err == nil {
				t.Errorf("Transform(%q) = %q, want error", tt.in, out)
			}
			if _, err := canonical.Digest([]byte(tt.in)); err == nil {
				t.Errorf("Digest(%q) succeeded, want error", tt.in)
			}
		})
	}
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func TestDigest(t *testing.T) {
	// sha256 of the canonical bytes `{"a":1}`, computed independently.
	const wantAOne = "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
	got, err := canonical.Digest([]byte(`{ "a" : 1.0 }`))
	if err != nil {
		t.Fatal(err)
	}
	if got != wantAOne {
		t.Errorf("Digest = %s, want %s", got, wantAOne)
	}
	if !digestRE.MatchString(got) {
		t.Errorf("Digest = %q, not sha256: + 64 lowercase hex", got)
	}
	if !strings.HasPrefix(got, canonical.DigestPrefix) {
		t.Errorf("Digest = %q lacks prefix %q", got, canonical.DigestPrefix)
	}
	if c := canonical.DigestCanonical([]byte(`{"a":1}`)); c != got {
		t.Errorf("DigestCanonical = %s, want %s", c, got)
	}
}

func TestDigestEqualValues(t *testing.T) {
	pairs := []struct{ a, b string }{
		{`{"a":1,"b":[true,null]}`, "{\n  \"b\" : [ true , null ],\n  \"a\" : 1\n}"},
		{`{"s":"\u00e9/<"}`, `{"s":"é\/\u003c"}`},
		{`[1e2, 4.50, -0]`, `[100,4.5,0]`},
		{`{"\ud83d\ude00":"x"}`, `{"😀":"\u0078"}`},
	}
	for _, p := range pairs {
		da, err := canonical.Digest([]byte(p.a))
		if err != nil {
			t.Fatal(err)
		}
		db, err := canonical.Digest([]byte(p.b))
		if err != nil {
			t.Fatal(err)
		}
		if da != db {
			t.Errorf("Digest(%s) = %s, Digest(%s) = %s; want equal", p.a, da, p.b, db)
		}
	}
	da, _ := canonical.Digest([]byte(`{"a":1}`))
	db, _ := canonical.Digest([]byte(`{"a":2}`))
	if da == db {
		t.Errorf("different values share digest %s", da)
	}
}

func TestUnsafeNumbersRefused(t *testing.T) {
	tests := []struct {
		name, in, path string
	}{
		{"top level 2^53+1", `9007199254740993`, ""},
		{"top level -(2^53+1)", `-9007199254740993`, ""},
		{"beyond int64", `123456789012345678901234567890`, ""},
		{"object member", `{"a":1,"big":9007199254740993}`, "/big"},
		{"array element", `[1,2,18014398509481984]`, "/2"},
		{"nested", `{"a":{"b":[0,{"c":[1,9007199254740995]}]}}`, "/a/b/1/c/1"},
		{"tilde and slash in keys", `{"a~b":{"c/d":9007199254740993}}`, "/a~0b/c~1d"},
		{"key ~1 literally", `{"~1":9007199254740993}`, "/~01"},
		{"empty key", `{"":9007199254740993}`, "/"},
		{"after nested containers", `{"x":[[],{}],"y":{"z":[{}]},"w":9007199254740993}`, "/w"},
		{"double overflow", `{"f":1e400}`, "/f"},
		{"negative overflow", `[-1e400]`, "/0"},
		{"underflow to zero", `{"tiny":1e-400}`, "/tiny"},
		{"float notation of big integer", `{"e":1e16}`, "/e"},
		{"fraction zero of big integer", `[10000000000000000.0]`, "/0"},
		{"fraction rounding to big integer", `[9007199254740993.5]`, "/0"},
		{"negative float notation", `[-1e20]`, "/0"},
		{"integer literal at 1e21", `[1000000000000000000000]`, "/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := canonical.Transform([]byte(tt.in))
			var un *canonical.UnsafeNumber
			if !errors.As(err, &un) {
				t.Fatalf("Transform(%s) error = %v, want *UnsafeNumber", tt.in, err)
			}
			if un.Path != tt.path {
				t.Errorf("Path = %q, want %q", un.Path, tt.path)
			}
			if !errors.Is(err, canonical.ErrUnsafeNumber) {
				t.Errorf("errors.Is(%v, ErrUnsafeNumber) = false", err)
			}
			if _, err := canonical.Digest([]byte(tt.in)); !errors.Is(err, canonical.ErrUnsafeNumber) {
				t.Errorf("Digest error = %v, want ErrUnsafeNumber", err)
			}
			if err := canonical.SafeNumbers([]byte(tt.in)); !errors.As(err, &un) || un.Path != tt.path {
				t.Errorf("SafeNumbers = %v, want *UnsafeNumber at %q", err, tt.path)
			}
		})
	}
}

func TestUnsafeNumberMessageOmitsValue(t *testing.T) {
	err := canonical.SafeNumbers([]byte(`{"k":9007199254740993}`))
	if err == nil {
		t.Fatal("SafeNumbers: want error")
	}
	if msg := err.Error(); strings.Contains(msg, "9007199254740993") || !strings.Contains(msg, "/k") {
		t.Errorf("message %q: want the path and not the value", msg)
	}
}

func TestSafeNumbersAccepted(t *testing.T) {
	for _, in := range []string{
		`9007199254740992`,
		`-9007199254740992`,
		`1.5e300`,
		`-1.5e300`,
		`1.7976931348623157e308`,
		`5e-324`,
		`9007199254740992.0`,
		`1e21`,
		`-1e21`,
		`9007199254740993.5e10`,
		`123456789.123456789`,
		`0`, `-0`, `0e10`, `0.0`,
		`{"a":[1,2.5,"9007199254740993"]}`,
	} {
		if err := canonical.SafeNumbers([]byte(in)); err != nil {
			t.Errorf("SafeNumbers(%s) = %v, want nil", in, err)
		}
		if _, err := canonical.Transform([]byte(in)); err != nil {
			t.Errorf("Transform(%s) = %v, want nil", in, err)
		}
	}
}

func TestUnsafeNumbersLimit(t *testing.T) {
	in := []byte(`{"a":9007199254740993,"b":[1e400,2],"c":{"d":-9007199254740994}}`)
	all, err := canonical.UnsafeNumbers(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, u := range all {
		paths = append(paths, u.Path)
	}
	if got, want := paths, []string{"/a", "/b/0", "/c/d"}; !reflect.DeepEqual(got, want) {
		t.Errorf("paths = %q, want %q", got, want)
	}
	two, err := canonical.UnsafeNumbers(in, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(two), 2; got != want {
		t.Errorf("len with limit 2 = %d, want %d", got, want)
	}
	for _, bad := range []string{`{"a":`, `[1,2`, ``, `1 2`, `{} []`, `{"a" 1}`} {
		if _, err := canonical.UnsafeNumbers([]byte(bad), 0); err == nil {
			t.Errorf("UnsafeNumbers(%q): want error", bad)
		}
		if err := canonical.SafeNumbers([]byte(bad)); err == nil || errors.Is(err, canonical.ErrUnsafeNumber) {
			t.Errorf("SafeNumbers(%q) = %v, want a plain syntax error", bad, err)
		}
	}
}

// FuzzTransform checks the invariants that make canonical bytes an identity:
// canonicalising is idempotent, and the canonical form is valid JSON holding
// the same value as the input.
func FuzzTransform(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null]}`,
		`"\u20ac\ud83d\ude00\u000f"`,
		`[1e30,4.50,2e-3,-0,333333333.33333329]`,
		`{"\u0080":1,"\r":2,"1":3}`,
		`9007199254740993`,
		`{"a~/":[{"b":1e400}]}`,
		`"\ud800"`,
		`{"a":1,"a":2}`,
		"\"\xff\"",
		` [ ] `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = canonical.UnsafeNumbers(data, 0) // must not panic
		out, err := canonical.Transform(data)
		if err != nil {
			return
		}
		again, err := canonical.Transform(out)
		if err != nil {
			t.Fatalf("Transform(canonical %q): %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", data, out, again)
		}
		if !json.Valid(out) {
			t.Fatalf("canonical form %q is not valid JSON", out)
		}
		var want, got any
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("input %q accepted by Transform but not by encoding/json: %v", data, err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("Unmarshal(%q): %v", out, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("value changed: %q (%#v) -> %q (%#v)", data, want, out, got)
		}
		if d, c := mustDigest(t, data), canonical.DigestCanonical(out); d != c {
			t.Fatalf("Digest = %s, DigestCanonical(Transform) = %s", d, c)
		}
	})
}

func mustDigest(t *testing.T, data []byte) string {
	t.Helper()
	d, err := canonical.Digest(data)
	if err != nil {
		t.Fatalf("Digest(%q): %v", data, err)
	}
	return d
}
