package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/store/storetest"
)

// TestChainHeadMovedElsewhere: a replica whose chain head is behind (the
// other replica's create sends no invalidation) or whose guess of a
// cascade is wrong (it never read the descendant) links from what it holds,
// is told by the script that the head or the cascade differs, writing
// nothing, and links again from what the script reported: every chain
// stays gapless, and the retries are counted.
func TestChainHeadMovedElsewhere(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{RevalidateInterval: time.Hour})
	b := openStore(t, u, Options{RevalidateInterval: time.Hour})
	ctx := context.Background()
	const scope = varplane.Scope("moved")
	for _, s := range []*Store{a, b} {
		state(t, s, scope) // installed, without a chain
	}
	create(t, a, scope, 1) // seq 1: b still holds no chain
	ev := storetest.CreatedEvent(scope, storetest.Doc(2))
	if err := b.Append(ctx, ev, 0); err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 2 || b.Stats().ChainRetries != 1 {
		t.Fatalf("b's create took seq %d after %d retries; want seq 2 after 1", ev.Seq, b.Stats().ChainRetries)
	}
	if got := state(t, b, scope).Chain; got.Seq != 2 || got.Hash != ev.Hash {
		t.Errorf("b's state holds chain head %+v after its own create, want seq 2", got)
	}

	// A replica opened after the descendant's activation never read the
	// descendant: it guesses no cascade, and the script reports the one it
	// found.
	r := create(t, a, scope+".kid", 3)
	activate(t, a, scope+".kid", r, 0)
	c := openStore(t, u, Options{RevalidateInterval: time.Hour})
	state(t, c, scope)
	d := storetest.DeactivatedEvent(scope, 0)
	if err := c.AppendSubtreeDeactivation(ctx, d, 0); err != nil {
		t.Fatal(err)
	}
	if len(d.Cascade) != 1 || d.Cascade[0].Scope != scope+".kid" || d.Seq != 3 {
		t.Fatalf("deactivation: cascade %v, seq %d; want %s.kid and seq 3", d.Cascade, d.Seq, scope)
	}
	if n := c.Stats().ChainRetries; n != 1 {
		t.Errorf("the deactivation took %d retries, want 1 (its cascade guessed wrong)", n)
	}
	for _, sc := range []varplane.Scope{scope, scope + ".kid"} {
		hist, err := a.History(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := varplane.VerifyChain(sc, hist); err != nil {
			t.Fatalf("%s: %v (%s)", sc, err, storetest.Kinds(hist))
		}
	}
}

// TestChainHeadUnreadable: a head hash whose chain head was rewritten by
// hand into something that is not "<seq> <hash>" fails its reads and its
// commits closed, and nothing is written.
func TestChainHeadUnreadable(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{})
	raw := rawClient(t, u)
	ctx := context.Background()
	const scope = varplane.Scope("unreadable.k")
	rev := create(t, a, scope, 1)
	if err := raw.Do(ctx, raw.B().Hset().Key(a.keys.head(scope)).FieldValue().FieldValue("k", "seven").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	cold := openStore(t, u, Options{})
	if _, err := cold.State(ctx, scope); varplane.ErrorCode(err) != varplane.CodeDocumentFailed {
		t.Fatalf("State with an unreadable chain head = %v, want document-failed", err)
	}
	err := a.Append(ctx, storetest.ActivatedEvent(scope, rev, 0), 0)
	if varplane.ErrorCode(err) != varplane.CodeDocumentFailed || !strings.Contains(varplane.ErrorMessage(err), "chain head") {
		t.Fatalf("activation over an unreadable chain head = %v, want document-failed naming the chain head", err)
	}
	hist, err := a.History(ctx, scope)
	if err != nil || len(hist) != 1 {
		t.Fatalf("history %s, %v; want the create alone", storetest.Kinds(hist), err)
	}
}

// TestChainAfterLegacyData: a scope written before the store kept chains
// (its head hash without a chain head, its history without links; made
// here by stripping them) keeps working: its next event starts the chain
// at seq 1, and a verifier counts the earlier events as unchained.
func TestChainAfterLegacyData(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{})
	raw := rawClient(t, u)
	ctx := context.Background()
	const scope = varplane.Scope("legacy.k")
	rev := create(t, a, scope, 1)
	activate(t, a, scope, rev, 0)
	hist, err := a.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	cmds := []rueidis.Completed{
		raw.B().Hdel().Key(a.keys.head(scope)).Field("k").Build(),
		raw.B().Del().Key(a.keys.history(scope)).Build(),
	}
	for _, ev := range hist {
		ev.Seq, ev.Hash, ev.Document = 0, "", nil
		cmds = append(cmds, raw.B().Rpush().Key(a.keys.history(scope)).Element(string(eventjson.Event(&ev))).Build())
	}
	for _, r := range raw.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	b := openStore(t, u, Options{})
	if st := state(t, b, scope); st.Chain != (varplane.ChainHead{}) || st.Generation != 1 {
		t.Fatalf("legacy state = %+v, want generation 1 and no chain", st)
	}
	c := storetest.CreatedEvent(scope, storetest.Doc(2))
	if _, err := b.AppendPublish(ctx, c, storetest.ActivatedEvent(scope, c.Revision, 1), 1); err != nil {
		t.Fatal(err)
	}
	hist, err = b.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	v, err := varplane.VerifyChain(scope, hist)
	if err != nil || v.Unchained != 2 || v.Head.Seq != 2 || c.Seq != 1 {
		t.Fatalf("after the legacy events: %+v, %v (created at seq %d); want 2 unchained, then seq 1 and 2", v, err, c.Seq)
	}
	if st := state(t, b, scope); st.Chain != v.Head {
		t.Errorf("State().Chain = %+v, the history ends at %+v", st.Chain, v.Head)
	}
}

// TestChainWait: the first retries of a commit whose chain head moved go
// at once; later ones wait a random time under a bound that doubles per
// loss up to 64 times the first, and all of them together stay under
// 74 ms.
func TestChainWait(t *testing.T) {
	var total time.Duration
	for try := range maxChainTries {
		bound := time.Duration(0)
		if try >= chainBackoffAfter {
			bound = chainBackoff << min(try-chainBackoffAfter, 6)
		}
		for range 100 {
			if d := chainWait(try); d < 0 || (bound == 0 && d != 0) || (bound > 0 && d >= bound) {
				t.Fatalf("try %d waited %v, bound %v", try, d, bound)
			}
		}
		total += bound
	}
	if total > 74*time.Millisecond {
		t.Fatalf("the waits of one commit may add up to %v", total)
	}
}
