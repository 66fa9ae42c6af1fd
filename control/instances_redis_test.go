package control_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/instance"
	"github.com/varplane/varplane/store/redis"
)

// redisPrefix returns a fresh key prefix whose keys are dropped after t.
func redisPrefix(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "vp-control-inst-" + hex.EncodeToString(b[:])
	t.Cleanup(func() { dropPrefix(t, prefix) })
	return prefix
}

// redisEnv is a control plane on the shared Redis with the store's
// Instances, its clock at the real time (the instances write real times).
func redisEnv(t *testing.T, prefix string) *env {
	e := newEnv(t, envOpts{store: openRedis(t, prefix), storeInstances: true})
	e.clock.Advance(time.Since(e.clock.Now()))
	return e
}

type flags = map[string]any

func decodeFlags(_ context.Context, rec *varplane.RevisionRecord) (flags, error) {
	var m flags
	if err := json.Unmarshal(rec.Document, &m); err != nil {
		return nil, err
	}
	if _, ok := m["undecodable"]; ok {
		return nil, errors.New("member undecodable is not a flag")
	}
	return m, nil
}

// startInstance opens an in-process instance over a read-only Redis store
// of prefix, holding root.
func startInstance(t *testing.T, prefix, id string, root varplane.Scope, eval instance.CanaryEvaluator[flags]) *instance.Cache[flags] {
	t.Helper()
	s := openRedis(t, prefix, redis.Options{ReadOnly: true})
	t.Cleanup(func() { _ = s.Close() })
	c, err := instance.New(context.Background(), s, instance.Options[flags]{Root: root, Decode: decodeFlags, InstanceID: id, CanaryEvaluate: eval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitGeneration waits until c has installed generation g of scope.
func waitGeneration(t *testing.T, c *instance.Cache[flags], scope varplane.Scope, g varplane.Generation) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := c.Get(context.Background(), scope)
		if err == nil && d.Generation == g {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance: %s at %+v %v, want generation %d", scope, d, err, g)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// beatUntilReported beats every instance until each has reported on
// window having decoded the candidate (the staged record reaches each
// instance's store through Redis's invalidation).
func beatUntilReported(t *testing.T, e *env, window string, cs ...*instance.Cache[flags]) []varplane.CanaryReport {
	t.Helper()
	in := control.StoreInstances(e.engine)
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, c := range cs {
			c.Beat(context.Background())
		}
		rs, err := in.Reports(context.Background(), window)
		if err != nil {
			t.Fatal(err)
		}
		done := len(rs) == len(cs)
		for _, r := range rs {
			done = done && r.Decoded > 0
		}
		if done {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("reports of window %s: %+v, want %d that decoded", window, rs, len(cs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stagedWindows(t *testing.T, e *env) []varplane.StagedWindow {
	t.Helper()
	st, err := e.store.State(context.Background(), varplane.StagedScope)
	if err != nil {
		t.Fatal(err)
	}
	var s varplane.StagedWindows
	if st.Head != nil {
		if err := json.Unmarshal(st.Head.Document, &s); err != nil {
			t.Fatal(err)
		}
	}
	return s.Windows
}

// TestCanaryWindowsOnRedis: two in-process instances on real Redis read
// the staged candidate, decode and evaluate it and write their reports;
// the control pass closes a window all of whose fresh instances reported
// clean, and one instance's candidate error blocks another.
func TestCanaryWindowsOnRedis(t *testing.T) {
	prefix := redisPrefix(t)
	e := redisEnv(t, prefix)
	ctx := context.Background()
	e.publish("app.flags", `{"a":1}`)
	// i2's evaluation hook refuses a candidate that turns flag "a" negative.
	eval := func(_ context.Context, cand, cur *instance.Doc[flags]) error {
		if a, _ := cand.Value["a"].(float64); a < 0 {
			return errors.New("flag a would be negative")
		}
		if cur.Generation != 1 {
			return errors.New("the current head is not generation 1")
		}
		return nil
	}
	i1 := startInstance(t, prefix, "i1", "app.flags", nil)
	i2 := startInstance(t, prefix, "i2", "app.flags", eval)

	// All clean: the window passes once its duration is over.
	clean := e.propose("alice", "app.flags", 1, `{"a":2}`)
	st, body, c := e.act("alice", clean.ID, "canary", map[string]any{"duration": "1s", "minInstances": 2})
	want(t, "open a window", st, body, 200, "")
	if ws := stagedWindows(t, e); len(ws) != 1 || ws[0].Window != c.Canary.ID || ws[0].Revision != c.Revision {
		t.Fatalf("staged = %+v, want window %s of revision %s", ws, c.Canary.ID, c.Revision)
	}
	for _, r := range beatUntilReported(t, e, c.Canary.ID, i1, i2) {
		if r.CandidateError != "" || r.Errors != 0 || r.FiledAs != r.Instance {
			t.Fatalf("clean report %+v", r)
		}
	}
	if err := e.svc.CanaryPass(ctx, "pass"); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.svc.Get(ctx, clean.ID); got.State != control.StateCanary {
		t.Fatalf("before the window's end: %s (%+v), want canary", got.State, got.Canary)
	}
	e.clock.Advance(2 * time.Second)
	if err := e.svc.CanaryPass(ctx, "pass"); err != nil {
		t.Fatal(err)
	}
	got, err := e.svc.Get(ctx, clean.ID)
	if err != nil || got.State != control.StateChecked || got.Canary.State != control.WindowPassed {
		t.Fatalf("after the window: %+v %v, want checked with a passed window", got, err)
	}
	if ws := stagedWindows(t, e); len(ws) != 0 {
		t.Fatalf("a passed window stays staged: %+v", ws)
	}

	// One candidate error (i2's hook) blocks the window, before its end.
	bad := e.propose("bob", "app.flags", 1, `{"a":-1}`)
	_, _, c = e.act("bob", bad.ID, "canary", map[string]any{"duration": "1h", "minInstances": 2})
	if c.State != control.StateCanary {
		t.Fatalf("window on the bad candidate: %+v", c)
	}
	errs := 0
	for _, r := range beatUntilReported(t, e, c.Canary.ID, i1, i2) {
		if r.CandidateError != "" {
			errs++
		}
	}
	if errs != 1 {
		t.Fatalf("%d candidate errors, want 1 (i2's hook)", errs)
	}
	if err := e.svc.CanaryPass(ctx, "pass"); err != nil {
		t.Fatal(err)
	}
	got, _ = e.svc.Get(ctx, bad.ID)
	if got.State != control.StateFailed || got.Canary.State != control.WindowBlocked {
		t.Fatalf("after one candidate error: %s %+v, want failed and blocked", got.State, got.Canary)
	}

	// A candidate the instances' decoder refuses blocks too.
	undec := e.propose("carol", "app.flags", 1, `{"undecodable":true}`)
	_, _, c = e.act("carol", undec.ID, "canary", map[string]any{"duration": "1h", "minInstances": 1})
	rs := beatUntilReported(t, e, c.Canary.ID, i1, i2)
	if rs[0].CandidateError == "" || rs[1].CandidateError == "" {
		t.Fatalf("reports of an undecodable candidate: %+v", rs)
	}
	// The pass blocks it, which frees the scope's one staging slot for
	// the next window.
	if err := e.svc.CanaryPass(ctx, "pass"); err != nil {
		t.Fatal(err)
	}
	if got, _ = e.svc.Get(ctx, undec.ID); got.State != control.StateFailed {
		t.Fatalf("after an undecodable candidate: %s %+v, want failed", got.State, got.Canary)
	}

	// A doubtful report (filed under i1, naming another instance) keeps a
	// window open past its end.
	doubt := e.propose("dave", "app.flags", 1, `{"a":3}`)
	_, _, c = e.act("dave", doubt.ID, "canary", map[string]any{"duration": "1s", "minInstances": 2})
	beatUntilReported(t, e, c.Canary.ID, i1, i2)
	rd := openRedis(t, prefix)
	defer rd.Close()
	if err := rd.WriteCanaryReport(ctx, c.Canary.ID, "i1", []byte(`{"window":"`+c.Canary.ID+`","instance":"i9","decoded":1,"errors":0}`)); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	if err := e.svc.CanaryPass(ctx, "pass"); err != nil {
		t.Fatal(err)
	}
	got, _ = e.svc.Get(ctx, doubt.ID)
	if got.State != control.StateCanary || got.Canary.State != control.WindowOpen || !contains([]byte(got.Canary.Reason), "i9") {
		t.Fatalf("after a doubtful report: %s %+v, want the window open naming it", got.State, got.Canary)
	}
	st, body, _ = e.act("dave", doubt.ID, "publish", nil)
	want(t, "publish during an open window", st, body, 409, varplane.CodeChangeState)

	// The reports route shows the same verdict per instance: i1's report
	// (naming i9) doubtful with Evaluate's reason, i2's not, and i1 among
	// the fresh instances no report names.
	var wr control.WindowReports
	st, body = e.do("GET", "/v1/control/changes/"+doubt.ID+"/reports", "dave", nil, &wr)
	want(t, "reports", st, body, 200, "")
	if len(wr.Reports) != 2 || wr.Window.ID != got.Canary.ID || wr.Window.State != control.WindowOpen {
		t.Fatalf("reports = %s", body)
	}
	r1, r2 := wr.Reports[0], wr.Reports[1]
	if r1.FiledAs != "i1" || r1.Instance != "i9" || !r1.Doubtful || r1.Doubt != got.Canary.Reason {
		t.Fatalf("i1's report = %+v, want doubtful with %q", r1, got.Canary.Reason)
	}
	if r2.FiledAs != "i2" || r2.Doubtful || r2.Decoded < 1 || r2.At.IsZero() {
		t.Fatalf("i2's report = %+v, want a clean one", r2)
	}
	if len(wr.Unreported) != 1 || wr.Unreported[0] != "i1" {
		t.Fatalf("unreported = %v, want [i1]", wr.Unreported)
	}
}

// TestPropagationOnRedis: propagation counts the instances whose real
// heartbeat is under a minute old, and those of them at generation n or
// later (a failed document does not count).
func TestPropagationOnRedis(t *testing.T) {
	prefix := redisPrefix(t)
	e := redisEnv(t, prefix)
	ctx := context.Background()
	e.publish("app.flags", `{"a":1}`)
	i1 := startInstance(t, prefix, "i1", "app.flags", nil)
	i2 := startInstance(t, prefix, "i2", "app.flags", nil)
	i1.Beat(ctx)
	i2.Beat(ctx)
	prop := func(n int) control.Propagation {
		t.Helper()
		var p control.Propagation
		st, b := e.do("GET", "/v1/control/documents/app.flags/revisions/"+string(rune('0'+n))+"/propagation", "dave", nil, &p)
		want(t, "propagation", st, b, 200, "")
		return p
	}
	// An instance lists itself from its heartbeat loop, which New starts:
	// wait for both listings before counting.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p := prop(1)
		if p.Live == 2 && p.Installed == 2 && p.Unknown == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("propagation of 1 = %+v, want 2 of 2", p)
		}
	}
	e.publish("app.flags", `{"a":2}`)
	waitGeneration(t, i1, "app.flags", 2)
	i1.Beat(ctx)
	if p := prop(2); p.Live != 2 || p.Installed != 1 {
		t.Fatalf("propagation of 2 with one instance at 2 = %+v, want 1 of 2", p)
	}
	waitGeneration(t, i2, "app.flags", 2)
	i2.Beat(ctx)
	if p := prop(2); p.Live != 2 || p.Installed != 2 {
		t.Fatalf("propagation of 2 = %+v, want 2 of 2", p)
	}
	if p := prop(1); p.Installed != 2 {
		t.Fatalf("propagation of 1 (both run later) = %+v", p)
	}
	// Generation 3 does not decode: installed failed, it does not count.
	e.publish("app.flags", `{"undecodable":1}`)
	waitFailed := func(c *instance.Cache[flags]) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := c.Get(ctx, "app.flags"); varplane.ErrorCode(err) == varplane.CodeDocumentFailed {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the undecodable generation is not installed failed")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFailed(i1)
	i1.Beat(ctx)
	if p := prop(3); p.Live != 2 || p.Installed != 0 {
		t.Fatalf("propagation of an undecodable generation = %+v, want 0 of 2", p)
	}
	// A minute later neither status is fresh.
	e.clock.Advance(control.StatusFresh + time.Second)
	if p := prop(2); p.Live != 0 || p.Installed != 0 {
		t.Fatalf("propagation past the statuses' freshness = %+v, want 0 of 0", p)
	}
}

// TestIngestOnRedis: a consumer's status and report filed over HTTP land
// in Redis where the instance caches' do (the status listed, so the
// control plane reads it), under the id the route checked.
func TestIngestOnRedis(t *testing.T) {
	e := redisEnv(t, redisPrefix(t))
	e.publish("app.flags", `{"a":1}`)
	c := e.propose("alice", "app.flags", 1, `{"a":2}`)
	st, body, c := e.act("alice", c.ID, "canary", map[string]any{"duration": "10m", "minInstances": 1})
	want(t, "open a window", st, body, 200, "")
	s, b := e.do("PUT", "/v1/control/instances/reader:pod-1/status", "reader", status("app.flags"), nil)
	want(t, "file a status", s, b, http.StatusNoContent, "")
	s, b = e.do("PUT", "/v1/control/windows/"+c.Canary.ID+"/reports/reader:pod-1", "reader",
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "reader:pod-1", Decoded: 1}, nil)
	want(t, "file a report", s, b, http.StatusNoContent, "")
	list, err := e.svc.Propagation(context.Background(), "app.flags", 1)
	if err != nil || list.Live != 1 || list.Installed != 1 {
		t.Fatalf("propagation after one status over HTTP = %+v, %v; want 1 of 1", list, err)
	}
	reps := reports(t, e, c.Canary.ID)
	var r varplane.CanaryReport
	if err := json.Unmarshal(reps["reader:pod-1"], &r); err != nil || r.Decoded != 1 || len(reps) != 1 {
		t.Fatalf("reports on Redis = %q, %v", reps, err)
	}
}
