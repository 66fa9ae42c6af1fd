package control_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/control/controltest"
)

// TestWait: the progress of a generation among the live instances that
// hold the scope, its rejections, the share asked for, a held wait that
// returns as soon as the share is met, and the bounds of the route.
func TestWait(t *testing.T) {
	in := &controltest.Instances{}
	e := newEnv(t, envOpts{instances: in})
	scope := varplane.Scope("app.flags")
	e.publish(scope, `{"v":1}`)
	e.publish(scope, `{"v":2}`)
	now := e.clock.Now()
	gen := func(g varplane.Generation) map[varplane.Scope]varplane.Generation {
		return map[varplane.Scope]varplane.Generation{scope: g}
	}
	in.SetStatuses(
		control.InstanceStatus{Instance: "a", At: now, Installed: gen(2)},
		control.InstanceStatus{Instance: "b", At: now, Installed: gen(1)},
		control.InstanceStatus{Instance: "c", At: now, Installed: map[varplane.Scope]varplane.Generation{"other": 4}},
		control.InstanceStatus{Instance: "stale", At: now.Add(-time.Hour), Installed: gen(1)},
	)
	ctx := context.Background()
	p, err := e.svc.Wait(ctx, control.WaitRequest{Scope: scope, Generation: 2, Min: 50})
	if err != nil || p.Live != 2 || p.Installed != 1 || !p.Met || p.Share != 50 {
		t.Fatalf("progress %+v %v", p, err)
	}
	if p, _ = e.svc.Wait(ctx, control.WaitRequest{Scope: scope, Generation: 2, Min: 100}); p.Met {
		t.Fatalf("half met a 100%% wait: %+v", p)
	}
	in.SetStatuses(control.InstanceStatus{Instance: "a", At: now, Installed: gen(2)},
		control.InstanceStatus{Instance: "b", At: now, Installed: map[varplane.Scope]varplane.Generation{}, Failed: gen(2)})
	if p, _ = e.svc.Wait(ctx, control.WaitRequest{Scope: scope, Generation: 2, Min: 100, For: time.Minute}); len(p.Rejected) != 1 || p.Rejected[0] != "b" {
		t.Fatalf("a rejection did not end the wait: %+v", p)
	}
	// A held wait returns once the statuses meet it.
	in.SetStatuses(control.InstanceStatus{Instance: "a", At: now, Installed: gen(1)})
	go func() {
		time.Sleep(100 * time.Millisecond)
		in.SetStatuses(control.InstanceStatus{Instance: "a", At: now, Installed: gen(2)})
	}()
	start := time.Now()
	if p, _ = e.svc.Wait(ctx, control.WaitRequest{Scope: scope, Generation: 2, Min: 100, For: time.Minute}); !p.Met || time.Since(start) > 30*time.Second {
		t.Fatalf("a held wait: %+v", p)
	}
	for _, q := range []string{"", "?generation=0", "?generation=2&min=101", "?generation=2&min=x", "?generation=2&timeout=2m", "?generation=2&timeout=x", "?generation=2&generation=3"} {
		st, b := e.do("GET", "/v1/control/documents/app.flags/wait"+q, "dave", nil, nil)
		want(t, "wait "+q, st, b, http.StatusBadRequest, varplane.CodeBadRequest)
	}
	var got control.WaitProgress
	st, b := e.do("GET", "/v1/control/documents/app.flags/wait?generation=2&min=95%25", "dave", nil, &got)
	want(t, "wait", st, b, 200, "")
	if !got.Met || got.Min != 95 {
		t.Fatalf("wait answer %s", b)
	}
	st, b = e.do("GET", "/v1/control/documents/secret/wait?generation=1", "dave", nil, nil)
	want(t, "wait on a scope the caller may not audit", st, b, http.StatusForbidden, varplane.CodeForbidden)
}

