package control_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/memory"
)

// bodyCounter is a store that counts the revision bodies its callers
// load outside the control records: one per Revision, and every body of
// the scope per History (the read that carries them all). EventHistory
// carries none.
type bodyCounter struct {
	varplane.Store
	mu     sync.Mutex
	bodies map[varplane.Scope]int
}

func newBodyCounter() *bodyCounter {
	return &bodyCounter{Store: memory.New(), bodies: map[varplane.Scope]int{}}
}

func (s *bodyCounter) count(scope varplane.Scope, n int) {
	if scope == control.RecordRoot || scope.IsDescendantOf(control.RecordRoot) {
		return
	}
	s.mu.Lock()
	s.bodies[scope] += n
	s.mu.Unlock()
}

func (s *bodyCounter) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	s.count(scope, 1)
	return s.Store.Revision(ctx, scope, rev)
}

func (s *bodyCounter) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	h, err := s.Store.History(ctx, scope)
	n := 0
	for _, ev := range h {
		if len(ev.Document) > 0 {
			n++
		}
	}
	s.count(scope, n)
	return h, err
}

// take returns the bodies loaded since the last take.
func (s *bodyCounter) take() map[varplane.Scope]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.bodies
	s.bodies = map[varplane.Scope]int{}
	return out
}

// TestPagedHistoryLoadsOnlyWhatItReturns: the history routes read the
// scope's events without their bodies and load only the bodies they
// answer with, however many revisions the scope holds.
func TestPagedHistoryLoadsOnlyWhatItReturns(t *testing.T) {
	s := newBodyCounter()
	e := newEnv(t, envOpts{store: s})
	for i := 1; i <= 40; i++ {
		e.publish("app.big", fmt.Sprintf(`{"i":%d}`, i))
	}
	s.take()
	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		bodies       int
	}{
		{"GET", "/documents/app.big/revisions?limit=1", nil, 200, 0},
		{"GET", "/documents/app.big/revisions", nil, 200, 0},
		{"GET", "/documents/app.big/revisions?before=10&limit=200", nil, 200, 0},
		{"GET", "/documents/app.big/revisions/7", nil, 200, 1},
		{"GET", "/documents/app.big/revisions/99", nil, 404, 0},
		{"GET", "/documents/app.big/revisions/7/propagation", nil, 200, 0},
		{"GET", "/documents/app.big/diff?from=3&to=7", nil, 200, 2},
		{"GET", "/documents/app.big/diff?from=3", nil, 200, 2},
		{"POST", "/documents/app.big:rollback", map[string]any{"revision": 3}, 201, -1},
	} {
		st, b := e.do(tc.method, "/v1/control"+tc.path, "alice", tc.body, nil)
		want(t, tc.path, st, b, tc.status, "")
		got := s.take()["app.big"]
		if tc.bodies < 0 {
			// A rollback loads the target's body, then proposes it as a
			// change (whose checks read the head): a few, never the
			// scope's 40.
			if got > 3 {
				t.Errorf("%s %s loaded %d bodies of app.big, want 3 at most", tc.method, tc.path, got)
			}
			continue
		}
		if got != tc.bodies {
			t.Errorf("%s %s loaded %d bodies of app.big, want %d", tc.method, tc.path, got, tc.bodies)
		}
	}
}

// TestChangesListFiltersBeforeLoading: the changes list reads a change's
// candidate document only once the change passed the state filter and
// the caller's authorization: a token shown no change costs no body.
func TestChangesListFiltersBeforeLoading(t *testing.T) {
	s := newBodyCounter()
	e := newEnv(t, envOpts{store: s})
	scopes := []varplane.Scope{"app.a", "app.b", "app.c"}
	for _, sc := range scopes {
		e.propose("alice", sc, 0, `{"big":true}`)
	}
	s.take()
	total := func(m map[varplane.Scope]int) int {
		n := 0
		for _, sc := range scopes {
			n += m[sc]
		}
		return n
	}
	for _, tc := range []struct {
		token, query string
		changes      int
		bodies       int
	}{
		{"reader", "", 0, 0},                // may audit nothing
		{"admin", "?state=published", 0, 0}, // no change in that state
		{"admin", "?state=open", 3, 3},
		{"admin", "?scope=app.b", 1, 1},
	} {
		var out struct {
			Changes []control.Change `json:"changes"`
		}
		st, b := e.do("GET", "/v1/control/changes"+tc.query, tc.token, nil, &out)
		want(t, tc.token+tc.query, st, b, 200, "")
		if len(out.Changes) != tc.changes {
			t.Errorf("%s %s: %d changes, want %d", tc.token, tc.query, len(out.Changes), tc.changes)
		}
		for _, c := range out.Changes {
			if string(c.Document) != `{"big":true}` {
				t.Errorf("%s %s: change %s without its document: %s", tc.token, tc.query, c.ID, c.Document)
			}
		}
		if got := total(s.take()); got != tc.bodies {
			t.Errorf("%s %s loaded %d candidate bodies, want %d", tc.token, tc.query, got, tc.bodies)
		}
	}
}
