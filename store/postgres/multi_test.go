package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// The multi-replica helpers, shared with the other stores' tests.
var (
	watchChan  = storetest.WatchCommits
	nextCommit = storetest.NextCommit
	create     = storetest.MustCreate
	activate   = storetest.MustActivate
	state      = storetest.MustState
	kinds      = storetest.Kinds
)

// TestTwoInstances: a commit through A is installed in B and fires B's
// Watch, without B reading anything itself; a subtree deactivation reaches
// B as one commit naming every cleared scope; A's own echo is a no-op.
func TestTwoInstances(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	storetest.TwoReplicas(t, a, b, b.Lag)
	// A rejection through B reaches A's snapshot (it is not a commit).
	rej := &varplane.Event{Kind: varplane.EventRejected, Scope: "two.k", RejectionReason: "document.type: /x", Timestamp: time.Now().UTC()}
	if err := b.Append(context.Background(), rej, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "A to install B's rejection", func() bool {
		st := state(t, a, "two.k")
		return st.LastRejected != nil && st.LastRejected.RejectionReason == "document.type: /x"
	})
	// A's own echoes were no-ops: A delivered each commit exactly once.
	if st := a.Stats(); st.WatchCommits != 3 {
		t.Errorf("A delivered %d commits, want 3", st.WatchCommits)
	}
}

// TestRevalidationAloneConverges: a replica that hears no notification at
// all (every one lost) still installs a commit within about one
// revalidation interval, and its Watch fires.
func TestRevalidationAloneConverges(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{RevalidateInterval: 200 * time.Millisecond, noListen: true})
	bw := watchChan(t, b)
	rev := create(t, a, "reval.k", 1)
	if got := state(t, b, "reval.k"); got.Generation != 0 || got.Head != nil {
		t.Fatalf("B state = %+v before activation", got)
	}
	activate(t, a, "reval.k", rev, 0)
	eventually(t, 3*time.Second, "B to install generation 1", func() bool { return state(t, b, "reval.k").Generation == 1 })
	nextCommit(t, bw, 3*time.Second)
	r2 := create(t, a, "reval.k", 2)
	activate(t, a, "reval.k", r2, 1)
	c := nextCommit(t, bw, 3*time.Second)
	if c.Changes[0].Generation != 2 || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != r2 {
		t.Fatalf("B got %+v, want generation 2", c.Changes[0])
	}
	if st := b.Stats(); st.ConfirmChanged == 0 || st.RevalidationPasses == 0 || st.Notifications != 0 {
		t.Errorf("stats = %+v, want a pass that found the change and no notification", st)
	}
}

// TestListenerKilled: B's listening connection is terminated by the server
// (pg_terminate_backend); B still converges on a commit made meanwhile and
// listens again.
func TestListenerKilled(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, withParam(t, u, "application_name", "varplane-b"), Options{RevalidateInterval: 200 * time.Millisecond})
	bw := watchChan(t, b)
	rev := create(t, a, "kill.k", 1)
	activate(t, a, "kill.k", rev, 0)
	nextCommit(t, bw, 5*time.Second)

	raw := rawConn(t, u)
	var killed int
	err := raw.QueryRow(context.Background(),
		"SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'varplane-b-listen') k").Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listening backends (%v), want 1", killed, err)
	}
	r2 := create(t, a, "kill.k", 2)
	activate(t, a, "kill.k", r2, 1)
	if c := nextCommit(t, bw, 3*time.Second); c.Changes[0].Generation != 2 {
		t.Fatalf("B got %+v, want generation 2", c.Changes[0])
	}
	eventually(t, 5*time.Second, "B to listen again", func() bool { return b.Stats().Listens >= 2 })
	// Quiet periods (pinged every interval) do not replace the connection.
	time.Sleep(time.Second)
	if n := b.Stats().Listens; n != 2 {
		t.Errorf("B listened %d times, want 2 (the first, and once after the kill)", n)
	}
	before := b.Stats().Notifications
	r3 := create(t, a, "kill.k", 3)
	activate(t, a, "kill.k", r3, 2)
	if c := nextCommit(t, bw, 3*time.Second); c.Changes[0].Generation != 3 {
		t.Fatalf("B got %+v, want generation 3", c.Changes[0])
	}
	eventually(t, 3*time.Second, "a notification on the new connection", func() bool { return b.Stats().Notifications > before })
}