// TestRolloutRoutes: the rollout routes through the handler: who may start,
// see and control a rollout, and hostile bodies, each refused with
// nothing stored.
func TestRolloutRoutes(t *testing.T) {
	e := newEnv(t, envOpts{instances: &controltest.Instances{}})
	scope := varplane.Scope("app.flags")
	e.publish(scope, `{"v":1}`)
	c := e.approved(scope, 1, `{"v":2}`)
	for _, tc := range []struct {
		name, token string
		body        any
		status      int
		code        varplane.Code
	}{
		{"no strategy", "alice", map[string]any{}, 400, varplane.CodeBadRequest},
		{"bad strategy text", "alice", map[string]any{"strategy": "linear:0:1m"}, 400, varplane.CodeBadRequest},
		{"shrinking steps", "alice", map[string]any{"strategy": map[string]any{"kind": "linear", "steps": []any{map[string]any{"share": 5000, "bake": "1m"}, map[string]any{"share": 100, "bake": "1m"}}}}, 400, varplane.CodeBadRequest},
		{"unknown member", "alice", map[string]any{"strategy": "linear:2:1m", "force": true}, 400, varplane.CodeBadRequest},
		{"negative rejections", "alice", map[string]any{"strategy": "linear:2:1m", "gates": map[string]any{"maxRejections": -1}}, 400, varplane.CodeBadRequest},
		{"unknown check", "alice", map[string]any{"strategy": "linear:2:1m", "gates": map[string]any{"checks": []string{"nope"}}}, 400, varplane.CodeBadRequest},
		{"huge body", "alice", map[string]any{"strategy": "linear:2:1m", "note": strings.Repeat("x", 1<<20)}, 413, ""},
		{"deep body", "alice", map[string]any{"strategy": "linear:2:1m", "gates": deep(10000)}, 400, ""},
		{"no token", "", map[string]any{"strategy": "linear:2:1m"}, 401, varplane.CodeUnauthorized},
		{"reader", "viewer", map[string]any{"strategy": "linear:2:1m"}, 403, varplane.CodeForbidden},
	} {
		st, b, _ := e.act(tc.token, c.ID, "rollout", tc.body)
		if st != tc.status {
			t.Fatalf("%s: %d %s", tc.name, st, b)
		}
		if tc.code != "" {
			want(t, tc.name, st, b, tc.status, tc.code)
		}
		if h := headOf(t, e, varplane.RolloutScope); h.Generation != 0 {
			t.Fatalf("%s: the rollouts record was written", tc.name)
		}
		if got, _ := e.svc.Get(context.Background(), c.ID); got.State != control.StateApproved {
			t.Fatalf("%s: the change moved to %s", tc.name, got.State)
		}
	}
	var ro control.Rollout
	st, b := e.do("POST", "/v1/control/changes/"+c.ID+":rollout", "alice", map[string]any{"strategy": "exponential:10%:1m"}, &ro)
	want(t, "start", st, b, 201, "")
	if ro.Steps != 5 || ro.Share != 1000 || ro.State != varplane.RolloutRunning {
		t.Fatalf("started %s", b)
	}
	st, b = e.do("POST", "/v1/control/changes/"+c.ID+":rollout", "alice", map[string]any{"strategy": "linear:2:1m"}, nil)
	want(t, "a second rollout of the change", st, b, 409, varplane.CodeChangeState)
	var head control.DocumentHead
	st, b = e.do("GET", "/v1/control/documents/app.flags", "dave", nil, &head)
	want(t, "the head", st, b, 200, "")
	if head.Generation != 1 || head.Rollout == nil || head.Rollout.ID != ro.ID || head.Rollout.Share != 1000 {
		t.Fatalf("the head during the rollout: %s", b)
	}
	other := e.approved("app.other", 0, `{"v":1}`)
	st, b = e.do("POST", "/v1/control/changes/"+other.ID+":rollout", "alice", map[string]any{"strategy": "linear:2:1m"}, nil)
	want(t, "a rollout of another scope", st, b, 201, "")
	var list struct{ Rollouts []control.Rollout }
	st, b = e.do("GET", "/v1/control/rollouts", "dave", nil, &list)
	want(t, "list", st, b, 200, "")
	if len(list.Rollouts) != 2 {
		t.Fatalf("list %s", b)
	}
	list.Rollouts = nil
	st, b = e.do("GET", "/v1/control/rollouts", "viewer", nil, &list)
	want(t, "list by who may not audit", st, b, 200, "")
	if len(list.Rollouts) != 0 {
		t.Fatalf("a caller that may not audit the scopes sees %s", b)
	}
	st, b = e.do("GET", "/v1/control/rollouts/"+ro.ID, "dave", nil, nil)
	want(t, "get", st, b, 200, "")
	for _, path := range []string{"/v1/control/rollouts/ro-nope", "/v1/control/rollouts/ch-0000000000000000", "/v1/control/documents/app.none/rollout"} {
		st, b = e.do("GET", path, "dave", nil, nil)
		want(t, path, st, b, 404, varplane.CodeNotFound)
	}
	st, b = e.do("POST", "/v1/control/rollouts/"+ro.ID+":pause", "viewer", map[string]any{}, nil)
	want(t, "pause by a reader", st, b, 403, varplane.CodeForbidden)
	st, b = e.do("POST", "/v1/control/rollouts/"+ro.ID+":explode", "alice", map[string]any{}, nil)
	want(t, "an unknown control", st, b, 404, varplane.CodeNotFound)
	st, b = e.do("POST", "/v1/control/rollouts/"+ro.ID+":pause", "alice", map[string]any{"note": strings.Repeat("x", 64<<10)}, nil)
	want(t, "a huge note", st, b, 413, "")
	st, b = e.do("POST", "/v1/control/rollouts/"+ro.ID+":pause", "bob", map[string]any{"note": "hold"}, &ro)
	want(t, "pause", st, b, 200, "")
	if ro.State != varplane.RolloutPaused {
		t.Fatalf("paused %s", b)
	}
}

