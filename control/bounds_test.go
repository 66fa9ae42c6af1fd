package control_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// allChanged returns two documents of n settings (in groups of 1,000, the
// member limit being 10,000) whose every value differs.
func allChanged(n int) (a, b string) {
	var x, y strings.Builder
	for i := 0; i < n; i++ {
		sep := ","
		switch {
		case i == 0:
			sep = `{"group_000":{`
		case i%1000 == 0:
			sep = fmt.Sprintf(`},"group_%03d":{`, i/1000)
		}
		x.WriteString(sep)
		y.WriteString(sep)
		fmt.Fprintf(&x, `"setting_%06d":{"value":%d,"label":"value number %d"}`, i, i, i)
		fmt.Fprintf(&y, `"setting_%06d":{"value":%d,"label":"value number %d"}`, i, i+1, i)
	}
	x.WriteString("}}")
	y.WriteString("}}")
	return x.String(), y.String()
}

// mallocs returns how many heap allocations fn made (the process's, which
// the test leaves otherwise idle): a measure of work that no machine's
// speed changes.
func mallocs(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}

// TestDiffLinear: the diff of two documents whose every value changed
// costs work in proportion to their size (counted as allocations), up to
// a document of 1 MiB: it once decoded the old document again for every
// changed value.
func TestDiffLinear(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, n := range []int{3_000, 17_000} {
		scope := varplane.Scope(fmt.Sprintf("app.all%d", n))
		a, b := allChanged(n)
		e.publish(scope, a)
		e.publish(scope, b)
		for _, old := range []bool{false, true} {
			var ops []control.PatchOp
			var err error
			work := mallocs(func() { ops, err = e.svc.Diff(context.Background(), scope, 1, 2, old) })
			if err != nil || len(ops) != n {
				t.Fatalf("%d values (%d bytes): %d operations, %v; want %d", n, len(a), len(ops), err, n)
			}
			// About 24 allocations a member here: decoding its object
			// in both documents, and one operation.
			if limit := uint64(40 * n); work > limit {
				t.Fatalf("%d values (%d bytes, old %v): %d allocations, want %d at most", n, len(a), old, work, limit)
			}
			t.Logf("%d values (%d bytes, old %v): %d allocations", n, len(a), old, work)
		}
	}
}

// TestDiffStopsWhenContextDone: the diff looks at its context while it
// works, and stops once it is done.
func TestDiffStopsWhenContextDone(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := allChanged(17_000)
	e.publish("app.big", a)
	e.publish("app.big", b)
	ctx := &countdown{Context: context.Background(), left: 3}
	ops, err := e.svc.Diff(ctx, "app.big", 1, 2, true)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("diff with a context done half-way: %d operations, %v; want context.Canceled", len(ops), err)
	}
	if n := ctx.asked.Load(); n < 3 {
		t.Fatalf("the diff looked at its context %d times", n)
	}
}

// countdown is a context that is done from its left-th look on.
type countdown struct {
	context.Context
	left  int64
	asked atomic.Int64
}

func (c *countdown) Err() error {
	if c.asked.Add(1) >= c.left {
		return context.Canceled
	}
	return nil
}

// TestDiffAnswerBounded: a document whose paths are long (deep members
// with long names) makes a patch far larger than itself; past
// MaxDiffBytes the route answers limit-exceeded, in both forms, and
// changes nothing.
func TestDiffAnswerBounded(t *testing.T) {
	e := newEnv(t, envOpts{})
	deep := func(v int) string {
		name := strings.Repeat("k", 14<<10)
		var s strings.Builder
		for i := 0; i < 60; i++ {
			fmt.Fprintf(&s, `{"v":%d,"%s%02d":`, v, name, i)
		}
		s.WriteString("0" + strings.Repeat("}", 60))
		return s.String()
	}
	e.publish("app.deep", deep(1))
	e.publish("app.deep", deep(2))
	before := headOf(t, e, "app.deep")
	for _, format := range []string{"", "&format=text"} {
		st, b := e.do("GET", "/v1/control/documents/app.deep/diff?from=1&to=2"+format, "dave", nil, nil)
		want(t, "diff of long paths"+format, st, b[:min(len(b), 300)], http.StatusBadRequest, varplane.CodeLimitExceeded)
		if !strings.Contains(string(b), `"limit":"diff-bytes"`) {
			t.Errorf("the answer does not name the limit: %s", b)
		}
	}
	if after := headOf(t, e, "app.deep"); after.Generation != before.Generation {
		t.Fatalf("the diff moved the scope from %d to %d", before.Generation, after.Generation)
	}
	// A diff within the bound is answered.
	e.publish("app.deep", strings.Replace(deep(2), `"v":2`, `"v":3`, 1))
	st, b := e.do("GET", "/v1/control/documents/app.deep/diff?from=2&to=3", "dave", nil, nil)
	want(t, "diff of one long path", st, b, http.StatusOK, "")
}

// blockingStore is a store whose Revision of scope "app.slow" waits until
// release is closed, having said so on entered.
type blockingStore struct {
	varplane.Store
	entered chan struct{}
	release chan struct{}
}

func (s *blockingStore) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if scope == "app.slow" {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.Revision(ctx, scope, rev)
}

// TestDiffsAtOnceBounded: past Options.MaxDiffs, a diff waits for a turn
// holding nothing, and stops waiting when its context is done.
func TestDiffsAtOnceBounded(t *testing.T) {
	st := &blockingStore{Store: memory.New(), entered: make(chan struct{}, 4), release: make(chan struct{})}
	eng := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(eng.Close)
	svc := control.New(eng, control.NewGuard(), control.Options{MaxDiffs: 1})
	ctx := context.Background()
	for _, sc := range []varplane.Scope{"app.slow", "app.fast"} {
		for i := 0; i < 2; i++ {
			if _, err := eng.Publish(ctx, varplane.PublishRequest{Scope: sc, Document: []byte(fmt.Sprintf(`{"i":%d}`, i)), ExpectedGeneration: varplane.Generation(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := make(chan error, 1)
	go func() {
		_, err := svc.Diff(ctx, "app.slow", 1, 2, false)
		first <- err
	}()
	<-st.entered // the first diff holds the only turn
	waiting, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		_, err := svc.Diff(waiting, "app.fast", 1, 2, false)
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("a second diff ran beside the first: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting diff whose context is done: %v, want context.Canceled", err)
	}
	close(st.release)
	if err := <-first; err != nil {
		t.Fatalf("the first diff: %v", err)
	}
	if ops, err := svc.Diff(ctx, "app.fast", 1, 2, false); err != nil || len(ops) != 1 {
		t.Fatalf("a diff once the turn is free: %v, %v", ops, err)
	}
}
