package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// TestAbsentScopeRemembered: a scope Redis holds nothing for is read once
// and then answered from memory (the control plane reads its policy scope on
// every write), a revalidation pass confirms it with one read, and a replica
// that remembers it as absent installs and delivers its first commit by
// another replica.
func TestAbsentScopeRemembered(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{RevalidateInterval: 50 * time.Millisecond})
	bw := watchChan(t, b)
	const scope = varplane.Scope("absent.k")
	for range 3 {
		if st := state(t, b, scope); st.Generation != 0 || st.Head != nil {
			t.Fatalf("State of a scope never written = %+v", st)
		}
	}
	if st := b.Stats(); st.ColdLoads != 1 || st.Absent != 1 || st.Installed != 0 {
		t.Fatalf("after three reads of an absent scope: cold loads %d, absent %d, installed %d; want 1, 1, 0", st.ColdLoads, st.Absent, st.Installed)
	}
	passes := b.Stats().RevalidationPasses
	eventually(t, 5*time.Second, "a pass confirming the absent scope", func() bool {
		st := b.Stats()
		return st.RevalidationPasses > passes+1 && st.Confirmations > 0
	})
	if st := b.Stats(); st.ConfirmChanged != 0 || st.WatchCommits != 0 {
		t.Fatalf("passes over an unchanged absent scope counted a change: %+v", st)
	}
	rev := create(t, a, scope, 1)
	activate(t, a, scope, rev, 0)
	c := nextCommit(t, bw, 5*time.Second)
	if c.Scope != scope || c.Changes[0].Generation != 1 || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != rev {
		t.Fatalf("B delivered %+v, want the first commit of %s", c, scope)
	}
	if st := state(t, b, scope); st.Generation != 1 || st.Head == nil || st.Head.Revision != rev {
		t.Fatalf("B serves %+v after the first commit", st)
	}
	if st := b.Stats(); st.Absent != 0 || st.Installed != 1 {
		t.Fatalf("after the first commit: absent %d, installed %d; want 0, 1", st.Absent, st.Installed)
	}
}

// TestAbsentFirstCommitWhileUnsubscribed: replica A remembers scope S as
// absent; A's subscription is killed and cannot come back for a while (its
// user loses the channel, as a reconfigured ACL or a proxy would do), and B
// commits S's first generation meanwhile, so A never receives its
// invalidation. Once A resubscribes, its resubscription pass (the periodic
// one is 5 minutes away) reads S again, installs the head and delivers it to
// A's watcher.
func TestAbsentFirstCommitWhileUnsubscribed(t *testing.T) {
	p := startPrivateRedis(t)
	ctx := context.Background()
	raw := rawClient(t, p.url(""))
	const prefix = "abs"
	channel := "&" + prefix + ":inv"
	acl := func(rules ...string) {
		t.Helper()
		cmd := append([]string{"ACL", "SETUSER", "replica-a"}, rules...)
		if err := raw.Do(ctx, raw.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	acl("on", ">pw-a", "~*", "+@all", "resetchannels", channel)
	a := openStore(t, withPrefix(t, p.url("replica-a:pw-a"), prefix), Options{RevalidateInterval: MaxRevalidateInterval})
	b := openStore(t, withPrefix(t, p.url(""), prefix), Options{})
	aw := watchChan(t, a)
	const scope = varplane.Scope("first.s")
	if st := state(t, a, scope); st.Head != nil || st.Generation != 0 {
		t.Fatalf("A reads %+v before any commit", st)
	}
	subs, invs := a.Stats().Subscriptions, a.Stats().Invalidations

	acl("resetchannels") // A may no longer subscribe
	if err := raw.Do(ctx, raw.B().Arbitrary("CLIENT", "KILL", "USER", "replica-a", "TYPE", "pubsub").Build()).Error(); err != nil {
		t.Logf("CLIENT KILL USER replica-a TYPE pubsub: %v (the ACL change already closed it)", err)
	}
	time.Sleep(200 * time.Millisecond) // A tries and fails to resubscribe
	rev := create(t, b, scope, 1)
	activate(t, b, scope, rev, 0)
	time.Sleep(100 * time.Millisecond)
	if st := a.Stats(); st.Invalidations != invs || st.Subscriptions != subs {
		t.Fatalf("A's subscription was not down during the commit: invalidations %d→%d, subscriptions %d→%d", invs, st.Invalidations, subs, st.Subscriptions)
	}
	select {
	case c := <-aw:
		t.Fatalf("A delivered %+v while unsubscribed", c)
	default:
	}

	acl(channel) // the subscription comes back
	c := nextCommit(t, aw, 10*time.Second)
	if c.Scope != scope || c.Changes[0].Generation != 1 || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != rev {
		t.Fatalf("A delivered %+v, want the first commit of %s", c, scope)
	}
	if st := a.Stats(); st.Subscriptions <= subs || st.ConfirmChanged == 0 {
		t.Fatalf("A converged without its resubscription pass: %+v", st)
	}
	if st := state(t, a, scope); st.Generation != 1 || st.Head == nil || st.Head.Revision != rev {
		t.Fatalf("A serves %+v after converging", st)
	}
}

// TestAbsentScopesBounded: past maxAbsent unknown scopes, reads of further
// ones are answered (zero state) without being remembered, so each read of
// one asks Redis; a pass keeps confirming the ones remembered.
func TestAbsentScopesBounded(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	s := openStore(t, u, Options{})
	for i := range maxAbsent + 10 {
		if st := state(t, s, varplane.Scope(fmt.Sprintf("unknown.s%d", i))); st.Head != nil || st.Generation != 0 {
			t.Fatalf("State of unknown scope %d = %+v", i, st)
		}
	}
	if st := s.Stats(); st.Installed != 0 || st.Absent != maxAbsent {
		t.Fatalf("Stats: Installed %d, Absent %d; want 0 and %d", st.Installed, st.Absent, maxAbsent)
	}
	before := s.Stats().ColdLoads
	state(t, s, "unknown.past")
	state(t, s, "unknown.past")
	if got := s.Stats().ColdLoads - before; got != 2 {
		t.Fatalf("two reads of a scope past the bound made %d cold loads, want 2", got)
	}
	// Forgetting one (the instance cache's bound) makes room for another.
	s.Forget("unknown.s0")
	state(t, s, "unknown.past")
	if e := s.entry("unknown.past"); e == nil || s.Stats().Absent != maxAbsent {
		t.Fatalf("room made by Forget not used: entry %v, absent %d", e, s.Stats().Absent)
	}
}

// TestAbsentForgottenOnLostReply: a commit whose reply is lost may have
// given the scope a head, so an absent entry does not answer for it: the
// next read asks Redis.
func TestAbsentForgottenOnLostReply(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	s := openStore(t, u, Options{})
	const scope = varplane.Scope("lost.k")
	state(t, s, scope)
	if s.entry(scope) == nil {
		t.Fatal("absent scope not remembered")
	}
	_ = s.writeFailure(scope, fmt.Errorf("reply lost"))
	if s.entry(scope) != nil || s.Stats().Absent != 0 {
		t.Fatalf("absent entry kept after an unacknowledged commit: absent %d", s.Stats().Absent)
	}
}