// deep returns n nested arrays.
func deep(n int) any {
	var v any = 1
	for range n {
		v = []any{v}
	}
	return v
}

// TestDeactivationProtection: a deactivation of a scope that instances
// held in the last hour (it or a scope below it) is refused with
// confirmation-required naming them with when each last said so, the most
// recent first, and nothing changes; with force it goes ahead. An instance
// whose status is older than an hour, or that holds another scope, does
// not hold it back.
func TestDeactivationProtection(t *testing.T) {
	in := &controltest.Instances{}
	e := newEnv(t, envOpts{instances: in})
	e.publish("app.flags", `{"v":1}`)
	e.publish("app.eu", `{"v":1}`)
	e.publish("misc.other", `{"v":1}`)
	now := e.clock.Now()
	in.SetStatuses(
		control.InstanceStatus{Instance: "pod-1", At: now.Add(-20 * time.Second), Installed: map[varplane.Scope]varplane.Generation{"app.eu": 1}},
		control.InstanceStatus{Instance: "pod-2", At: now, Installed: map[varplane.Scope]varplane.Generation{}, Failed: map[varplane.Scope]varplane.Generation{"app.flags": 1}},
		control.InstanceStatus{Instance: "stopped", At: now.Add(-12 * time.Minute), Installed: map[varplane.Scope]varplane.Generation{"app.flags": 1}},
		control.InstanceStatus{Instance: "gone", At: now.Add(-61 * time.Minute), Installed: map[varplane.Scope]varplane.Generation{"app.flags": 1}},
		control.InstanceStatus{Instance: "elsewhere", At: now, Installed: map[varplane.Scope]varplane.Generation{"other2": 1}},
	)
	st, b := e.do("POST", "/v1/admin/deactivate?dryRun=true", "dave", map[string]any{"scope": "app", "expectedGeneration": 0}, nil)
	want(t, "dry run of deactivate app", st, b, 409, varplane.CodeConfirmationRequired)
	named := `3 instance(s) held \"app\" or a scope below it in the last hour (2 live now; each with when it last said so): pod-2 (live, 0 s ago), pod-1 (live, 20 s ago), stopped (12 min ago)`
	if !contains(b, named) {
		t.Fatalf("the dry run's refusal = %s, want it to say %s", b, named)
	}
	st, b = e.do("POST", "/v1/admin/deactivate", "dave", map[string]any{"scope": "app", "expectedGeneration": 0}, nil)
	want(t, "deactivate app", st, b, 409, varplane.CodeConfirmationRequired)
	if !contains(b, named) || contains(b, "gone") || contains(b, "elsewhere") {
		t.Fatalf("the refusal = %s, want it to say %s", b, named)
	}
	if headOf(t, e, "app.flags").Head == nil || headOf(t, e, "app.eu").Head == nil {
		t.Fatal("a refused deactivation changed something")
	}
	st, b = e.do("POST", "/v1/admin/deactivate", "dave", map[string]any{"scope": "misc.other", "expectedGeneration": 1}, nil)
	want(t, "deactivate a scope nobody holds", st, b, 200, "")
	st, b = e.do("POST", "/v1/admin/deactivate", "dave", map[string]any{"scope": "app.eu", "expectedGeneration": 1}, nil)
	want(t, "deactivate a scope below what an instance holds", st, b, 409, varplane.CodeConfirmationRequired)
	if !contains(b, "pod-1 (live, 20 s ago)") || contains(b, "pod-2") {
		t.Fatalf("the refusal names %s", b)
	}
	st, b = e.do("POST", "/v1/admin/deactivate", "dave", map[string]any{"scope": "app.flags", "expectedGeneration": 1, "force": "yes"}, nil)
	want(t, "force that is not a boolean", st, b, 400, varplane.CodeBadRequest)
	st, b = e.do("POST", "/v1/admin/deactivate", "viewer", map[string]any{"scope": "app.flags", "expectedGeneration": 1}, nil)
	want(t, "a reader is refused before the instances are named", st, b, 403, varplane.CodeForbidden)
	st, b = e.do("POST", "/v1/admin/deactivate", "dave", map[string]any{"scope": "app", "expectedGeneration": 0, "force": true}, nil)
	want(t, "deactivate with force", st, b, 200, "")
	if headOf(t, e, "app.flags").Head != nil || headOf(t, e, "app.eu").Head != nil {
		t.Fatal("a forced deactivation did not clear the subtree")
	}
}

