package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// The helpers below serve the tests of shared stores (several replicas of
// one store of record) that go beyond the conformance suite: commits seen
// through Watch, and one-line commits that fail the test on an error.

// WatchCommits registers a Watch on s that forwards its commits to the
// returned channel (256 deep; a full channel fails the test); the Watch is
// cancelled when the test ends.
func WatchCommits(tb testing.TB, s varplane.Store) <-chan varplane.Commit {
	tb.Helper()
	ch := make(chan varplane.Commit, 256)
	cancel := s.Watch(func(c varplane.Commit) {
		select {
		case ch <- c:
		default:
			tb.Error("watch channel full")
		}
	})
	tb.Cleanup(cancel)
	return ch
}

// NextCommit returns the next commit from ch, failing the test when none
// arrives within the given time.
func NextCommit(tb testing.TB, ch <-chan varplane.Commit, within time.Duration) varplane.Commit {
	tb.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(within):
		tb.Fatalf("no commit delivered within %v", within)
		return varplane.Commit{}
	}
}

// MustCreate stores the revision of Doc(i) under scope (one that exists is
// fine) and returns it.
func MustCreate(tb testing.TB, s varplane.Store, scope varplane.Scope, i int) varplane.Revision {
	tb.Helper()
	ev := CreatedEvent(scope, Doc(i))
	if err := s.Append(context.Background(), ev, 0); err != nil && !errors.Is(err, varplane.ErrRevisionExists) {
		tb.Fatalf("create %s: %v", scope, err)
	}
	return ev.Revision
}

// MustActivate activates rev on scope expecting generation expected.
func MustActivate(tb testing.TB, s varplane.Store, scope varplane.Scope, rev varplane.Revision, expected varplane.Generation) {
	tb.Helper()
	if err := s.Append(context.Background(), ActivatedEvent(scope, rev, expected), expected); err != nil {
		tb.Fatalf("activate %s: %v", scope, err)
	}
}

// MustState returns scope's state in s.
func MustState(tb testing.TB, s varplane.Store, scope varplane.Scope) *varplane.ScopeState {
	tb.Helper()
	st, err := s.State(context.Background(), scope)
	if err != nil {
		tb.Fatalf("State(%s): %v", scope, err)
	}
	return st
}

// Kinds lists the kinds of a history, comma-separated.
func Kinds(h []varplane.Event) string {
	ks := make([]string, 0, len(h))
	for _, e := range h {
		ks = append(ks, string(e.Kind))
	}
	return strings.Join(ks, ",")
}

// TwoReplicas checks two replicas a and b of one shared store: a commit
// through a is installed in b and fires b's Watch without b reading
// anything itself (lagOfB, b's per-scope lag, reports the scope), and a
// subtree deactivation reaches b as one commit naming every cleared scope.
func TwoReplicas(tb testing.TB, a, b varplane.Store, lagOfB func() map[varplane.Scope]time.Duration) {
	tb.Helper()
	bw := WatchCommits(tb, b)

	rev := MustCreate(tb, a, "two.k", 1)
	MustActivate(tb, a, "two.k", rev, 0)
	c := NextCommit(tb, bw, 5*time.Second)
	if c.Kind != varplane.EventActivated || c.Scope != "two.k" || len(c.Changes) != 1 || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != rev {
		tb.Fatalf("B got %+v, want the activation of two.k at %s", c, rev)
	}
	if got := MustState(tb, b, "two.k"); got.Generation != 1 || got.Head == nil || got.Head.Revision != rev {
		tb.Fatalf("B state = %+v, want generation 1 at %s", got, rev)
	}
	if _, ok := lagOfB()["two.k"]; !ok {
		tb.Error("B does not report a lag for two.k")
	}

	r2 := MustCreate(tb, a, "two.k.sub", 2)
	MustActivate(tb, a, "two.k.sub", r2, 0)
	NextCommit(tb, bw, 5*time.Second)
	ev := DeactivatedEvent("two.k", 1)
	if err := a.AppendSubtreeDeactivation(context.Background(), ev, 1); err != nil {
		tb.Fatal(err)
	}
	if want := []varplane.CascadeEntry{{Scope: "two.k.sub", Generation: 2}}; !slices.Equal(ev.Cascade, want) {
		tb.Fatalf("cascade = %v, want %v", ev.Cascade, want)
	}
	c = NextCommit(tb, bw, 5*time.Second)
	var got []string
	for _, ch := range c.Changes {
		if ch.Head != nil {
			tb.Errorf("change %s still has a head", ch.Scope)
		}
		got = append(got, string(ch.Scope))
	}
	if c.Kind != varplane.EventDeactivated || strings.Join(got, ",") != "two.k,two.k.sub" {
		tb.Fatalf("B got %s %v, want deactivated two.k,two.k.sub", c.Kind, got)
	}
}

