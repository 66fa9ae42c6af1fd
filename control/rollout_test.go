package control_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/control/controltest"
	"github.com/varplane/varplane/instance"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/postgres/pgtest"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// rolloutStores are the stores of record a rollout is taken through: the
// rollout's record, the instances' statuses and reports live in each.
// open returns the control plane's store and a function that opens
// another store value on the same store of record for each instance, as
// instance.New asks of a store that keeps its own copy (Redis,
// PostgreSQL); the memory store is one value shared by all.
var rolloutStores = []struct {
	name string
	open func(t *testing.T) (varplane.Store, func() varplane.Store)
}{
	{"memory", func(t *testing.T) (varplane.Store, func() varplane.Store) {
		s := memory.New()
		return s, func() varplane.Store { return s }
	}},
	{"redis", func(t *testing.T) (varplane.Store, func() varplane.Store) {
		u := redistest.PrefixURL(t, "control-rollout")
		return sharedStore(t, func() (varplane.Store, error) { return redis.Open(context.Background(), u, redis.Options{}) })
	}},
	{"postgres", func(t *testing.T) (varplane.Store, func() varplane.Store) {
		u := pgtest.SchemaURL(t, "control_rollout", nil)
		return sharedStore(t, func() (varplane.Store, error) { return postgres.Open(context.Background(), u, postgres.Options{}) })
	}},
}