// TestDeactivationProtectionStores: on every store of record, an instance
// whose last status is 30 minutes old still holds a deactivation back
// (409 naming it and its age), while propagation, waits and the fleet's
// live flag count it as not live; one whose last status is 61 minutes old
// is not named. The stores' own tests show they keep a status an hour
// after its write (TestStatusHeldAnHour, TestBeatsHoldAnHour).
func TestDeactivationProtectionStores(t *testing.T) {
	for _, sc := range trustStores {
		t.Run(sc.name, func(t *testing.T) {
			s := sc.open(t)
			e := newEnv(t, envOpts{store: s, storeInstances: true})
			e.clock.Advance(time.Since(e.clock.Now()))
			e.publish("app.flags", `{"v":1}`)
			now := e.clock.Now()
			for id, age := range map[string]time.Duration{"i-live": 5 * time.Second, "i-30": 30 * time.Minute, "i-61": 61 * time.Minute} {
				fileStatus(t, s, varplane.InstanceStatus{Instance: id, WrittenAt: now.Add(-age), Ready: true,
					Documents: []varplane.InstanceDocument{{Scope: "app.flags", Generation: 1, Revision: "sha256:f1"}}})
			}
			ctx := context.Background()
			if p, err := e.svc.Propagation(ctx, "app.flags", 1); err != nil || p.Live != 1 || p.Installed != 1 {
				t.Fatalf("propagation = %+v, %v; want the live instance alone", p, err)
			}
			if p, err := e.svc.Wait(ctx, control.WaitRequest{Scope: "app.flags", Generation: 1, Min: 100}); err != nil || p.Live != 1 || !p.Met {
				t.Fatalf("wait = %+v, %v; want the live instance alone", p, err)
			}
			var page control.FleetPage
			st, b := e.do("GET", "/v1/control/instances", "alice", nil, &page)
			want(t, "fleet", st, b, 200, "")
			byID := map[string]control.FleetInstance{}
			for _, in := range page.Instances {
				byID[in.Instance] = in
			}
			if i30, ok := byID["i-30"]; !ok || i30.Live || i30.AgeSeconds < 30*60 || !byID["i-live"].Live {
				t.Fatalf("fleet = %s: want i-30 listed, last seen 30 minutes ago, and i-live live", b)
			}
			for _, path := range []string{"/v1/admin/deactivate?dryRun=true", "/v1/admin/deactivate"} {
				st, b = e.do("POST", path, "dave", map[string]any{"scope": "app", "expectedGeneration": 0}, nil)
				want(t, path, st, b, 409, varplane.CodeConfirmationRequired)
				if !contains(b, "(1 live now;") || !contains(b, "i-live (live, 5 s ago), i-30 (30 min ago)") || contains(b, "i-61") {
					t.Fatalf("%s: the refusal = %s, want i-live and i-30 (30 min ago) named, not i-61", path, b)
				}
			}
			if headOf(t, e, "app.flags").Head == nil {
				t.Fatal("a refused deactivation changed something")
			}
		})
	}
}

