package instance

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

// reportStore keeps the last report of each window, as store/redis does.
type reportStore struct {
	statusStore
	reports map[string]varplane.CanaryReport // window → the last report written
	writes  int
}

func (s *reportStore) WriteCanaryReport(_ context.Context, window, id string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r varplane.CanaryReport
	if err := json.Unmarshal(v, &r); err != nil {
		return err
	}
	r.FiledAs = id
	s.reports[window] = r
	s.writes++
	return nil
}

func (s *reportStore) report(window string) (varplane.CanaryReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.reports[window]
	return r, ok
}

// stage writes the staged record as the control plane does.
func stage(t *testing.T, s varplane.Store, ws ...varplane.StagedWindow) {
	t.Helper()
	b, err := json.Marshal(varplane.StagedWindows{Windows: ws})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, s, varplane.StagedScope, string(b))
}

// revisionOf stores doc as a revision of scope (not its head) and returns it.
func revisionOf(t *testing.T, s varplane.Store, scope varplane.Scope, doc string) varplane.Revision {
	t.Helper()
	st, err := s.State(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	ev := storetest.CreatedEvent(scope, json.RawMessage(doc))
	if err := s.Append(context.Background(), ev, st.Generation); err != nil {
		t.Fatal(err)
	}
	return ev.Revision
}

// TestCanaryReports: at each beat the instance decodes the candidate of
// each staged window of a scope it holds, evaluates it beside the current
// head and writes a cumulative report under its own id; a window of a
// scope it does not hold gets a report that counts nothing; a refused
// candidate and a failed evaluation give a candidateError; a window no
// longer staged is no longer reported.
func TestCanaryReports(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	publish(t, mem, "app.other", `{"n":1}`)
	rs := &reportStore{statusStore: statusStore{Store: mem}, reports: map[string]varplane.CanaryReport{}}
	var mu sync.Mutex
	var seen []int // the current head's n at each evaluation
	c, _ := newCache(t, rs, newFakeClock(), func(o *Options[value]) {
		o.InstanceID = "pod-a"
		o.CanaryEvaluate = func(_ context.Context, cand, cur *Doc[value]) error {
			mu.Lock()
			seen = append(seen, cur.Value.N)
			mu.Unlock()
			if cand.Value.N < 0 {
				return errors.New("n is negative")
			}
			return nil
		}
	})
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	// The heartbeat loop beats once as it starts: let that beat pass before
	// the windows are staged, so that only the two beats below count.
	for deadline := time.Now().Add(5 * time.Second); c.stats.heartbeats.Load() < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat loop never beat")
		}
		time.Sleep(time.Millisecond)
	}
	good := revisionOf(t, mem, "app.a", `{"n":2}`)
	neg := revisionOf(t, mem, "app.a", `{"n":-1}`)
	bad := revisionOf(t, mem, "app.a", `{"bad":true}`)
	other := revisionOf(t, mem, "app.other", `{"bad":true}`)
	stage(t, mem,
		varplane.StagedWindow{Window: "w-good", Scope: "app.a", Revision: good, Base: 1},
		varplane.StagedWindow{Window: "w-neg", Scope: "app.a", Revision: neg, Base: 1},
		varplane.StagedWindow{Window: "w-bad", Scope: "app.a", Revision: bad, Base: 1},
		varplane.StagedWindow{Window: "w-other", Scope: "app.other", Revision: other, Base: 1},
	)
	c.Beat(ctx)
	c.Beat(ctx)
	for _, tc := range []struct {
		window           string
		decoded, errors  int64
		candidateFailure bool
	}{
		{"w-good", 2, 0, false},
		{"w-neg", 2, 2, true},
		{"w-bad", 2, 2, true},
		{"w-other", 0, 0, false}, // app.other is not held: nothing to count
	} {
		r, ok := rs.report(tc.window)
		if !ok || r.Window != tc.window || r.Instance != "pod-a" || r.FiledAs != "pod-a" || r.Decoded != tc.decoded || r.Errors != tc.errors || (r.CandidateError != "") != tc.candidateFailure {
			t.Errorf("report of %s = %+v (found %v), want decoded %d errors %d candidate failure %v", tc.window, r, ok, tc.decoded, tc.errors, tc.candidateFailure)
		}
	}
	mu.Lock()
	if len(seen) != 4 || seen[0] != 1 {
		t.Errorf("evaluations saw current heads %v, want 4 beside n=1 (the hook never runs on an undecodable candidate)", seen)
	}
	mu.Unlock()

	// The window closed: it is not reported again, and a window reopened
	// under a new id starts its counts afresh.
	stage(t, mem, varplane.StagedWindow{Window: "w-good-2", Scope: "app.a", Revision: good, Base: 1})
	rs.mu.Lock()
	before := rs.writes
	rs.mu.Unlock()
	c.Beat(ctx)
	rs.mu.Lock()
	after := rs.writes
	rs.mu.Unlock()
	if after-before != 1 {
		t.Fatalf("%d reports written with one window staged, want 1", after-before)
	}
	if r, _ := rs.report("w-good-2"); r.Decoded != 1 {
		t.Fatalf("report of a new window = %+v, want decoded 1", r)
	}
}

// TestAuditReadsWaitForRoot: a read replica's audit reads (history, the
// scope list, replay, revisions) answer not-ready until the root exists,
// like its document reads, and the store's answer after.
func TestAuditReadsWaitForRoot(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "app.a", `{"n":1}`)
	c, err := New(context.Background(), mem, Options[json.RawMessage]{Root: "root", Decode: RawJSON, Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := NewStore(c, mem)
	ctx := context.Background()
	h, _ := mem.History(ctx, "app.a")
	checks := func() map[string]error {
		_, e1 := s.History(ctx, "app.a")
		_, e2 := s.Scopes(ctx)
		_, e3 := s.Replay(ctx, "app.a", 1)
		_, e4 := s.Revision(ctx, "app.a", h[0].Revision)
		_, e5 := s.EventHistory(ctx, "app.a")
		return map[string]error{"history": e1, "scopes": e2, "replay": e3, "revision": e4, "event history": e5}
	}
	for what, err := range checks() {
		if code(err) != varplane.CodeNotReady {
			t.Errorf("%s before the root = %v, want not-ready", what, err)
		}
	}
	publish(t, mem, "root", `{}`)
	waitFor(t, "ready", func() bool { return c.Ready() == nil })
	for what, err := range checks() {
		if err != nil && !(what == "replay" && code(err) == varplane.CodeStoreUnsupported) { // the memory store keeps no log
			t.Errorf("%s once ready = %v", what, err)
		}
	}
}
