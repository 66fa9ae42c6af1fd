package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// outageOpts are short timeouts, so that the outage tests answer fast.
var outageOpts = Options{CommandTimeout: 500 * time.Millisecond, RevalidateInterval: 100 * time.Millisecond}

// within runs fn and fails the test when it does not return within d: a
// write against a database that does not answer must fail promptly, never
// hang.
func within[T any](t *testing.T, d time.Duration, what string, fn func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		var zero T
		return zero
	}
}

// wantUnavailable checks that, with the database unreachable, installed
// heads are served from memory and everything that needs the database
// answers store-unavailable within a bound (never an empty answer). The
// writes it tries go to other scopes: a write that timed out against a
// paused server may still commit when the server resumes (the one
// ambiguous case of any database, which such a write answers as
// outcome-unknown when paused says the server may have received it), and
// scope's history must stay exact.
func wantUnavailable(t *testing.T, a *Store, scope varplane.Scope, rev, next varplane.Revision, paused bool) {
	t.Helper()
	ctx := context.Background()
	if got := state(t, a, scope); got.Generation != 1 || got.Head == nil || got.Head.Revision != rev {
		t.Fatalf("installed head not served while the database is down: %+v", got)
	}
	const bound = 5 * time.Second
	other := scope + ".other"
	checks := map[string]func() error{
		"activate": func() error { return a.Append(ctx, storetest.ActivatedEvent(other, next, 0), 0) },
		"deactivate": func() error {
			return a.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent(other, 0), 0)
		},
		"create":      func() error { return a.Append(ctx, storetest.CreatedEvent(other, storetest.Doc(99)), 0) },
		"history":     func() error { _, err := a.History(ctx, scope); return err },
		"cold read":   func() error { _, err := a.State(ctx, "down.never"); return err },
		"idempotency": func() error { _, err := a.Idempotency(ctx, "k"); return err },
		"scopes":      func() error { _, err := a.Scopes(ctx); return err },
		"old revision": func() error {
			_, err := a.Revision(ctx, scope, next)
			return err
		},
	}
	for name, fn := range checks {
		err := within(t, bound, name, fn)
		write := name == "activate" || name == "deactivate" || name == "create"
		if paused && write && varplane.ErrorCode(err) == varplane.CodeOutcomeUnknown {
			continue
		}
		if varplane.ErrorCode(err) != varplane.CodeStoreUnavailable {
			t.Errorf("%s while the database is down = %v, want store-unavailable", name, err)
		}
	}
}

// TestPostgresStopped: the private server is stopped; reads go on from
// memory, writes and database reads answer 503 promptly, and after a
// restart writes succeed, nothing acknowledged is lost and a replica
// converges.
func TestPostgresStopped(t *testing.T) {
	p := startPrivatePG(t)
	u := freshSchema(t, p.url())
	a := openStore(t, u, outageOpts)
	b := openStore(t, u, outageOpts)
	bw := watchChan(t, b)
	rev := create(t, a, "down.k", 1)
	activate(t, a, "down.k", rev, 0)
	r2 := create(t, a, "down.k", 2)
	nextCommit(t, bw, 5*time.Second)

	p.stop()
	wantUnavailable(t, a, "down.k", rev, r2, false)
	if got := state(t, b, "down.k"); got.Generation != 1 {
		t.Fatalf("replica B lost its installed head while the database is down: %+v", got)
	}
	time.Sleep(300 * time.Millisecond) // a few failed passes
	if lag := a.Lag()["down.k"]; lag < 200*time.Millisecond {
		t.Errorf("lag = %v while the database is down, want it to grow", lag)
	}

	p.start()
	ctx := context.Background()
	eventually(t, 15*time.Second, "writes to succeed again", func() bool {
		return a.Append(ctx, storetest.ActivatedEvent("down.k", r2, 1), 1) == nil
	})
	h, err := a.History(ctx, "down.k")
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(h); got != "revision-created,activated,revision-created,activated" {
		t.Fatalf("history after the restart = %s", got)
	}
	c := nextCommit(t, bw, 5*time.Second)
	if c.Changes[0].Generation != 2 || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != r2 {
		t.Fatalf("replica B got %+v after the restart, want generation 2", c.Changes[0])
	}
	eventually(t, 5*time.Second, "lag to shrink", func() bool { return a.Lag()["down.k"] < 150*time.Millisecond })
}

