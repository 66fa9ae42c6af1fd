package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/memory"
)

func TestRevisionsPaging(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i := 1; i <= 250; i++ {
		e.publish("app.flags", fmt.Sprintf(`{"i":%d}`, i))
	}
	page := func(query string) control.RevisionsPage {
		t.Helper()
		var p control.RevisionsPage
		st, b := e.do("GET", "/v1/control/documents/app.flags/revisions"+query, "dave", nil, &p)
		want(t, query, st, b, 200, "")
		return p
	}
	gens := func(p control.RevisionsPage) (first, last varplane.Generation, n int) {
		return p.Revisions[0].Generation, p.Revisions[len(p.Revisions)-1].Generation, len(p.Revisions)
	}
	for _, tc := range []struct {
		query       string
		first, last varplane.Generation
		n           int
		next        varplane.Generation
	}{
		{"", 250, 231, 20, 231},
		{"?limit=500", 250, 51, 200, 51},
		{"?limit=200", 250, 51, 200, 51},
		{"?limit=5&before=100", 99, 95, 5, 95},
		{"?before=3", 2, 1, 2, 0},
	} {
		p := page(tc.query)
		first, last, n := gens(p)
		if first != tc.first || last != tc.last || n != tc.n || p.Next != tc.next {
			t.Errorf("revisions%s: %d..%d (%d), next %d; want %d..%d (%d), next %d", tc.query, first, last, n, p.Next, tc.first, tc.last, tc.n, tc.next)
		}
	}
	// Following next walks the whole history once, newest first.
	seen, before := 0, varplane.Generation(0)
	for {
		q := "?limit=64"
		if before != 0 {
			q += fmt.Sprintf("&before=%d", before)
		}
		p := page(q)
		for _, r := range p.Revisions {
			if r.Generation != varplane.Generation(250-seen) || r.Kind != varplane.EventActivated || r.By != "seed" {
				t.Fatalf("entry %d = %+v", seen, r)
			}
			seen++
		}
		if p.Next == 0 {
			break
		}
		before = p.Next
	}
	if seen != 250 {
		t.Fatalf("walked %d revisions, want 250", seen)
	}
	for _, q := range []string{"?limit=0", "?limit=-1", "?limit=x", "?before=-1", "?limit=1&limit=2"} {
		st, b := e.do("GET", "/v1/control/documents/app.flags/revisions"+q, "dave", nil, nil)
		want(t, q, st, b, 400, varplane.CodeBadRequest)
	}
}

// reclaiming wraps a store and answers ErrReclaimed for the revisions it
// names, as a store after retention does.
type reclaiming struct {
	varplane.Store
	gone map[varplane.Revision]bool
}

func (r *reclaiming) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if r.gone[rev] {
		return nil, varplane.ErrReclaimed
	}
	return r.Store.Revision(ctx, scope, rev)
}

func TestRevisionAndReclaimed(t *testing.T) {
	st := &reclaiming{Store: memory.New(), gone: map[varplane.Revision]bool{}}
	e := newEnv(t, envOpts{store: st})
	e.publish("app.flags", `{"a":1}`)
	e.publish("app.flags", `{"a":2}`)
	var r control.RevisionEntry
	s, b := e.do("GET", "/v1/control/documents/app.flags/revisions/1", "dave", nil, &r)
	want(t, "revision 1", s, b, 200, "")
	if r.Generation != 1 || string(r.Document) != `{"a":1}` || r.By != "seed" {
		t.Fatalf("revision 1 = %+v", r)
	}
	st.gone[r.Revision] = true
	s, b = e.do("GET", "/v1/control/documents/app.flags/revisions/1", "dave", nil, nil)
	want(t, "reclaimed", s, b, 410, varplane.CodeRevisionReclaimed)
	s, b = e.do("GET", "/v1/control/documents/app.flags/revisions/9", "dave", nil, nil)
	want(t, "never existed", s, b, 404, varplane.CodeNotFound)
	s, b = e.do("GET", "/v1/control/documents/app.flags/revisions/0", "dave", nil, nil)
	want(t, "generation 0", s, b, 404, varplane.CodeNotFound)
	s, b = e.do("GET", "/v1/control/documents/app.flags/revisions/1", "", nil, nil)
	want(t, "no token", s, b, 401, varplane.CodeUnauthorized)
}

