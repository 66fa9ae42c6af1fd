package varplane_test

import (
	"bytes"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/varplane/varplane"
)

func TestCheckedBodyDocument(t *testing.T) {
	lim := varplane.Limits{MaxDepth: 4}
	tests := []struct {
		name   string
		body   string
		doc    string
		last   bool
		extra  int
		vouchs bool
	}{
		{"a compact member", `{"scope":"a","document":{"b":[1,2]}}`, `{"b":[1,2]}`, false, 1, true},
		{"white space around the member only", `{ "document" : {"b":1} , "x":2 }`, `{"b":1}`, false, 1, true},
		{"a scalar member", `{"n":12,"s":"x y"}`, `"x y"`, false, 1, true},
		{"white space inside the member", `{"document":{"b": 1}}`, `{"b": 1}`, false, 1, false},
		{"the same bytes inside a string", `{"s":"[1]","d":[1]}`, `[1]`, false, 1, false},
		{"the member after that string", `{"s":"[1]","d":[1]}`, `[1]`, true, 1, true},
		{"a value nested deeper", `{"a":{"b":[1]}}`, `[1]`, false, 1, false},
		{"a part of a member", `{"d":[1,2]}`, `[1`, false, 1, false},
		{"an element of a top-level array", `[[1],2]`, `[1]`, false, 1, false},
		{"a body checked with more envelope", `{"d":{"a":{}}}`, `{"a":{}}`, false, 2, false},
		{"a body checked without envelope", `{"d":{"a":{}}}`, `{"a":{}}`, false, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// doc is the occurrence of tt.doc in the body itself, not a copy.
			full := []byte(tt.body)
			off := bytes.Index(full, []byte(tt.doc))
			if tt.last {
				off = bytes.LastIndex(full, []byte(tt.doc))
			}
			doc := full[off : off+len(tt.doc)]
			cb, err := lim.CheckBody(full, tt.extra)
			if err != nil {
				t.Fatal(err)
			}
			c := cb.Document(doc)
			if c.Holds(doc) != tt.vouchs {
				t.Fatalf("Document(%s) of %s holds it: %v, want %v", tt.doc, tt.body, c.Holds(doc), tt.vouchs)
			}
			if c.Holds(bytes.Clone(doc)) {
				t.Fatalf("a copy of %s is vouched for", tt.doc)
			}
			if tt.vouchs && c.MaxDepth() > lim.WithDefaults().MaxDepth {
				t.Fatalf("a document held to depth %d, beyond the limit %d", c.MaxDepth(), lim.MaxDepth)
			}
		})
	}
	var zero varplane.CheckedBody
	if zero.Document([]byte(`{}`)).Holds([]byte(`{}`)) {
		t.Fatal("the zero CheckedBody vouches for a document")
	}
	if (varplane.CheckedDocument{}).Holds(nil) {
		t.Fatal("the zero CheckedDocument holds nothing")
	}
}

// FuzzCheckBody holds CheckBody to CheckJSON's verdict, and what Document
// vouches for to the checks it spares: every document it vouches for is a
// member value of the body that the engine's own pass (CheckAndCompact)
// accepts and leaves as it is; every compact member value is vouched for
// (up to the members it records); any other part of the body is not.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"scope":"x","document":{"b":[1,2.5]}}`, `{ "d" : { "e" : 1 } }`, `{"s":"{}","d":{}}`, `[1]`, `{"a":{"b":{"c":{"d":{"e":1}}}}}`, `{"a":"\u00e9","b":[true,null]}`, `{"a":1,}`} {
		f.Add([]byte(s), uint16(0), uint16(3))
	}
	small := varplane.Limits{MaxBodyBytes: 256, MaxDepth: 3, MaxStringBytes: 16, MaxNumberBytes: 8, MaxMembers: 6}
	f.Fuzz(func(t *testing.T, b []byte, i, j uint16) {
		cb, err := small.CheckBody(b, 1)
		if want := small.CheckJSON(b, 1); code(err) != code(want) {
			t.Fatalf("CheckBody(%q) = %v, CheckJSON = %v", b, err, want)
		}
		if err != nil {
			return
		}
		members := map[int]int{} // start → length of each top-level member value
		dec := jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true))
		if tok, err := dec.ReadToken(); err == nil && tok.Kind() == '{' {
			for n := 0; dec.PeekKind() != '}'; n++ {
				if _, err := dec.ReadToken(); err != nil {
					t.Fatalf("a checked body's member name: %v", err)
				}
				off := int(dec.InputOffset())
				v, err := dec.ReadValue()
				if err != nil {
					t.Fatalf("a checked body's member value: %v", err)
				}
				start := off + bytes.Index(b[off:], v)
				doc := b[start : start+len(v)]
				members[start] = len(v)
				c := cb.Document(doc)
				got, err := small.CheckAndCompact(doc, 0)
				compact := err == nil && bytes.Equal(got, doc)
				if c.Holds(doc) && !compact {
					t.Fatalf("Document vouches for %q of %q, which the engine's pass gives %q, %v", doc, b, got, err)
				}
				if compact && n < 12 && !c.Holds(doc) {
					t.Fatalf("Document does not vouch for the compact member %q of %q", doc, b)
				}
			}
		}
		if int(i) < len(b) && int(j) <= len(b) && int(i) < int(j) {
			doc := b[i:j]
			if n, ok := members[int(i)]; (!ok || n != len(doc)) && cb.Document(doc).Holds(doc) {
				t.Fatalf("Document vouches for %q, not a member value of %q", doc, b)
			}
		}
	})
}