// TestRolloutEventFlood: pauses and resumes stop at the bound of events,
// and the rollout can still be aborted, its abort recorded.
func TestRolloutEventFlood(t *testing.T) {
	e := newEnv(t, envOpts{instances: &controltest.Instances{}})
	e.publish("app.flags", `{"v":1}`)
	c := e.approved("app.flags", 1, `{"v":2}`)
	ctx := context.Background()
	r, err := e.svc.StartRollout(ctx, bob, c.ID, control.StartRolloutRequest{Strategy: twoSteps(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var refused error
	for i := 0; i < control.MaxRolloutEvents && refused == nil; i++ {
		if _, refused = e.svc.PauseRollout(ctx, bob, r.ID, ""); refused == nil {
			_, refused = e.svc.ResumeRollout(ctx, bob, r.ID, "")
		}
	}
	if !isCode(refused, varplane.CodeLimitExceeded) {
		t.Fatalf("a flood of pauses: %v", refused)
	}
	got, err := e.svc.AbortRollout(ctx, bob, r.ID, "enough")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) > control.MaxRolloutEvents || got.Events[len(got.Events)-1].Kind != "abort" {
		t.Fatalf("%d events, the last %+v", len(got.Events), got.Events[len(got.Events)-1])
	}
}

// countingInstances counts the reads of the statuses.
type countingInstances struct {
	*controltest.Instances
	reads atomic.Int64
}

func (c *countingInstances) Statuses(ctx context.Context) ([]control.InstanceStatus, error) {
	c.reads.Add(1)
	return c.Instances.Statuses(ctx)
}

// TestWaitsShareReads: held waits count again from one read of the
// statuses per poll, shared by all of them, so many waits on a large
// fleet cost what one does.
func TestWaitsShareReads(t *testing.T) {
	in := &countingInstances{Instances: &controltest.Instances{}}
	e := newEnv(t, envOpts{instances: in})
	e.publish("app.flags", `{"v":1}`)
	in.SetStatuses(control.InstanceStatus{Instance: "a", At: e.clock.Now(), Installed: map[varplane.Scope]varplane.Generation{"app.flags": 1}})
	const waits = 10
	var wg sync.WaitGroup
	for range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.svc.Wait(context.Background(), control.WaitRequest{Scope: "app.flags", Generation: 2, Min: 100, For: 4 * control.WaitPoll})
			if err != nil || p.Met {
				t.Errorf("wait %+v %v", p, err)
			}
		}()
	}
	wg.Wait()
	// Each wait's first count, then about four shared polls.
	if n := in.reads.Load(); n > waits+8 {
		t.Fatalf("%d waits held for four polls read the statuses %d times", waits, n)
	}
}
