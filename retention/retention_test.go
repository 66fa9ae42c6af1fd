package retention_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// stores are the stores the pass runs on here, each fresh.
var stores = map[string]func(t *testing.T) retention.Reclaimer{
	"memory": func(*testing.T) retention.Reclaimer { return memory.New() },
	"file": func(t *testing.T) retention.Reclaimer {
		s, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log.jsonl"), file.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
}

// publish creates and activates n documents in scope, one a minute from at.
func publish(t *testing.T, s varplane.Store, scope varplane.Scope, from, n int, at time.Time) []varplane.Revision {
	t.Helper()
	ctx := context.Background()
	var revs []varplane.Revision
	for i := from; i < from+n; i++ {
		st, err := s.State(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		c := storetest.CreatedEvent(scope, storetest.Doc(i))
		c.Timestamp = at.Add(time.Duration(i-from) * time.Minute)
		a := storetest.ActivatedEvent(scope, c.Revision, st.Generation)
		a.Timestamp = c.Timestamp
		if _, err := s.AppendPublish(ctx, c, a, st.Generation); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, c.Revision)
	}
	return revs
}

func runner(t *testing.T, s retention.Reclaimer, now time.Time, mod func(*retention.Options)) *retention.Runner {
	t.Helper()
	o := retention.Options{Policy: retention.DefaultPolicy(), Holder: "replica-a", Now: func() time.Time { return now }}
	if mod != nil {
		mod(&o)
	}
	r, err := retention.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func kept(t *testing.T, s varplane.Store, scope varplane.Scope, revs []varplane.Revision) (n int) {
	t.Helper()
	for _, r := range revs {
		_, err := s.Revision(context.Background(), scope, r)
		switch {
		case err == nil:
			n++
		case !errors.Is(err, varplane.ErrReclaimed):
			t.Fatalf("revision %s: %v, want kept or revision-reclaimed", r, err)
		}
	}
	return n
}

func each(t *testing.T, fn func(t *testing.T, s retention.Reclaimer)) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) { fn(t, open(t)) })
	}
}

// Seed 002: 60 revisions older than the minimum age → the 50 newest kept,
// the head among them; the history keeps every event.
func TestSixtyOldRevisionsKeepFifty(t *testing.T) {
	each(t, func(t *testing.T, s retention.Reclaimer) {
		revs := publish(t, s, "app.k", 0, 60, t0)
		now := t0.Add(8 * 24 * time.Hour)
		rep, err := runner(t, s, now, nil).RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Reclaimed != 10 {
			t.Errorf("reclaimed %d, want 10", rep.Reclaimed)
		}
		if n := kept(t, s, "app.k", revs); n != 50 {
			t.Errorf("kept %d, want 50", n)
		}
		if n := kept(t, s, "app.k", revs[10:]); n != 50 {
			t.Errorf("kept %d of the 50 newest, want all", n)
		}
		if hist, _ := s.History(context.Background(), "app.k"); len(hist) != 120 {
			t.Errorf("history has %d events, want 120", len(hist))
		}
		// Five more push the five oldest kept beyond the count; in a scope
		// whose revisions are all younger than the minimum age, nothing
		// beyond the count goes.
		more := publish(t, s, "app.k", 60, 5, now)
		young := publish(t, s, "app.young", 100, 60, now)
		if rep, err := runner(t, s, now.Add(time.Hour), nil).RunOnce(context.Background()); err != nil || rep.Reclaimed != 5 {
			t.Errorf("second pass: %+v %v, want 5 reclaimed", rep, err)
		}
		if n := kept(t, s, "app.k", more); n != 5 {
			t.Errorf("kept %d new revisions, want 5", n)
		}
		if n := kept(t, s, "app.young", young); n != 60 {
			t.Errorf("kept %d young revisions, want 60", n)
		}
	})
}