func TestDiffRoute(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("app.flags", `{"a":1,"list":[1,2,3],"gone":true}`)
	e.publish("app.flags", `{"a":2,"list":[1,5],"new":{"x":"y"}}`)
	var ops []control.PatchOp
	s, b := e.do("GET", "/v1/control/documents/app.flags/diff?from=1&to=2", "dave", nil, &ops)
	want(t, "diff", s, b, 200, "")
	got := strings.TrimSpace(string(b))
	const wantPatch = `[{"op":"replace","path":"/a","value":2},{"op":"remove","path":"/gone"},{"op":"replace","path":"/list/1","value":5},{"op":"remove","path":"/list/2"},{"op":"add","path":"/new","value":{"x":"y"}}]`
	if got != wantPatch {
		t.Fatalf("patch\n %s\nwant\n %s", got, wantPatch)
	}
	s, b = e.do("GET", "/v1/control/documents/app.flags/diff?from=1&format=text", "dave", nil, nil)
	want(t, "text diff", s, b, 200, "")
	const wantText = "~ /a: 1 -> 2\n- /gone: true\n~ /list/1: 2 -> 5\n- /list/2: 3\n+ /new: {\"x\":\"y\"}\n"
	if string(b) != wantText {
		t.Fatalf("text\n%s\nwant\n%s", b, wantText)
	}
	s, b = e.do("GET", "/v1/control/documents/app.flags/diff?from=1&to=7", "dave", nil, nil)
	want(t, "diff to a missing generation", s, b, 404, varplane.CodeNotFound)
	s, b = e.do("GET", "/v1/control/documents/app.flags/diff?from=1&format=yaml", "dave", nil, nil)
	want(t, "bad format", s, b, 400, varplane.CodeBadRequest)
}

// instances is an in-process Instances: statuses and reports set by the
// test, and the candidates staged.
type instances struct {
	statuses []control.InstanceStatus
	reports  map[string][]varplane.CanaryReport
	staged   map[string]bool
}

func (in *instances) Statuses(context.Context) ([]control.InstanceStatus, error) {
	return in.statuses, nil
}

func (in *instances) Reports(_ context.Context, w string) ([]varplane.CanaryReport, error) {
	return in.reports[w], nil
}

func (in *instances) Stage(_ context.Context, w control.Window, _ *control.Change) error {
	in.staged[w.ID] = true
	return nil
}

func (in *instances) Unstage(_ context.Context, w control.Window, _ *control.Change) error {
	delete(in.staged, w.ID)
	return nil
}

