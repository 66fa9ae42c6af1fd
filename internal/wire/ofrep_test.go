package wire_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/wire"
)

func TestParseFlagKey(t *testing.T) {
	tests := []struct {
		key    string
		scope  string
		tokens []string
		ok     bool
	}{
		{"agentic.lanes.vinci#/enabled", "agentic.lanes.vinci", []string{"enabled"}, true},
		{"agentic.lanes.vinci", "agentic.lanes.vinci", nil, true},
		{"agentic.lanes.vinci#", "agentic.lanes.vinci", nil, true},
		{"a#/", "a", []string{""}, true},
		{"a#//", "a", []string{"", ""}, true},
		{"a#/x~1y/~0z/0", "a", []string{"x/y", "~z", "0"}, true},
		{"a#/x#y", "a", []string{"x#y"}, true},
		{"a/b#/c", "a/b", []string{"c"}, true},
		{"a#x", "", nil, false},
		{"a#/~2", "", nil, false},
		{"a#/~", "", nil, false},
		{"#/x", "", nil, false},
		{"", "", nil, false},
		{"a..b", "", nil, false},
		{"a b", "", nil, false},
		{"a#/" + strings.Repeat("x", wire.MaxFlagKeyBytes), "", nil, false},
	}
	for _, tt := range tests {
		fk, err := wire.ParseFlagKey(tt.key)
		if (err == nil) != tt.ok {
			t.Errorf("%q: err %v", tt.key, err)
			continue
		}
		if !tt.ok {
			if varplane.ErrorCode(err) != varplane.CodeBadRequest || strings.Contains(err.Error(), "xxxx") {
				t.Errorf("%q: %v", tt.key, err)
			}
			continue
		}
		if string(fk.Scope) != tt.scope || strings.Join(fk.Tokens, "|") != strings.Join(tt.tokens, "|") || len(fk.Tokens) != len(tt.tokens) {
			t.Errorf("%q: %+v", tt.key, fk)
		}
	}
}

func TestLookupFlag(t *testing.T) {
	doc := []byte(`{"a":{"b":[1,{"c":"d"}],"":5,"x/y":6,"~":7},"e":null,"f":[]}`)
	tests := []struct {
		ptr, want string
	}{
		{"", string(doc)},
		{"/a/b/0", "1"},
		{"/a/b/1/c", `"d"`},
		{"/a/b/1", `{"c":"d"}`},
		{"/a/", "5"},
		{"/a/x~1y", "6"},
		{"/a/~0", "7"},
		{"/e", "null"},
		{"/f", "[]"},
		{"/a/b/2", ""},
		{"/a/b/01", ""},
		{"/a/b/-", ""},
		{"/f/0", ""},
		{"/e/x", ""},
		{"/zz", ""},
		{"/a/b/0/x", ""},
	}
	for _, tt := range tests {
		fk, err := wire.ParseFlagKey("s#" + tt.ptr)
		if err != nil {
			t.Fatal(err)
		}
		v, err := wire.LookupFlag(doc, fk.Tokens)
		if tt.want == "" {
			if err != wire.ErrFlagValueNotFound {
				t.Errorf("%q: %s %v, want not found", tt.ptr, v, err)
			}
			continue
		}
		if err != nil || string(v) != tt.want {
			t.Errorf("%q: %s %v, want %s", tt.ptr, v, err, tt.want)
		}
	}
}

// FuzzParseFlagKey: the parser never panics, refuses past its bound, and
// what it accepts is a valid scope and tokens that escape back to the
// pointer it read; looking them up in a document never panics and finds
// a valid JSON value or nothing.
func FuzzParseFlagKey(f *testing.F) {
	for _, s := range []string{"agentic.lanes.vinci#/enabled", "a", "a#", "a#/", "a#/~0~1", "a#/~2", "#", "a.#/b/0", "a#/x#/y"} {
		f.Add(s)
	}
	const docText = `{"a":{"b":[1,{"c":"d"}],"":5,"x/y":6,"~":7,"s\u0041":"\"q\""},"e":null,"0":[true]}`
	doc := []byte(docText)
	f.Fuzz(func(t *testing.T, key string) {
		fk, err := wire.ParseFlagKey(key)
		if err != nil {
			if varplane.ErrorCode(err) != varplane.CodeBadRequest {
				t.Fatalf("%q: %v", key, err)
			}
			return
		}
		if len(key) > wire.MaxFlagKeyBytes || !fk.Scope.Valid() || strings.Contains(string(fk.Scope), "#") {
			t.Fatalf("%q accepted as %+v", key, fk)
		}
		ptr := ""
		for _, tok := range fk.Tokens {
			ptr += "/" + canonical.EscapeToken(tok)
		}
		if ptr != fk.Pointer || string(fk.Scope)+"#"+ptr != key && string(fk.Scope) != key {
			t.Fatalf("%q: tokens %q escape back to %q", key, fk.Tokens, ptr)
		}
		v, err := wire.LookupFlag(doc, fk.Tokens)
		if err == nil && !json.Valid(v) || err != nil && err != wire.ErrFlagValueNotFound {
			t.Fatalf("%q: lookup %s %v", key, v, err)
		}
		if string(doc) != docText {
			t.Fatalf("%q: the lookup changed the document: %s", key, doc)
		}
	})
}

