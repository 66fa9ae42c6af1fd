package push_test

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
)

// The empty prefix (a watch's all=1) selects every scope: it validates,
// matches any scope, snapshots every head and receives every commit.
func TestFilterEverything(t *testing.T) {
	all := push.Filter{Prefixes: []varplane.Scope{""}}
	if err := all.Validate(); err != nil {
		t.Fatalf("Validate(everything) = %v", err)
	}
	if err := (push.Filter{Keys: []varplane.Scope{""}}).Validate(); err == nil {
		t.Fatal("an empty key validates")
	}
	for _, s := range []varplane.Scope{"a", "a.b", "z.y.x"} {
		if !all.Match(s) {
			t.Errorf("everything does not match %q", s)
		}
	}

	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "a.one", `1`)
	activate(t, e, "g", `{"g.x":2}`)
	s := subscribe(t, h, all, nil)
	if got, want := describe(next(t, s)), "snapshot:a.one@1 g@1"; got != want {
		t.Fatalf("snapshot = %q, want %q", got, want)
	}
	activate(t, e, "b.two", `3`)
	if got, want := describe(next(t, s)), "b.two@1"; got != want {
		t.Fatalf("commit = %q, want %q", got, want)
	}
}
