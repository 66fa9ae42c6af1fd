package push_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

// handSource is a push.Source whose commits the test hands in.
type handSource struct {
	store varplane.Store
	mu    sync.Mutex
	fn    func(varplane.Commit)
}

func (s *handSource) OnCommit(fn func(varplane.Commit)) func() {
	s.mu.Lock()
	s.fn = fn
	s.mu.Unlock()
	return func() {}
}

func (s *handSource) Store() varplane.Store { return s.store }

func (s *handSource) commit(scope varplane.Scope, gen varplane.Generation, rev varplane.Revision) {
	s.mu.Lock()
	fn := s.fn
	s.mu.Unlock()
	h := varplane.NewHead(&varplane.Event{Kind: varplane.EventActivated, Scope: scope, Generation: gen, Revision: rev},
		&varplane.RevisionRecord{Scope: scope, Revision: rev, Document: json.RawMessage(`{}`)})
	fn(varplane.Commit{Kind: varplane.EventActivated, Scope: scope, Changes: []varplane.ScopeChange{{Scope: scope, Generation: gen, Head: h}}})
}

// TestSameGenerationOtherRevision: a subscriber is sent a head at the
// generation it was sent when the revision differs (a read replica sent
// the rollout's revision at base+1 in its snapshot; after an abort the
// next publish takes base+1 with another revision), and never the same
// revision twice nor an older generation.
func TestSameGenerationOtherRevision(t *testing.T) {
	mem := memory.New()
	storetest.MustActivate(t, mem, "a.k", storetest.MustCreate(t, mem, "a.k", 1), 0)
	storetest.MustActivate(t, mem, "a.k", storetest.MustCreate(t, mem, "a.k", 2), 1)
	src := &handSource{store: mem}
	h := push.New(src, push.Options{})
	t.Cleanup(h.Close)
	s := subscribe(t, h, push.Filter{Keys: []varplane.Scope{"a.k"}}, nil)
	if b := next(t, s); describe(b) != "snapshot:a.k@2" {
		t.Fatalf("snapshot: %s", describe(b))
	}
	other := varplane.Revision("sha256:00000000000000000000000000000000000000000000000000000000000000bb")
	src.commit("a.k", 2, other)
	if b := next(t, s); describe(b) != "a.k@2" || b.Updates[0].Head.Revision != other {
		t.Fatalf("the same generation with another revision: %s", describe(b))
	}
	src.commit("a.k", 2, other)
	src.commit("a.k", 1, "sha256:00000000000000000000000000000000000000000000000000000000000000cc")
	mustEmpty(t, s)
	src.commit("a.k", 3, "sha256:00000000000000000000000000000000000000000000000000000000000000dd")
	if b := next(t, s); describe(b) != "a.k@3" {
		t.Fatalf("a newer generation: %s", describe(b))
	}
}