// TestPostgresPaused: every process of the private server is stopped with
// SIGSTOP (it accepts connections but answers nothing); writes still fail
// promptly on the command timeout, reads are served from memory, and after
// SIGCONT writes succeed and the replica converges.
func TestPostgresPaused(t *testing.T) {
	p := startPrivatePG(t)
	u := freshSchema(t, p.url())
	a := openStore(t, u, outageOpts)
	b := openStore(t, u, outageOpts)
	bw := watchChan(t, b)
	rev := create(t, a, "pause.k", 1)
	activate(t, a, "pause.k", rev, 0)
	r2 := create(t, a, "pause.k", 2)
	nextCommit(t, bw, 5*time.Second)

	p.signal(syscall.SIGSTOP)
	paused := true
	defer func() {
		if paused {
			p.signal(syscall.SIGCONT)
		}
	}()
	wantUnavailable(t, a, "pause.k", rev, r2, true)
	p.signal(syscall.SIGCONT)
	paused = false

	ctx := context.Background()
	var lastErr error
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last write after SIGCONT answered: %v", lastErr)
		}
	})
	eventually(t, 15*time.Second, "writes to succeed again", func() bool {
		lastErr = a.Append(ctx, storetest.ActivatedEvent("pause.k", r2, 1), 1)
		if lastErr == nil {
			return true
		}
		// A write whose answer was lost (outcome-unknown) may have
		// committed: then the scope is already at generation 2 with r2.
		st, err := a.State(ctx, "pause.k")
		return err == nil && st.Generation == 2 && st.Head != nil && st.Head.Revision == r2
	})
	c := nextCommit(t, bw, 5*time.Second)
	if c.Changes[0].Generation != 2 || c.Changes[0].Head.Revision != r2 {
		t.Fatalf("replica B got %+v after the pause, want generation 2", c.Changes[0])
	}
	h, err := b.History(ctx, "pause.k")
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(h); got != "revision-created,activated,revision-created,activated" {
		t.Fatalf("history after the pause = %s", got)
	}
}

// TestPostgresRestartMidRun: writers commit on A while the server is
// restarted under them. Every commit acknowledged to a writer is in the
// log afterwards, in order, and replica B converges on every scope's last
// acknowledged head.
func TestPostgresRestartMidRun(t *testing.T) {
	p := startPrivatePG(t)
	u := freshSchema(t, p.url())
	a := openStore(t, u, outageOpts)
	b := openStore(t, u, outageOpts)
	const writers = 4
	type acked struct {
		gen varplane.Generation
		rev varplane.Revision
	}
	var mu sync.Mutex
	ackedBy := make([][]acked, writers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scope := varplane.Scope(fmt.Sprintf("mid.w%d", w))
			var gen varplane.Generation
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx := context.Background()
				cr := storetest.CreatedEvent(scope, storetest.Doc(w*100000+i))
				if err := a.Append(ctx, cr, 0); err != nil && !errors.Is(err, varplane.ErrRevisionExists) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				err := a.Append(ctx, storetest.ActivatedEvent(scope, cr.Revision, gen), gen)
				switch {
				case err == nil:
					gen++
					mu.Lock()
					ackedBy[w] = append(ackedBy[w], acked{gen, cr.Revision})
					mu.Unlock()
				case errors.Is(err, varplane.ErrConflict):
					// The commit whose reply was lost did commit: take
					// the generation the database reports.
					var e *varplane.Error
					if errors.As(err, &e) && e.Current != nil {
						gen = *e.Current
					}
				default:
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	// B installs every scope now, so that it has to follow the commits
	// made after the restart (notifications, revalidation), not read them
	// cold at the end.
	for w := range writers {
		state(t, b, varplane.Scope(fmt.Sprintf("mid.w%d", w)))
	}
	p.stop()
	time.Sleep(300 * time.Millisecond)
	p.start()
	eventually(t, 15*time.Second, "writes to succeed after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range ackedBy {
			if len(a) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	ctx := context.Background()
	for w := range writers {
		scope := varplane.Scope(fmt.Sprintf("mid.w%d", w))
		h, err := a.History(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		logged := map[varplane.Generation]varplane.Revision{}
		var last varplane.Generation
		for _, ev := range h {
			if ev.Kind == varplane.EventActivated {
				if ev.Generation != last+1 {
					t.Errorf("%s: activation at %d follows %d", scope, ev.Generation, last)
				}
				last = ev.Generation
				logged[ev.Generation] = ev.Revision
			}
		}
		for _, ak := range ackedBy[w] {
			if logged[ak.gen] != ak.rev {
				t.Errorf("%s: acknowledged activation of %s at %d is not in the log (log has %q)", scope, ak.rev, ak.gen, logged[ak.gen])
			}
		}
		want := state(t, a, scope)
		if want.Generation != last {
			t.Errorf("%s: A serves generation %d, the log ends at %d", scope, want.Generation, last)
		}
		eventually(t, 5*time.Second, "replica B to converge on "+string(scope), func() bool {
			got := state(t, b, scope)
			return got.Generation == last && got.Head != nil && got.Head.Revision == logged[last]
		})
	}
}