func TestPropagation(t *testing.T) {
	e0 := newEnv(t, envOpts{})
	e0.publish("app.flags", `{"a":1}`)
	var p control.Propagation
	s, b := e0.do("GET", "/v1/control/documents/app.flags/revisions/1/propagation", "dave", nil, &p)
	want(t, "propagation without instances", s, b, 200, "")
	// Not 0 of 0 silently: the answer says the counts are unknown.
	if p.Generation != 1 || p.Installed != 0 || p.Live != 0 || p.Unknown == "" {
		t.Fatalf("propagation without instances = %+v, want 0 of 0 marked unknown", p)
	}
	// The same on a store that keeps no heartbeats (a Store of another
	// module: here the memory store seen through the bare interface): the
	// store's Instances says so.
	e1 := newEnv(t, envOpts{store: struct{ varplane.Store }{memory.New()}, storeInstances: true})
	e1.publish("app.flags", `{"a":1}`)
	p = control.Propagation{}
	s, b = e1.do("GET", "/v1/control/documents/app.flags/revisions/1/propagation", "dave", nil, &p)
	want(t, "propagation on a store without heartbeats", s, b, 200, "")
	if p.Unknown == "" || !contains([]byte(p.Unknown), "heartbeats") {
		t.Fatalf("propagation on the memory store = %+v, want unknown naming the heartbeats", p)
	}
	st, body, _ := e1.act("alice", e1.propose("alice", "app.flags", 1, `{"a":2}`).ID, "canary", map[string]any{"duration": "1m", "minInstances": 1})
	want(t, "a canary window on a store without heartbeats", st, body, 400, varplane.CodeStoreUnsupported)
	if err := e1.svc.CanaryPass(context.Background(), "pass"); err != nil {
		t.Fatalf("the canary pass on a store without heartbeats = %v, want nothing to do", err)
	}
	p = control.Propagation{}

	in := &instances{staged: map[string]bool{}}
	e := newEnv(t, envOpts{instances: in})
	e.publish("app.flags", `{"a":1}`)
	e.publish("app.flags", `{"a":2}`)
	now := e.clock.Now()
	in.statuses = []control.InstanceStatus{
		{Instance: "i1", At: now.Add(-10 * time.Second), Installed: map[varplane.Scope]varplane.Generation{"app.flags": 2}},
		{Instance: "i2", At: now.Add(-50 * time.Second), Installed: map[varplane.Scope]varplane.Generation{"app.flags": 1}},
		{Instance: "i3", At: now.Add(-2 * time.Minute), Installed: map[varplane.Scope]varplane.Generation{"app.flags": 2}}, // stale
		{Instance: "i4", At: now, Installed: map[varplane.Scope]varplane.Generation{}},
	}
	for n, wantP := range map[int]control.Propagation{1: {Generation: 1, Installed: 2, Live: 3}, 2: {Generation: 2, Installed: 1, Live: 3}} {
		s, b := e.do("GET", fmt.Sprintf("/v1/control/documents/app.flags/revisions/%d/propagation", n), "dave", nil, &p)
		want(t, "propagation", s, b, 200, "")
		if p != wantP {
			t.Errorf("propagation of %d = %+v, want %+v", n, p, wantP)
		}
	}
	s, b = e.do("GET", "/v1/control/documents/app.flags/revisions/3/propagation", "dave", nil, nil)
	want(t, "propagation of a missing generation", s, b, 404, varplane.CodeNotFound)
}

func TestRollbackIsAChange(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("pay.limits", `{"max":10}`)
	e.publish("pay.limits", `{"max":99}`)
	e.setPolicy("pay", 1, nil, false)
	var c control.Change
	s, b := e.do("POST", "/v1/control/documents/pay.limits:rollback", "alice", map[string]any{"revision": 1, "note": "too high"}, &c)
	want(t, "rollback", s, b, 201, "")
	if c.State != control.StateChecked || c.Base != 2 || string(c.Document) != `{"max":10}` || c.RollbackTo == nil || *c.RollbackTo != 1 {
		t.Fatalf("rollback change = %+v", c)
	}
	s, b, _ = e.act("alice", c.ID, "publish", nil)
	want(t, "publish unapproved rollback", s, b, 409, varplane.CodeChangeState)
	e.act("bob", c.ID, "approve", nil)
	s, b, _ = e.act("alice", c.ID, "publish", nil)
	want(t, "publish rollback", s, b, 200, "")
	if st := headOf(t, e, "pay.limits"); st.Generation != 3 || string(st.Head.Document) != `{"max":10}` {
		t.Fatalf("head after rollback: %d %s", st.Generation, st.Head.Document)
	}
	// Its activation is recognisable as a rollback of generation 2 (the
	// change's base); the change's ordinary publishes are not.
	hist, err := e.store.History(context.Background(), "pay.limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range hist {
		if want := varplane.Generation(0); ev.Generation == 3 {
			want = 2
			if ev.RollbackOf != want {
				t.Errorf("the rollback change's activation has rollbackOf %d, want %d", ev.RollbackOf, want)
			}
		} else if ev.RollbackOf != want {
			t.Errorf("%s at %d has rollbackOf %d", ev.Kind, ev.Generation, ev.RollbackOf)
		}
	}
	s, b = e.do("POST", "/v1/control/documents/pay.limits:rollback", "alice", map[string]any{"revision": 9}, nil)
	want(t, "rollback to nothing", s, b, 404, varplane.CodeNotFound)
}