// StaleReplicaRollback is issue 33's reproduction on two replicas a and b
// of one shared store, b opened so that it does not follow a (no
// invalidations, a long revalidation interval): documents A then B are
// published through b, C through a; a rollback through b guarded by
// generation 3 re-activates B (the revision before the head as of
// generation 3, which is C), not A (the one before b's own snapshot, which
// never saw C).
func StaleReplicaRollback(tb testing.TB, a, b varplane.Store) {
	tb.Helper()
	ctx := context.Background()
	ea, eb := varplane.NewEngine(a, varplane.Options{}), varplane.NewEngine(b, varplane.Options{})
	defer ea.Close()
	defer eb.Close()
	const scope = varplane.Scope("stale.k")
	pub := func(e *varplane.Engine, doc string, expected varplane.Generation) varplane.Revision {
		tb.Helper()
		res, err := e.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: json.RawMessage(doc), ExpectedGeneration: expected})
		if err != nil {
			tb.Fatalf("publish %s at %d: %v", doc, expected, err)
		}
		return res.Revision
	}
	pub(eb, `{"doc":"A"}`, 0)
	revB := pub(eb, `{"doc":"B"}`, 1)
	pub(ea, `{"doc":"C"}`, 2)
	if st := MustState(tb, b, scope); st.Generation != 2 {
		tb.Fatalf("replica b's snapshot is at generation %d: it followed a, so this test shows nothing", st.Generation)
	}
	res, err := eb.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: 3})
	if err != nil {
		tb.Fatalf("rollback through b at generation 3: %v", err)
	}
	if res.Revision != revB || res.Generation != 4 {
		tb.Fatalf("rollback through b re-activated %s at generation %d, want B (%s) at 4", res.Revision, res.Generation, revB)
	}
	hist, err := a.History(ctx, scope)
	if err != nil {
		tb.Fatal(err)
	}
	if last := hist[len(hist)-1]; last.Kind != varplane.EventActivated || last.Generation != 4 || last.Revision != revB {
		tb.Fatalf("the store of record's last event = %s at %d of %s, want the activation of B at 4", last.Kind, last.Generation, last.Revision)
	}
}

// StaleReplicaDelivers holds on two replicas a and b of one shared store,
// b opened so that it does not follow a (no invalidations, a long
// revalidation interval): when one of b's own writes that changes no head
// (a create, a rejection) reads back a head that a committed meanwhile, b
// installs it and delivers it to its Watch. Installing it without a
// delivery left b's listeners (the push hub, an embedded instance cache)
// without that commit for good: the commit's own invalidation, or the
// next pass, then finds it installed already.
func StaleReplicaDelivers(tb testing.TB, a, b varplane.Store) {
	tb.Helper()
	ctx := context.Background()
	const scope = varplane.Scope("stalewatch.k")
	MustActivate(tb, a, scope, MustCreate(tb, a, scope, 1), 0)
	if st := MustState(tb, b, scope); st.Generation != 1 {
		tb.Fatalf("b's first read of %s: generation %d, want 1", scope, st.Generation)
	}
	bw := WatchCommits(tb, b)
	for i, write := range []struct {
		name string
		ev   *varplane.Event
	}{
		{"a create", CreatedEvent(scope, Doc(100))},
		{"a rejection", &varplane.Event{Kind: varplane.EventRejected, Scope: scope, RejectionReason: "document.type: /x", Timestamp: time.Now().UTC()}},
	} {
		gen := varplane.Generation(i + 2)
		MustActivate(tb, a, scope, MustCreate(tb, a, scope, i+2), gen-1)
		if st := MustState(tb, b, scope); st.Generation != gen-1 {
			tb.Fatalf("b followed a to generation %d before its own write: this test shows nothing", st.Generation)
		}
		if err := b.Append(ctx, write.ev, 0); err != nil {
			tb.Fatalf("%s through b: %v", write.name, err)
		}
		if st := MustState(tb, b, scope); st.Generation != gen {
			tb.Fatalf("after %s through b, b holds generation %d, want %d", write.name, st.Generation, gen)
		}
		c := NextCommit(tb, bw, 2*time.Second)
		if len(c.Changes) != 1 || c.Changes[0].Scope != scope || c.Changes[0].Generation != gen {
			tb.Fatalf("after %s through b, b's Watch got %+v, want generation %d of %s", write.name, c, gen, scope)
		}
	}
}