// TestConcurrentReplicasOneScope: writers on two replicas race on one
// scope; exactly one commit per generation wins, both replicas end on the
// same head, and every won activation is in the history in order.
func TestConcurrentReplicasOneScope(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	stores := []*Store{openStore(t, u, Options{}), openStore(t, u, Options{})}
	const scope = varplane.Scope("race.two")
	revs := make([]varplane.Revision, 8)
	for i := range revs {
		revs[i] = create(t, stores[i%2], scope, i)
	}
	type win struct {
		gen varplane.Generation
		rev varplane.Revision
	}
	wins := make(chan win, 64)
	done := make(chan struct{})
	for w := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			s := stores[w%2]
			for range 10 {
				st, err := s.State(context.Background(), scope)
				if err != nil {
					t.Error(err)
					return
				}
				err = s.Append(context.Background(), storetest.ActivatedEvent(scope, revs[w], st.Generation), st.Generation)
				switch {
				case err == nil:
					wins <- win{st.Generation + 1, revs[w]}
				case errors.Is(err, varplane.ErrConflict):
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(wins)
	byGen := map[varplane.Generation]varplane.Revision{}
	for w := range wins {
		if _, dup := byGen[w.gen]; dup {
			t.Fatalf("two commits won generation %d", w.gen)
		}
		byGen[w.gen] = w.rev
	}
	h, err := stores[0].History(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	var gens []varplane.Generation
	for _, ev := range h {
		if ev.Kind == varplane.EventActivated {
			gens = append(gens, ev.Generation)
			if byGen[ev.Generation] != ev.Revision {
				t.Errorf("history has %s at %d, the winner was %s", ev.Revision, ev.Generation, byGen[ev.Generation])
			}
		}
	}
	if len(gens) != len(byGen) || !slices.IsSorted(gens) {
		t.Fatalf("history activations %v, want the %d wins in order", gens, len(byGen))
	}
	last := gens[len(gens)-1]
	for i, s := range stores {
		eventually(t, 5*time.Second, "both replicas on the last generation", func() bool {
			st := state(t, s, scope)
			return st.Generation == last && st.Head != nil && st.Head.Revision == byGen[last]
		})
		_ = i
	}
}

// TestMissedCommitsDelivered: a replica that learns of several commits at
// once (here by revalidation alone) delivers each of them to its Watch
// listeners, in order, read from the log, not only the newest head.
func TestMissedCommitsDelivered(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{RevalidateInterval: 500 * time.Millisecond, noListen: true})
	r1 := create(t, a, "gap.k", 1)
	r2 := create(t, a, "gap.k", 2)
	activate(t, a, "gap.k", r1, 0)
	eventually(t, 3*time.Second, "B on generation 1", func() bool { return state(t, b, "gap.k").Generation == 1 })
	bw := watchChan(t, b)
	activate(t, a, "gap.k", r2, 1)
	if err := a.AppendSubtreeDeactivation(context.Background(), storetest.DeactivatedEvent("gap.k", 2), 2); err != nil {
		t.Fatal(err)
	}
	activate(t, a, "gap.k", r1, 3)
	want := []struct {
		gen varplane.Generation
		rev varplane.Revision
	}{{2, r2}, {3, ""}, {4, r1}}
	for _, w := range want {
		c := nextCommit(t, bw, 5*time.Second)
		ch := c.Changes[0]
		if ch.Generation != w.gen || (w.rev == "") != (ch.Head == nil) || (ch.Head != nil && ch.Head.Revision != w.rev) {
			t.Fatalf("B delivered %+v, want generation %d with head %q", ch, w.gen, w.rev)
		}
		if (c.Kind == varplane.EventActivated) != (w.rev != "") {
			t.Errorf("commit kind %s for generation %d", c.Kind, w.gen)
		}
	}
}

// TestOwnCommitAfterUnseenOnes: a replica whose own commit follows commits
// of another replica it has not heard of yet delivers those first.
func TestOwnCommitAfterUnseenOnes(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{RevalidateInterval: 5 * time.Minute, noListen: true})
	r1 := create(t, a, "own.k", 1)
	r2 := create(t, a, "own.k", 2)
	activate(t, a, "own.k", r1, 0)
	state(t, b, "own.k") // B installs generation 1, then hears nothing
	bw := watchChan(t, b)
	activate(t, a, "own.k", r2, 1)
	activate(t, b, "own.k", r1, 2)
	for _, gen := range []varplane.Generation{2, 3} {
		if c := nextCommit(t, bw, 5*time.Second); c.Changes[0].Generation != gen {
			t.Fatalf("B delivered generation %d, want %d", c.Changes[0].Generation, gen)
		}
	}
}

// TestStaleReplicaDelivers: a head that one of B's own writes (a create, a
// rejection) reads back, committed meanwhile through A, is delivered to
// B's Watch, B not following A (storetest.StaleReplicaDelivers).
func TestStaleReplicaDelivers(t *testing.T) {
	a, b := staleReplicas(t)
	storetest.StaleReplicaDelivers(t, a, b)
}