// Lookups run at once (each request's flags) share nothing but the
// documents they read, which they leave as they were.
func TestLookupFlagConcurrent(t *testing.T) {
	doc := []byte(`{"a":{"b":[1,{"c":"d"}]},"e":"f"}`)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				v, err := wire.LookupFlag(doc, []string{"a", "b", "1", "c"})
				if err != nil || string(v) != `"d"` {
					t.Errorf("%s %v", v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if string(doc) != `{"a":{"b":[1,{"c":"d"}]},"e":"f"}` {
		t.Fatalf("document changed: %s", doc)
	}
}

// TestFlagKeyProperty: for any document of nested objects and arrays and
// any path into it, the key written from the scope and the path's tokens
// (escaped as RFC 6901 says) parses back to those tokens, and the lookup
// finds the very value at that path.
func TestFlagKeyProperty(t *testing.T) {
	name := rapid.SampledFrom([]string{"a", "", "/", "~", "~1", "#", "a/b", "~0~", "é", "0", "01", "-", " ", "\"q\"", "x\\y"})
	var value func(depth int) *rapid.Generator[any]
	value = func(depth int) *rapid.Generator[any] {
		return rapid.Custom(func(rt *rapid.T) any {
			k := rapid.IntRange(0, 4).Draw(rt, "kind")
			if depth == 0 {
				k = rapid.IntRange(0, 2).Draw(rt, "leaf")
			}
			switch k {
			case 0:
				return rapid.Bool().Draw(rt, "bool")
			case 1:
				return float64(rapid.IntRange(-1000, 1000).Draw(rt, "num"))
			case 2:
				return name.Draw(rt, "str")
			case 3:
				m := map[string]any{}
				for i, n := 0, rapid.IntRange(0, 4).Draw(rt, "members"); i < n; i++ {
					m[name.Draw(rt, "name")] = value(depth-1).Draw(rt, "member")
				}
				return m
			default:
				return rapid.SliceOfN(value(depth-1), 0, 4).Draw(rt, "elements")
			}
		})
	}
	rapid.Check(t, func(rt *rapid.T) {
		root := value(4).Draw(rt, "doc")
		doc, err := json.Marshal(root)
		if err != nil {
			rt.Fatal(err)
		}
		// Walk down a random path, recording its tokens.
		var tokens []string
		cur := root
		for rapid.Bool().Draw(rt, "deeper") {
			switch v := cur.(type) {
			case map[string]any:
				if len(v) == 0 {
					break
				}
				keys := make([]string, 0, len(v))
				for k := range v {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				tokens, cur = append(tokens, k), v[k]
				continue
			case []any:
				if len(v) == 0 {
					break
				}
				i := rapid.IntRange(0, len(v)-1).Draw(rt, "index")
				tokens, cur = append(tokens, strconv.Itoa(i)), v[i]
				continue
			}
			break
		}
		key := "agentic.lanes.vinci"
		if len(tokens) > 0 || rapid.Bool().Draw(rt, "hash") {
			key += "#"
		}
		for _, tok := range tokens {
			key += "/" + canonical.EscapeToken(tok)
		}
		fk, err := wire.ParseFlagKey(key)
		if err != nil {
			rt.Fatalf("%q: %v", key, err)
		}
		if fk.Scope != "agentic.lanes.vinci" || len(fk.Tokens) != len(tokens) {
			rt.Fatalf("%q parsed as %+v", key, fk)
		}
		for i := range tokens {
			if fk.Tokens[i] != tokens[i] {
				rt.Fatalf("%q: token %d is %q, want %q", key, i, fk.Tokens[i], tokens[i])
			}
		}
		got, err := wire.LookupFlag(doc, fk.Tokens)
		if err != nil {
			rt.Fatalf("%q in %s: %v", key, doc, err)
		}
		var gotV any
		if err := json.Unmarshal(got, &gotV); err != nil || !reflect.DeepEqual(gotV, cur) {
			rt.Fatalf("%q in %s: %s, want %v", key, doc, got, cur)
		}
	})
}