// sharedStore opens the control plane's store with open, and returns a
// function that opens one more (closed when the test ends) for each
// instance.
func sharedStore(t *testing.T, open func() (varplane.Store, error)) (varplane.Store, func() varplane.Store) {
	another := func() varplane.Store {
		s, err := open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return another(), another
}

// fleet opens n instances of root, each over a store another opens (ids
// i0, i1, ...).
func fleet(t *testing.T, another func() varplane.Store, root varplane.Scope, n int) []*instance.Cache[flags] {
	t.Helper()
	var out []*instance.Cache[flags]
	for i := range n {
		c, err := instance.New(context.Background(), another(), instance.Options[flags]{Root: root, Decode: decodeFlags,
			InstanceID: fmt.Sprintf("i%d", i), Labels: map[string]string{"zone": []string{"a", "b"}[i%2]}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		out = append(out, c)
	}
	return out
}

// serves waits until every instance of f serves the document whose "v" is
// want(i) for instance i, and beats them (so their statuses say so).
func serves(t *testing.T, f []*instance.Cache[flags], scope varplane.Scope, want func(i int) float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i, c := range f {
		for {
			d, err := c.Get(context.Background(), scope)
			if err == nil && d.Value["v"] == want(i) {
				break
			}
			if time.Now().After(deadline) {
				var got any
				if d != nil {
					got = d.Value
				}
				// What the instance knows of the rollouts, so that a
				// failure says whether it missed the step or the revision.
				t.Fatalf("instance i%d serves %v (%v), want v=%v; the rollouts it knows: %+v", i, got, err, want(i), c.Rollouts())
			}
			time.Sleep(5 * time.Millisecond)
		}
		c.Beat(context.Background())
	}
}

func twoSteps(bake time.Duration) rollout.Strategy {
	return rollout.Strategy{Kind: rollout.KindLinear, Steps: []rollout.Step{{Share: rollout.Full / 2, Bake: rollout.Duration(bake)}, {Share: rollout.Full, Bake: rollout.Duration(bake)}}}
}

var bob = varplane.Identity{ID: "bob", Roles: []string{"reviewer"}}

// approved proposes doc on scope (at base) by alice and approves it by bob.
func (e *env) approved(scope varplane.Scope, base varplane.Generation, doc string) control.Change {
	e.t.Helper()
	c := e.propose("alice", scope, base, doc)
	st, b, _ := e.act("bob", c.ID, "approve", map[string]any{})
	want(e.t, "approve", st, b, 200, "")
	return c
}

// TestRolloutCompletes takes a fleet of instances through a two-step
// rollout on every store: at the first step exactly the instances the
// stable hash selects serve the new revision while the head stays, at the
// second every instance does, and only once the last step baked does the
// head move and the change publish; every transition is an audited event.
func TestRolloutCompletes(t *testing.T) {
	for _, st := range rolloutStores {
		t.Run(st.name, func(t *testing.T) {
			s, another := st.open(t)
			e := newEnv(t, envOpts{store: s, storeInstances: true})
			e.clock.Advance(time.Since(e.clock.Now()))
			scope := varplane.Scope("app.flags")
			e.publish(scope, `{"v":1}`)
			f := fleet(t, another, scope, 6)
			c := e.approved(scope, 1, `{"v":2}`)
			ctx := context.Background()
			r, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			selected := func(i int) bool { return rollout.Selected(fmt.Sprintf("i%d", i), r.ID, rollout.Full/2) }
			serves(t, f, scope, func(i int) float64 {
				if selected(i) {
					return 2
				}
				return 1
			})
			if h := headOf(t, e, scope); h.Generation != 1 {
				t.Fatalf("the head moved to %d during the first step", h.Generation)
			}
			if got, _ := e.svc.Get(ctx, c.ID); got.State != control.StateRollout || got.Rollout != r.ID {
				t.Fatalf("change %s rollout %q during the rollout", got.State, got.Rollout)
			}
			// An entity key decides for itself, whatever the instance serves.
			for _, key := range []string{"user-1", "user-2", "user-3"} {
				d, err := f[0].GetFor(ctx, scope, key)
				if err != nil {
					t.Fatal(err)
				}
				if want := rollout.Selected(key, r.ID, rollout.Full/2); (d.Value["v"] == 2.0) != want {
					t.Fatalf("GetFor %s served v=%v, selected %v", key, d.Value["v"], want)
				}
			}
			// The bake is not over: nothing moves.
			if err := e.svc.RolloutPass(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			if got, _ := e.svc.GetRollout(ctx, r.ID); got.Step != 0 {
				t.Fatalf("step %d before the bake ended", got.Step)
			}
			e.clock.Advance(time.Minute)
			if err := e.svc.RolloutPass(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			// The pass moved the rollout to its last step (so that a wait
			// below that times out is the instances', not the pass's).
			if got, err := e.svc.GetRollout(ctx, r.ID); err != nil || got.Step != 1 {
				t.Fatalf("after the first bake the rollout is at step %d (%v), want 1: %+v", got.Step, err, got)
			}
			serves(t, f, scope, func(int) float64 { return 2 })
			if h := headOf(t, e, scope); h.Generation != 1 {
				t.Fatalf("the head moved to %d before the last step baked", h.Generation)
			}
			e.clock.Advance(time.Minute)
			if err := e.svc.RolloutPass(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			if h := headOf(t, e, scope); h.Generation != 2 || h.Head.Revision != c.Revision {
				t.Fatalf("after the last step the head is %d %s, want 2 %s", h.Generation, h.Head.Revision, c.Revision)
			}
			got, err := e.svc.Get(ctx, c.ID)
			if err != nil || got.State != control.StatePublished || got.Published == nil || got.Published.Generation != 2 {
				t.Fatalf("change after the rollout: %+v %v", got, err)
			}
			done, err := e.svc.GetRollout(ctx, r.ID)
			if err != nil || done.State != varplane.RolloutCompleted {
				t.Fatalf("rollout after its last step: %+v %v", done, err)
			}
			kinds := []string{}
			for _, ev := range done.Events {
				kinds = append(kinds, ev.Kind)
			}
			if strings.Join(kinds, ",") != "start,step,complete" {
				t.Fatalf("events %v", kinds)
			}
			if list, _ := e.svc.Rollouts(ctx, ""); len(list) != 0 {
				t.Fatalf("%d rollouts still in progress", len(list))
			}
			serves(t, f, scope, func(int) float64 { return 2 })
			// Every transition is in the store's log, by who made it.
			evs := auditOf(t, e, varplane.RolloutScope)
			if !strings.Contains(evs, "bob: rollout "+r.ID+": start") || !strings.Contains(evs, control.RolloutActor+": rollout "+r.ID+": step 2/2") {
				t.Fatalf("the rollouts record's events:\n%s", evs)
			}
		})
	}
}

// auditOf returns the events of scope as "actor: reason" lines.
func auditOf(t *testing.T, e *env, scope varplane.Scope) string {
	t.Helper()
	var b strings.Builder
	evs, err := e.store.EventHistory(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		fmt.Fprintf(&b, "%s: %s\n", ev.Actor, ev.Reason)
	}
	return b.String()
}

// TestRolloutRollsBackOnRejection: a revision the instances cannot decode
// is reported by them, and the next pass rolls the rollout back by itself
// as its own audited event with the evidence; every instance serves the
// previous revision again, the head never moved and the change failed.
func TestRolloutRollsBackOnRejection(t *testing.T) {
	for _, st := range rolloutStores {
		t.Run(st.name, func(t *testing.T) {
			s, another := st.open(t)
			e := newEnv(t, envOpts{store: s, storeInstances: true})
			e.clock.Advance(time.Since(e.clock.Now()))
			scope := varplane.Scope("app.flags")
			e.publish(scope, `{"v":1}`)
			f := fleet(t, another, scope, 4)
			c := e.approved(scope, 1, `{"v":2,"undecodable":true}`)
			ctx := context.Background()
			r, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				if err := e.svc.RolloutPass(ctx, "p"); err != nil {
					t.Fatal(err)
				}
				got, err := e.svc.GetRollout(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.State == varplane.RolloutRolledBack {
					last := got.Events[len(got.Events)-1]
					if last.Kind != "rollback" || last.By != control.RolloutActor || len(last.Evidence) == 0 || !strings.Contains(last.Note, "gate rejections failed") {
						t.Fatalf("the rollback event: %+v", last)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("rollout %+v not rolled back", got)
				}
				time.Sleep(10 * time.Millisecond)
			}
			serves(t, f, scope, func(int) float64 { return 1 })
			if h := headOf(t, e, scope); h.Generation != 1 {
				t.Fatalf("head %d after a rollback", h.Generation)
			}
			got, _ := e.svc.Get(ctx, c.ID)
			if got.State != control.StateFailed || !strings.Contains(got.Transitions[len(got.Transitions)-1].Note, "rolled back") {
				t.Fatalf("change after the rollback: %s %+v", got.State, got.Transitions[len(got.Transitions)-1])
			}
			if evs := auditOf(t, e, varplane.Scope("varplane-control.rollout."+r.ID)); !strings.Contains(evs, "rolled-back") {
				t.Fatalf("the archived record's events: %q", evs)
			}
			if list, _ := e.svc.Rollouts(ctx, ""); len(list) != 0 {
				t.Fatalf("%d rollouts still in progress", len(list))
			}
		})
	}
}

// TestRolloutLagGate: a selected instance that does not serve the revision
// within the bound rolls the rollout back; within it the step waits.
func TestRolloutLagGate(t *testing.T) {
	in := &controltest.Instances{}
	e := newEnv(t, envOpts{instances: in})
	scope := varplane.Scope("app.flags")
	e.publish(scope, `{"v":1}`)
	c := e.approved(scope, 1, `{"v":2}`)
	ctx := context.Background()
	r, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(10 * time.Second), Gates: control.Gates{MaxLag: rollout.Duration(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	var sel, sdk string
	for i := 0; sdk == ""; i++ {
		if id := fmt.Sprintf("h%d", i); rollout.Selected(id, r.ID, rollout.Full/2) {
			sel, sdk = cmp.Or(sel, id), map[bool]string{true: id}[sel != ""]
		}
	}
	status := func() {
		in.SetStatuses(control.InstanceStatus{Instance: sel, At: e.clock.Now(), Installed: map[varplane.Scope]varplane.Generation{scope: 1}},
			// An SDK consumer (its status filed over HTTP) serves no
			// rollout: it never holds one back.
			control.InstanceStatus{Instance: sdk, Identity: "svc", At: e.clock.Now(), Installed: map[varplane.Scope]varplane.Generation{scope: 1}})
	}
	status()
	e.clock.Advance(30 * time.Second)
	status()
	if err := e.svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	got, _ := e.svc.GetRollout(ctx, r.ID)
	if got.State != varplane.RolloutRunning || got.Step != 0 || got.GateStates[1].State != control.GatePending {
		t.Fatalf("within the bound: %s step %d gates %+v", got.State, got.Step, got.GateStates)
	}
	// A pass that finds the gates as they were writes nothing.
	version := headOf(t, e, varplane.RolloutScope).Generation
	e.clock.Advance(5 * time.Second)
	status()
	if err := e.svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if v := headOf(t, e, varplane.RolloutScope).Generation; v != version {
		t.Fatalf("an unchanged pending gate wrote the record again (%d → %d)", version, v)
	}
	e.clock.Advance(time.Minute)
	status()
	if err := e.svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	got, _ = e.svc.GetRollout(ctx, r.ID)
	if got.State != varplane.RolloutRolledBack || !strings.Contains(got.Events[len(got.Events)-1].Note, "gate lag failed") {
		t.Fatalf("past the bound: %s %+v", got.State, got.Events)
	}
	if ev := strings.Join(got.Events[len(got.Events)-1].Evidence[1].Evidence, "\n"); !strings.Contains(ev, `"`+sel+`"`) || strings.Contains(ev, `"`+sdk+`"`) || !strings.Contains(ev, "1 selected instances") {
		t.Fatalf("the lag evidence: %s", ev)
	}
}

// TestRolloutControls: a person pauses, resumes and aborts a rollout with
// the roles the scope's policy names; an abort returns the change to where
// it was and the head never moves.
func TestRolloutControls(t *testing.T) {
	e := newEnv(t, envOpts{instances: &controltest.Instances{}})
	scope := varplane.Scope("app.flags")
	e.publish(scope, `{"v":1}`)
	e.setPolicy("app", 1, []string{"reviewer"}, false)
	c := e.approved(scope, 1, `{"v":2}`)
	ctx := context.Background()
	alice := varplane.Identity{ID: "alice", Roles: []string{"dev"}}
	if _, err := e.svc.StartRollout(ctx, alice, c.ID, control.StartRolloutRequest{Strategy: rollout.Strategy{Kind: "bogus"}}); !isCode(err, varplane.CodeBadRequest) {
		t.Fatalf("a bad strategy: %v", err)
	}
	r, err := e.svc.StartRollout(ctx, alice, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Publish(ctx, alice, c.ID); !isCode(err, varplane.CodeChangeState) {
		t.Fatalf("a publish during the rollout: %v", err)
	}
	if _, err := e.svc.PauseRollout(ctx, alice, r.ID, ""); !isCode(err, varplane.CodeForbidden) {
		t.Fatalf("a pause without the policy's roles: %v", err)
	}
	if _, err := e.svc.PauseRollout(ctx, bob, r.ID, "looking"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	if err := e.svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.svc.GetRollout(ctx, r.ID); got.Step != 0 || got.State != varplane.RolloutPaused {
		t.Fatalf("a paused rollout moved: %s step %d", got.State, got.Step)
	}
	if _, err := e.svc.ResumeRollout(ctx, bob, r.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.AbortRollout(ctx, bob, r.ID, "not today"); err != nil {
		t.Fatal(err)
	}
	got, _ := e.svc.GetRollout(ctx, r.ID)
	if got.State != varplane.RolloutAborted || got.Events[len(got.Events)-1].By != "bob" {
		t.Fatalf("after the abort: %+v", got)
	}
	ch, _ := e.svc.Get(ctx, c.ID)
	if ch.State != control.StateApproved || headOf(t, e, scope).Generation != 1 {
		t.Fatalf("after the abort the change is %s and the head %d", ch.State, headOf(t, e, scope).Generation)
	}
	if _, err := e.svc.AbortRollout(ctx, bob, r.ID, ""); !isCode(err, varplane.CodeChangeState) {
		t.Fatalf("a second abort: %v", err)
	}
}

// TestRolloutResumesAfterRestart: a control plane that stops in the
// middle of a step leaves the rollout in the store; another one (a new
// Service over the same store) drives it on from the stored step start,
// never skipping the step's bake.
func TestRolloutResumesAfterRestart(t *testing.T) {
	e := newEnv(t, envOpts{instances: &controltest.Instances{}})
	scope := varplane.Scope("app.flags")
	e.publish(scope, `{"v":1}`)
	c := e.approved(scope, 1, `{"v":2}`)
	ctx := context.Background()
	r, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	// The first control plane is gone; a second one starts on the store.
	other := control.New(e.engine, control.NewGuard(), control.Options{Now: e.clock.Now, Instances: &controltest.Instances{}})
	e.clock.Advance(30 * time.Second)
	if err := other.RolloutPass(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if got, _ := other.GetRollout(ctx, r.ID); got.Step != 0 {
		t.Fatalf("the restarted control plane cut the step's bake short: step %d", got.Step)
	}
	e.clock.Advance(30 * time.Second)
	if err := other.RolloutPass(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if got, _ := other.GetRollout(ctx, r.ID); got.Step != 1 || got.Share != rollout.Full {
		t.Fatalf("the restarted control plane did not go on: step %d share %d", got.Step, got.Share)
	}
	e.clock.Advance(time.Minute)
	if err := other.RolloutPass(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if h := headOf(t, e, scope); h.Generation != 2 {
		t.Fatalf("head %d", h.Generation)
	}
}

// TestRolloutCompletionCutShort: once a rollout is completing (its last
// step baked with every gate passing, recorded before the head moves) no
// person can abort or pause it, and a control plane that stopped before
// moving the head has the next pass finish it: the head moves once, and
// the change is published.
func TestRolloutCompletionCutShort(t *testing.T) {
	e := newEnv(t, envOpts{instances: &controltest.Instances{}})
	scope := varplane.Scope("app.flags")
	e.publish(scope, `{"v":1}`)
	c := e.approved(scope, 1, `{"v":2}`)
	ctx := context.Background()
	r, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	// What a pass that stopped right after claiming the completion left.
	st, err := e.store.State(ctx, varplane.RolloutScope)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rollouts []map[string]any `json:"rollouts"`
	}
	if err := json.Unmarshal(st.Head.Document, &doc); err != nil {
		t.Fatal(err)
	}
	doc.Rollouts[0]["completing"] = true
	b, _ := json.Marshal(doc)
	if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: varplane.RolloutScope, Document: b, ExpectedGeneration: st.Generation,
		Actor: control.RolloutActor, Owner: control.OwnerName, Reason: "test: completing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.AbortRollout(ctx, bob, r.ID, ""); !isCode(err, varplane.CodeChangeState) {
		t.Fatalf("an abort of a completing rollout: %v", err)
	}
	if _, err := e.svc.PauseRollout(ctx, bob, r.ID, ""); !isCode(err, varplane.CodeChangeState) {
		t.Fatalf("a pause of a completing rollout: %v", err)
	}
	if err := e.svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if h := headOf(t, e, scope); h.Generation != 2 || h.Head.Revision != c.Revision {
		t.Fatalf("head %d after the completion", h.Generation)
	}
	if got, _ := e.svc.Get(ctx, c.ID); got.State != control.StatePublished {
		t.Fatalf("change %s", got.State)
	}
	if err := e.svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if h := headOf(t, e, scope); h.Generation != 2 {
		t.Fatalf("the head moved twice: %d", h.Generation)
	}
}

// TestRolloutRecordOwned: nobody but the control plane writes the
// rollouts record: a direct write is refused scope-owned.
func TestRolloutRecordOwned(t *testing.T) {
	e := newEnv(t, envOpts{})
	st, b := e.do("POST", "/v1/admin/publish", "admin", map[string]any{"scope": string(varplane.RolloutScope), "document": map[string]any{"rollouts": []any{}}, "expectedGeneration": 0}, nil)
	want(t, "a direct write of the rollouts record", st, b, 403, varplane.CodeScopeOwned)
}

// TestOrphanedClaimGivenBack: a change claimed by a rollout that was never
// recorded (a start cut short between the claim and the rollouts record,
// answered outcome-unknown) is given back to its state by the expiry pass
// once the claim is older than a minute, and the rollout can be started
// again; the claim of a recorded rollout is left alone.
func TestOrphanedClaimGivenBack(t *testing.T) {
	e := newEnv(t, envOpts{instances: &controltest.Instances{}})
	scope := varplane.Scope("app.flags")
	e.publish(scope, `{"v":1}`)
	c := e.approved(scope, 1, `{"v":2}`)
	ctx := context.Background()
	if _, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	state := func() control.State {
		t.Helper()
		got, err := e.svc.Get(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	e.clock.Advance(2 * time.Minute)
	if _, err := e.svc.ExpireDue(ctx); err != nil || state() != control.StateRollout {
		t.Fatalf("a claim of a recorded rollout: %s, %v", state(), err)
	}
	// The rollouts record loses the rollout, as if its start had never
	// recorded it.
	st, err := e.store.State(ctx, varplane.RolloutScope)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: varplane.RolloutScope, Document: json.RawMessage(`{"rollouts":[]}`),
		ExpectedGeneration: st.Generation, Owner: control.OwnerName}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.ExpireDue(ctx); err != nil || state() != control.StateApproved {
		t.Fatalf("an orphaned claim of two minutes: %s, %v; want it given back (approved)", state(), err)
	}
	if _, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Minute)}); err != nil {
		t.Fatalf("starting again after the claim was given back: %v", err)
	}
}