func TestCanaryWindow(t *testing.T) {
	in := &instances{staged: map[string]bool{}, reports: map[string][]varplane.CanaryReport{}}
	e := newEnv(t, envOpts{instances: in})
	e.setPolicy("pay", 1, nil, true)
	c := e.propose("alice", "pay.limits", 0, `{"max":10}`)
	e.act("bob", c.ID, "approve", nil)
	s, b, _ := e.act("alice", c.ID, "publish", nil)
	want(t, "publish without a canary", s, b, 503, varplane.CodeStoreUnavailable)

	// A fresh change: open the window before approving.
	e.act("alice", c.ID, "withdraw", nil)
	c = e.propose("alice", "pay.limits", 0, `{"max":11}`)
	s, b, w := e.act("alice", c.ID, "canary", map[string]any{"duration": "10m", "minInstances": 2})
	want(t, "open canary", s, b, 200, "")
	if w.State != control.StateCanary || w.Canary == nil || !in.staged[w.Canary.ID] {
		t.Fatalf("canary change = %+v", w)
	}
	win := w.Canary.ID
	e.act("bob", c.ID, "approve", nil)
	now := e.clock.Now()
	in.statuses = []control.InstanceStatus{{Instance: "i1", At: now}, {Instance: "i2", At: now}}
	in.reports[win] = []varplane.CanaryReport{{Window: win, Instance: "i1", Decoded: 3}}
	pass := func() control.Change {
		t.Helper()
		e.clock.Advance(11 * time.Minute)
		for i := range in.statuses {
			in.statuses[i].At = e.clock.Now()
		}
		if err := e.svc.CanaryPass(context.Background(), "pass-1"); err != nil {
			t.Fatal(err)
		}
		got, err := e.svc.Get(context.Background(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		return *got
	}
	got := pass()
	if got.State != control.StateCanary || got.Canary.State != control.WindowOpen || !strings.Contains(got.Canary.Reason, "i2") {
		t.Fatalf("with i2 unreported: %s / %+v", got.State, got.Canary)
	}
	s, b, _ = e.act("alice", c.ID, "publish", nil)
	want(t, "publish with an open window", s, b, 409, varplane.CodeChangeState)
	in.reports[win] = append(in.reports[win], varplane.CanaryReport{Window: win, Instance: "i2", Decoded: 1})
	got = pass()
	if got.State != control.StateApproved || got.Canary.State != control.WindowPassed || in.staged[win] {
		t.Fatalf("after every report: %s / %+v, staged %v", got.State, got.Canary, in.staged)
	}
	s, b, _ = e.act("alice", c.ID, "publish", nil)
	want(t, "publish after the canary", s, b, 200, "")

	// Withdrawing a change in a window unstages its candidate.
	x := e.propose("alice", "pay.third", 0, `{"max":2}`)
	_, _, w = e.act("alice", x.ID, "canary", map[string]any{"duration": "1m", "minInstances": 0})
	if !in.staged[w.Canary.ID] {
		t.Fatal("the window's candidate is not staged")
	}
	e.act("alice", x.ID, "withdraw", nil)
	if in.staged[w.Canary.ID] {
		t.Fatal("a withdrawn change's candidate is still staged")
	}

	// A candidate error blocks: the change fails.
	d := e.propose("alice", "pay.other", 0, `{"max":1}`)
	_, _, w = e.act("alice", d.ID, "canary", map[string]any{"duration": "1m", "minInstances": 0})
	in.reports[w.Canary.ID] = []varplane.CanaryReport{{Window: w.Canary.ID, Instance: "i1", CandidateError: "decode: max out of range"}}
	c = d
	if got = pass(); got.State != control.StateFailed || got.Canary.State != control.WindowBlocked {
		t.Fatalf("after a candidate error: %s / %+v", got.State, got.Canary)
	}
	// Another holder of the lease keeps the pass from running.
	if err := e.store.AcquireLease(context.Background(), control.CanaryLease, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.CanaryPass(context.Background(), "pass-1"); err != nil {
		t.Fatalf("pass under another's lease: %v", err)
	}
}

func TestEvaluate(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	w := control.Window{ID: "w1", MinInstances: 2, ClosesAt: now.Add(-time.Second)}
	fresh := []control.InstanceStatus{{Instance: "a", At: now}, {Instance: "b", At: now.Add(-30 * time.Second)}, {Instance: "old", At: now.Add(-2 * time.Minute)}}
	ok := []varplane.CanaryReport{{Window: "w1", Instance: "a", Decoded: 5}, {Window: "w1", Instance: "b", Decoded: 1, Errors: 2}}
	for _, tc := range []struct {
		name     string
		w        control.Window
		statuses []control.InstanceStatus
		reports  []varplane.CanaryReport
		want     string
	}{
		{"every fresh instance reported", w, fresh, ok, control.WindowPassed},
		{"still running", control.Window{ID: "w1", ClosesAt: now.Add(time.Minute)}, fresh, ok, control.WindowOpen},
		{"a candidate error blocks", w, fresh, append(ok[:1:1], varplane.CanaryReport{Window: "w1", Instance: "b", CandidateError: "boom"}), control.WindowBlocked},
		{"a candidate error blocks a running window", control.Window{ID: "w1", ClosesAt: now.Add(time.Minute)}, fresh, []varplane.CanaryReport{{Window: "w1", Instance: "a", CandidateError: "boom"}}, control.WindowBlocked},
		{"a listed instance without a report", w, fresh, ok[:1], control.WindowOpen},
		{"a report naming another window", w, fresh, append(ok[:1:1], varplane.CanaryReport{Window: "w2", Instance: "b"}), control.WindowOpen},
		{"a negative count", w, fresh, append(ok[:1:1], varplane.CanaryReport{Window: "w1", Instance: "b", Decoded: -1}), control.WindowOpen},
		{"a doubtful report outweighs a candidate error", w, fresh, []varplane.CanaryReport{{Window: "w2", Instance: "a"}, {Window: "w1", Instance: "b", CandidateError: "x"}}, control.WindowOpen},
		{"too few instances", control.Window{ID: "w1", MinInstances: 3, ClosesAt: now}, fresh, ok, control.WindowOpen},
		{"a stale instance need not report", w, fresh, ok, control.WindowPassed},
	} {
		if got, reason := control.Evaluate(tc.w, now, tc.statuses, tc.reports); got != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.name, got, reason, tc.want)
		}
	}
}

// TestRecordsAreDocuments: the changes and policies are ordinary documents
// of the store (so every store keeps them, with history).
func TestRecordsAreDocuments(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.propose("alice", "app.x", 0, `{"a":1}`)
	st := headOf(t, e, varplane.Scope("varplane-control.change."+c.ID))
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(st.Head.Document, &rec); err != nil || st.Generation != c.Version {
		t.Fatalf("record %s at %d, change version %d: %v", st.Head.Document, st.Generation, c.Version, err)
	}
	if _, has := rec["document"]; has {
		t.Fatalf("the record repeats the candidate document: %s", st.Head.Document)
	}
	s, b := e.do("GET", "/v1/control/changes/"+c.ID, "dave", nil, nil)
	want(t, "get", s, b, http.StatusOK, "")
	if !contains(b, `"document":{"a":1}`) {
		t.Fatalf("the change answer lacks its document: %s", b)
	}
}
