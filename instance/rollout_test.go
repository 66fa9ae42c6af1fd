package instance

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

// storeRevision stores doc as a revision of scope (not activated) and returns it.
func storeRevision(t *testing.T, s varplane.Store, scope varplane.Scope, doc string) varplane.Revision {
	t.Helper()
	ev := storetest.CreatedEvent(scope, json.RawMessage(doc))
	st, err := s.State(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(context.Background(), ev, st.Generation); err != nil {
		t.Fatal(err)
	}
	return ev.Revision
}

// TestRolloutServing: the instance serves a rollout's revision only while
// the record says it runs (or is paused), its step selects this instance
// (by id or label), the installed head is the rollout's base and the
// revision decodes; a record that does not decode, a revision the store
// does not hold, another base, an ended rollout serve the head; a revision
// that does not decode is reported at once; GetFor decides by the key.
func TestRolloutServing(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	good := storeRevision(t, mem, "app.a", `{"n":2}`)
	bad := storeRevision(t, mem, "app.a", `{"n":3,"bad":true}`)
	c, _ := newCache(t, mem, newFakeClock(), func(o *Options[value]) {
		o.InstanceID, o.Labels = "pod-1", map[string]string{"zone": "a"}
	})
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	serves := func(what string, want int) {
		t.Helper()
		waitFor(t, what, func() bool {
			d, err := c.Get(ctx, "app.a")
			return err == nil && d.Value.N == want
		})
		time.Sleep(20 * time.Millisecond) // and keeps serving it
		if d, err := c.Get(ctx, "app.a"); err != nil || d.Value.N != want {
			t.Fatalf("%s: serves %+v %v, want n=%d", what, d, err, want)
		}
	}
	record := func(doc string) {
		t.Helper()
		publish(t, mem, varplane.RolloutScope, doc)
	}
	ro := func(id string, rev varplane.Revision, base varplane.Generation, state string, share int, sel ...rollout.Selector) string {
		b, _ := json.Marshal(varplane.StagedRollouts{Rollouts: []varplane.StagedRollout{{ID: id, Scope: "app.a", Revision: rev, Base: base,
			State: state, Step: 0, Steps: 2, Share: share, Selectors: sel}}})
		return string(b)
	}
	var in, out string // rollout ids that select pod-1 at half, and that do not
	for i := 0; in == "" || out == ""; i++ {
		id := "ro-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if rollout.Selected("pod-1", id, rollout.Full/2) {
			in = id
		} else {
			out = id
		}
	}
	record(ro(in, good, 1, varplane.RolloutRunning, rollout.Full/2))
	serves("selected by its id", 2)
	if d, _ := c.Get(ctx, "app.a"); d.Generation != 2 || d.Head.Revision != good {
		t.Fatalf("the rollout's revision is served as %d %s", d.Generation, d.Head.Revision)
	}
	if rs := c.Rollouts(); len(rs) != 1 || !rs[0].Selected || rs[0].ID != in {
		t.Fatalf("Rollouts() = %+v", rs)
	}
	for _, key := range []string{"u1", "u2", "u3", "u4"} {
		d, _ := c.GetFor(ctx, "app.a", key)
		if (d.Value.N == 2) != rollout.Selected(key, in, rollout.Full/2) {
			t.Fatalf("GetFor(%s) serves n=%d", key, d.Value.N)
		}
	}
	if st := c.status(); st.Documents[0].Scope != "app.a" || st.Documents[0].Serving != good || st.Documents[0].Rollout != in {
		t.Fatalf("the status does not say what it serves: %+v", st.Documents)
	}
	record(ro(out, good, 1, varplane.RolloutRunning, rollout.Full/2))
	serves("not selected", 1)
	record(ro(out, good, 1, varplane.RolloutRunning, 0, rollout.Selector{"zone": "a"}))
	serves("selected by its label", 2)
	record(ro(in, good, 1, varplane.RolloutPaused, rollout.Full/2))
	serves("paused: the step holds", 2)
	record(ro(in, good, 1, varplane.RolloutRolledBack, rollout.Full/2))
	serves("rolled back", 1)
	record(ro(in, good, 0, varplane.RolloutRunning, rollout.Full))
	serves("another base", 1)
	record(ro(in, "sha256:0000000000000000000000000000000000000000000000000000000000000000", 1, varplane.RolloutRunning, rollout.Full))
	serves("a revision the store does not hold", 1)
	record(`{"rollouts":[{"id":1}]}`)
	serves("a record that does not decode", 1)

	// A revision that does not decode is reported at once, not served.
	rw := &reportStore{statusStore: statusStore{Store: mem}, reports: map[string]varplane.CanaryReport{}}
	c2, _ := newCache(t, rw, newFakeClock(), func(o *Options[value]) { o.InstanceID = "pod-2" })
	if _, err := c2.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	record(ro(in, bad, 1, varplane.RolloutRunning, rollout.Full))
	waitFor(t, "the rejection reported", func() bool { _, ok := rw.report(in); return ok })
	if r, _ := rw.report(in); r.CandidateError == "" || r.Errors != 1 || r.Instance != "pod-2" {
		t.Fatalf("the report: %+v", r)
	}
	if d, _ := c2.Get(ctx, "app.a"); d.Value.N != 1 {
		t.Fatalf("an undecodable revision is served: %+v", d)
	}
}

// TestHeadStates: a read replica's Store whose instance a rollout's step
// selects answers the rollout's revision in States (what it serves readers
// that name no entity) and the head itself in HeadStates (what an
// evaluation for an entity key starts from), as one view either way.
func TestHeadStates(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	next := storeRevision(t, mem, "app.a", `{"n":2}`)
	c, err := New(ctx, mem, Options[json.RawMessage]{Root: "root", Decode: RawJSON, InstanceID: "pod-1", Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := NewStore(c, mem)
	b, _ := json.Marshal(varplane.StagedRollouts{Rollouts: []varplane.StagedRollout{{ID: "ro1", Scope: "app.a", Revision: next, Base: 1,
		State: varplane.RolloutRunning, Steps: 1, Share: rollout.Full}}})
	if _, err := c.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	publish(t, mem, varplane.RolloutScope, string(b))
	scopes := []varplane.Scope{"app.a", "app.none", "app.a"}
	waitFor(t, "the rollout served", func() bool {
		sts, err := s.States(ctx, scopes)
		return err == nil && sts[0].Head != nil && sts[0].Head.Revision == next
	})
	sts, err := s.States(ctx, scopes)
	if err != nil || sts[0].Generation != 2 || sts[0] != sts[2] || sts[1].Head != nil {
		t.Fatalf("States = %+v %v; want the rollout's revision as generation 2, twice, and no head", sts, err)
	}
	hs, err := s.HeadStates(ctx, scopes)
	if err != nil || hs[0].Generation != 1 || hs[0].Head == nil || hs[0].Head.Revision == next || hs[0] != hs[2] || hs[1].Head != nil {
		t.Fatalf("HeadStates = %+v %v; want the head at generation 1, twice, and no head", hs, err)
	}
}