// Seed 002: the base of an open change is kept; an open change that cannot
// be read stops the whole pass.
func TestOpenChanges(t *testing.T) {
	each(t, func(t *testing.T, s retention.Reclaimer) {
		revs := publish(t, s, "app.k", 0, 60, t0)
		now := t0.Add(8 * 24 * time.Hour)
		base := revs[3]
		inUse := func(context.Context) (map[varplane.Scope][]varplane.Revision, error) {
			return map[varplane.Scope][]varplane.Revision{"app.k": {base}}, nil
		}
		broken := func(context.Context) (map[varplane.Scope][]varplane.Revision, error) {
			return nil, errors.New("change c-7 cannot be decoded")
		}
		if rep, err := runner(t, s, now, func(o *retention.Options) { o.InUse = broken }).RunOnce(context.Background()); err == nil || rep.Reclaimed != 0 {
			t.Errorf("pass with an unreadable change: %+v %v, want an error and nothing reclaimed", rep, err)
		}
		if n := kept(t, s, "app.k", revs); n != 60 {
			t.Errorf("kept %d after the refused pass, want 60", n)
		}
		if rep, err := runner(t, s, now, func(o *retention.Options) { o.InUse = inUse }).RunOnce(context.Background()); err != nil || rep.Reclaimed != 9 {
			t.Errorf("pass: %+v %v, want 9 reclaimed", rep, err)
		}
		if n := kept(t, s, "app.k", revs[3:4]); n != 1 {
			t.Errorf("the base of an open change was reclaimed")
		}
	})
}

