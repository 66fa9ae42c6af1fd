package varplane

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseScope(t *testing.T) {
	tests := []struct {
		in    string
		ok    bool
		group bool
	}{
		{"agentic", true, true},
		{"agentic.lanes.vinci", true, false},
		{"tenant:acme", true, true},
		{"dummies.dummy@0123abcd", true, false},
		{"グループ.日本.ключ", true, false},
		{"", false, false},
		{".", false, false},
		{"a..b", false, false},
		{"a.", false, false},
		{".a", false, false},
		{"a b", false, false},
		{"a\tb", false, false},
		{"a\u00a0b", false, false},
		{"a\x7fb", false, false},
		{"a\xffb", false, false},
		{strings.Repeat("x", MaxScopeBytes), true, true},
		{strings.Repeat("x", MaxScopeBytes+1), false, false},
	}
	for _, tt := range tests {
		s, err := ParseScope(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseScope(%q) err = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if err != nil {
			if ErrorCode(err) != CodeBadRequest {
				t.Errorf("ParseScope(%q) code = %s", tt.in, ErrorCode(err))
			}
			continue
		}
		if s.IsGroup() != tt.group {
			t.Errorf("%q.IsGroup() = %v", tt.in, s.IsGroup())
		}
	}
}

func TestScopeRelations(t *testing.T) {
	if p, ok := Scope("a.b.c").Parent(); !ok || p != "a.b" {
		t.Errorf("Parent(a.b.c) = %q %v", p, ok)
	}
	if _, ok := Scope("a").Parent(); ok {
		t.Error("a group has no parent")
	}
	if got := Scope("a.b.c").Root(); got != "a" {
		t.Errorf("Root = %q", got)
	}
	for _, tt := range []struct {
		s, p string
		want bool
	}{
		{"a.b", "a", true}, {"a.b.c", "a", true}, {"a.b.c", "a.b", true},
		{"a", "a", false}, {"ab", "a", false}, {"a.bc", "a.b", false}, {"b.a", "a", false},
	} {
		if got := Scope(tt.s).IsDescendantOf(Scope(tt.p)); got != tt.want {
			t.Errorf("%s.IsDescendantOf(%s) = %v", tt.s, tt.p, got)
		}
	}
}

func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"a", "a.b", "", "a..b", "グループ.日本", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScope(s)
		if err != nil {
			if ErrorCode(err) != CodeBadRequest {
				t.Fatalf("code %s", ErrorCode(err))
			}
			return
		}
		if string(sc) != s || !sc.Valid() {
			t.Fatalf("accepted %q inconsistently", s)
		}
		if p, ok := sc.Parent(); ok {
			if !p.Valid() || !sc.IsDescendantOf(p) {
				t.Fatalf("parent %q of %q", p, s)
			}
		}
		if !sc.Root().Valid() {
			t.Fatalf("root of %q invalid", s)
		}
	})
}

func TestHeadBody(t *testing.T) {
	h := NewHead(&Event{Kind: EventActivated, Scope: "a.b", Revision: "sha256:x", Generation: 3},
		&RevisionRecord{Document: []byte(`{"k":"<v>"}`), SchemaID: "s/v1"})
	want := `{"generation":3,"revision":"sha256:x","schemaId":"s/v1","effectiveAt":"0001-01-01T00:00:00Z","values":{"a.b":{"k":"<v>"}}}`
	if got := string(h.ReadBody()); got != want {
		t.Errorf("body = %s\nwant   %s", got, want)
	}
	g := NewHead(&Event{Kind: EventActivated, Scope: "grp", Revision: "sha256:y", Generation: 1},
		&RevisionRecord{Document: []byte(`{"grp.k":1}`)})
	if got := string(g.Values()); got != `{"grp.k":1}` {
		t.Errorf("group values = %s", got)
	}
	html := NewHead(&Event{Kind: EventActivated, Scope: "a.<b>&", Revision: "sha256:z", Generation: 1},
		&RevisionRecord{Document: []byte(`1`)})
	if got := string(html.Values()); got != `{"a.<b>&":1}` {
		t.Errorf("values of a scope with HTML characters = %s, want them unescaped", got)
	}
	if g.ETag() != `"sha256:y"` {
		t.Errorf("etag = %s", g.ETag())
	}
}

// TestHeadBodyAllocatesOnce: a read body, built once per head, is one
// allocation (not the values object and then the body), for a key and for
// a group, with every optional member and the longest generation.
func TestHeadBodyAllocatesOnce(t *testing.T) {
	rev := Revision("sha256:" + strings.Repeat("ab", 32))
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456789, time.UTC)
	doc := []byte(`{"enabled":true,"note":"` + strings.Repeat("x", 1000) + `"}`)
	for _, scope := range []Scope{"agentic.lanes.vinci", "grp"} {
		d := doc
		if scope.IsGroup() {
			d = []byte(`{"grp.k":` + string(doc) + `}`)
		}
		h := NewHead(&Event{Kind: EventActivated, Scope: scope, Revision: rev, Generation: math.MaxUint64, Timestamp: at},
			&RevisionRecord{Document: d, SchemaID: "configs/agentic.lanes/v12", SchemaVersion: "12"})
		if n := testing.AllocsPerRun(100, func() { _ = h.buildBody() }); n != 1 {
			t.Errorf("%s: building the read body allocates %.0f times, want 1", scope, n)
		}
		if !json.Valid(h.ReadBody()) || !bytes.Contains(h.ReadBody(), h.Values()) {
			t.Errorf("%s: body %s does not hold the values", scope, h.ReadBody())
		}
	}
}

func BenchmarkParseScope(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseScope("agentic.lanes.vinci"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHeadBodyBuiltOnFirstRead: a new head holds no read body (a commit
// does not pay for one); the first read builds it, every read after that
// returns the same bytes without allocating, and readers racing on the
// first read all get one body.
func TestHeadBodyBuiltOnFirstRead(t *testing.T) {
	h := NewHead(&Event{Kind: EventActivated, Scope: "a.b", Revision: "sha256:x", Generation: 2},
		&RevisionRecord{Document: []byte(`{"k":1}`)})
	if h.body.Load() != nil {
		t.Fatal("NewHead built the read body")
	}
	bodies := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Go(func() { bodies[i] = h.ReadBody() })
	}
	wg.Wait()
	for _, b := range bodies[1:] {
		if &b[0] != &bodies[0][0] {
			t.Fatal("racing first reads got different bodies")
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = h.ReadBody() }); n != 0 {
		t.Errorf("a read after the first allocates %.0f times, want 0", n)
	}
}