// Seed 002: two replicas, one lease per scope: while B holds
// reclaim:<scope>, A's pass leaves the scope alone; and A's release never
// deletes a lease B took from it after it expired.
func TestLeases(t *testing.T) {
	each(t, func(t *testing.T, s retention.Reclaimer) {
		ctx := context.Background()
		revs := publish(t, s, "app.k", 0, 60, t0)
		now := t0.Add(8 * 24 * time.Hour)
		if err := s.AcquireLease(ctx, "reclaim:app.k", "replica-b", time.Minute); err != nil {
			t.Fatal(err)
		}
		rep, err := runner(t, s, now, nil).RunOnce(ctx)
		if err != nil || rep.Skipped != 1 || rep.Reclaimed != 0 {
			t.Errorf("pass while B holds the lease: %+v %v, want the scope skipped", rep, err)
		}
		if n := kept(t, s, "app.k", revs); n != 60 {
			t.Errorf("kept %d while B held the lease, want 60", n)
		}
		if err := s.ReleaseLease(ctx, "reclaim:app.k", "replica-b"); err != nil {
			t.Fatal(err)
		}
		// A's lease "expires" mid-pass and B takes it: A must not free it.
		steal := &stealing{Reclaimer: s}
		r, err := retention.New(steal, retention.Options{Policy: retention.DefaultPolicy(), Holder: "replica-a", Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.AcquireLease(ctx, "reclaim:app.k", "replica-c", time.Minute); !errors.Is(err, varplane.ErrLeaseHeld) {
			t.Errorf("after A's pass, B's lease is gone: %v", err)
		}
		if m := r.Metrics(); m.Reclaimed != 10 || !m.LastPass.Equal(now) || m.DeletionsFailed != 0 {
			t.Errorf("metrics %+v", m)
		}
	})
}

// stealing hands A's lease to B in the middle of A's work on the scope, as
// an expiry and a takeover would.
type stealing struct{ retention.Reclaimer }

func (s *stealing) FinishReclaim(ctx context.Context) (int, error) {
	if f, ok := s.Reclaimer.(varplane.ReclaimFinisher); ok {
		return f.FinishReclaim(ctx)
	}
	return 0, nil
}

func (s *stealing) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if err := s.Reclaimer.ReleaseLease(ctx, "reclaim:"+string(scope), "replica-a"); err != nil {
		return nil, fmt.Errorf("steal: %w", err)
	}
	if err := s.Reclaimer.AcquireLease(ctx, "reclaim:"+string(scope), "replica-b", time.Minute); err != nil {
		return nil, fmt.Errorf("steal: %w", err)
	}
	return s.Reclaimer.EventHistory(ctx, scope)
}

// TestFileRestartKeepsReclaimed: on the file store the pass compacts, and a
// restart from the checkpoint still answers 410.
func TestFileRestartKeepsReclaimed(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "log.jsonl")
	s, err := file.Open(ctx, path, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	revs := publish(t, s, "app.k", 0, 60, t0)
	if _, err := runner(t, s, t0.Add(8*24*time.Hour), nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = file.Open(ctx, path, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := kept(t, s, "app.k", revs); n != 50 {
		t.Errorf("kept %d after a restart, want 50", n)
	}
	if _, err := s.Replay(ctx, "app.k", 1); !errors.Is(err, varplane.ErrReclaimed) {
		t.Errorf("replay to a reclaimed generation: %v, want revision-reclaimed", err)
	}
}

func TestSelect(t *testing.T) {
	now := t0.Add(10 * 24 * time.Hour)
	ev := func(kind varplane.EventKind, rev string, age time.Duration) varplane.Event {
		return varplane.Event{Kind: kind, Revision: varplane.Revision(rev), Timestamp: now.Add(-age)}
	}
	day := 24 * time.Hour
	p := retention.Policy{RetainCount: 2, RetainMinAge: 7 * day, OrphanAge: time.Hour}
	for _, tc := range []struct {
		name  string
		hist  []varplane.Event
		head  string
		inUse []varplane.Revision
		want  string
	}{
		{"within the count", []varplane.Event{ev("revision-created", "a", 9*day), ev("activated", "a", 9*day)}, "a", nil, "[]"},
		{"beyond the count and old", []varplane.Event{
			ev("revision-created", "a", 9*day), ev("activated", "a", 9*day),
			ev("revision-created", "b", 9*day), ev("activated", "b", 9*day),
			ev("revision-created", "c", 9*day), ev("activated", "c", 9*day)}, "c", nil, "[a]"},
		{"beyond the count but young", []varplane.Event{
			ev("revision-created", "a", 6*day), ev("activated", "a", 6*day),
			ev("revision-created", "b", 6*day), ev("activated", "b", 6*day),
			ev("revision-created", "c", 6*day), ev("activated", "c", 6*day)}, "c", nil, "[]"},
		{"the head is never reclaimed", []varplane.Event{
			ev("revision-created", "a", 9*day), ev("activated", "a", 9*day),
			ev("revision-created", "b", 9*day), ev("revision-created", "c", 9*day), ev("activated", "b", 9*day), ev("activated", "c", 9*day),
			ev("activated", "a", 8*day)}, "a", nil, "[]"},
		{"in use", []varplane.Event{
			ev("revision-created", "a", 9*day), ev("activated", "a", 9*day),
			ev("revision-created", "b", 9*day), ev("activated", "b", 9*day),
			ev("revision-created", "c", 9*day), ev("activated", "c", 9*day)}, "c", []varplane.Revision{"a"}, "[]"},
		// Issue 33: a revision created and never activated is not an
		// orphan; only the count and the age reclaim it.
		{"a staged revision past the orphan age", []varplane.Event{ev("revision-created", "s", 2*time.Hour)}, "", nil, "[]"},
		{"a staged revision within the count", []varplane.Event{
			ev("revision-created", "a", 9*day), ev("activated", "a", 9*day),
			ev("revision-created", "s", 9*day),
			ev("revision-created", "b", 9*day), ev("activated", "b", 9*day)}, "b", nil, "[a]"},
		{"a staged revision beyond the count and old", []varplane.Event{
			ev("revision-created", "s", 9*day),
			ev("revision-created", "a", 9*day), ev("activated", "a", 9*day),
			ev("revision-created", "b", 9*day), ev("activated", "b", 9*day)}, "b", nil, "[s]"},
		{"a staged revision beyond the count but young", []varplane.Event{
			ev("revision-created", "s", 6*day),
			ev("revision-created", "a", 6*day), ev("activated", "a", 6*day),
			ev("revision-created", "b", 6*day), ev("activated", "b", 6*day)}, "b", nil, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(retention.Select(p, now, tc.hist, varplane.Revision(tc.head), tc.inUse)); got != tc.want {
				t.Errorf("Select = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSelectOrphans(t *testing.T) {
	now := t0
	p := retention.Policy{RetainCount: 2, RetainMinAge: 7 * 24 * time.Hour, OrphanAge: time.Hour}
	orphans := []retention.Orphan{
		{Revision: "old", CreatedAt: now.Add(-2 * time.Hour)},
		{Revision: "young", CreatedAt: now.Add(-30 * time.Minute)},
		{Revision: "head", CreatedAt: now.Add(-2 * time.Hour)},
		{Revision: "used", CreatedAt: now.Add(-2 * time.Hour)},
	}
	if got := fmt.Sprint(retention.SelectOrphans(p, now, orphans, "head", []varplane.Revision{"used"})); got != "[old]" {
		t.Errorf("SelectOrphans = %s, want [old]", got)
	}
}

// failing is a store whose end-of-pass deletions fail once.
type failing struct {
	retention.Reclaimer
	failed bool
}

type failedErr struct{ n int }

func (e failedErr) Error() string { return "disk full" }
func (e failedErr) Failed() int   { return e.n }

func (f *failing) FinishReclaim(context.Context) (int, error) {
	if !f.failed {
		f.failed = true
		return 0, failedErr{3}
	}
	return 3, nil
}

// TestFailedDeletionsCounted: a pass whose deletions fail reports them,
// counts them in the metrics, and the next pass runs and deletes them.
func TestFailedDeletionsCounted(t *testing.T) {
	f := &failing{Reclaimer: memory.New()}
	r := runner(t, f, t0, nil)
	rep, err := r.RunOnce(context.Background())
	if err == nil || rep.Failed != 3 {
		t.Fatalf("first pass: %+v %v, want 3 failed deletions", rep, err)
	}
	rep, err = r.RunOnce(context.Background())
	if err != nil || rep.Reclaimed != 3 {
		t.Fatalf("second pass: %+v %v, want the 3 retried", rep, err)
	}
	if m := r.Metrics(); m.DeletionsFailed != 3 || m.Reclaimed != 3 {
		t.Errorf("metrics %+v", m)
	}
}

// TestRunFirstPassAfterOneInterval: Run waits one interval before its first
// pass, then runs one an interval.
func TestRunFirstPassAfterOneInterval(t *testing.T) {
	s := memory.New()
	r := runner(t, s, t0, func(o *retention.Options) { o.Interval = 500 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	time.Sleep(20 * time.Millisecond)
	if !r.Metrics().LastPass.IsZero() {
		t.Errorf("a pass ran before the first interval")
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Metrics().LastPass.IsZero() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if r.Metrics().LastPass.IsZero() {
		t.Errorf("no pass after the interval")
	}
}

// The control service's open changes are what the pass keeps: a change
// proposed on an old base, and its candidate, survive a pass that reclaims
// their neighbours.
func TestOpenChangeOfTheControlService(t *testing.T) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	revs := publish(t, s, "app.k", 0, 60, t0)
	engine := varplane.NewEngine(s, varplane.Options{})
	defer engine.Close()
	svc := control.New(engine, control.NewGuard(), control.Options{Now: func() time.Time { return t0.Add(8 * 24 * time.Hour) }})
	ch, err := svc.Propose(ctx, varplane.Identity{ID: "ana"}, control.ProposeRequest{Scope: "app.k", Base: 4, Document: []byte(`{"candidate":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runner(t, s, t0.Add(8*24*time.Hour), func(o *retention.Options) { o.InUse = svc.RevisionsInUse }).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The candidate is a revision of the scope too (the newest), so the 11
	// oldest are beyond the count; the open change's base among them stays.
	if rep.Reclaimed != 10 {
		t.Errorf("reclaimed %d, want 10 (11 beyond the count, less the open change's base)", rep.Reclaimed)
	}
	if n := kept(t, s, "app.k", revs[3:4]); n != 1 {
		t.Error("the base of an open change was reclaimed")
	}
	if ch.Revision != "" {
		if n := kept(t, s, "app.k", []varplane.Revision{ch.Revision}); n != 1 {
			t.Error("the candidate of an open change was reclaimed")
		}
	}
}
