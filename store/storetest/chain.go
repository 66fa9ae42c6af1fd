package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane"
)

// The chain: every event a store commits carries the next link of its
// scope's chain (varplane.ChainHead.Next), set by the store in the step that
// commits it, whatever Seq and Hash the caller put on the event; a refused
// commit takes no link; State reports the chain's head; cascade entries
// synthesised in descendants' histories carry none.

// RunChain runs the chain's conformance tests against the stores h opens.
// Run includes them.
func RunChain(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"EveryKindLinked", testChainEveryKind},
		{"CallerLinksIgnored", testChainCallerLinksIgnored},
		{"RefusedCommitsTakeNoLink", testChainRefused},
		{"Concurrent", testChainConcurrent},
		{"Restart", testChainRestart},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// wantChain verifies scope's history and checks that it holds n chained
// events, that State reports the same head, and that every cascade entry is
// covered by its parent's event. It returns the head.
func wantChain(t testing.TB, s varplane.Store, scope varplane.Scope, n uint64) varplane.ChainHead {
	t.Helper()
	hist := mustHistory(t, s, scope)
	v, err := varplane.VerifyChain(scope, hist)
	if err != nil {
		t.Fatalf("history of %s (%s): %v", scope, Kinds(hist), err)
	}
	if v.Unchained != 0 {
		t.Errorf("%s: %d events without a link in a store that always kept chains", scope, v.Unchained)
	}
	if v.Head.Seq != n {
		t.Errorf("%s: chain head at seq %d, want %d (history %s)", scope, v.Head.Seq, n, Kinds(hist))
	}
	if st := mustState(t, s, scope); st.Chain != v.Head {
		t.Errorf("%s: State().Chain = %+v, the history ends at %+v", scope, st.Chain, v.Head)
	}
	for i := range hist {
		e := &hist[i]
		if e.Seq != 0 || !strings.HasPrefix(e.Reason, "cascade:") {
			continue
		}
		parent := varplane.Scope(strings.TrimPrefix(e.Reason, "cascade:"))
		found := false
		for _, pe := range mustHistory(t, s, parent) {
			if pe.Seq != 0 && varplane.CheckCascade(e, &pe) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: cascade entry at generation %d is listed by no chained event of %s", scope, e.Generation, parent)
		}
	}
	return v.Head
}

func testChainEveryKind(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const root, child = varplane.Scope("chain"), varplane.Scope("chain.kid")

	r1 := mustCreate(t, s, root, Doc(1)) // 1
	mustActivate(t, s, root, r1, 0)      // 2
	rej := &varplane.Event{Kind: varplane.EventRejected, Scope: root, SchemaID: "test/v1", RejectionReason: "document.type at /x", Actor: "storetest", Timestamp: CreatedEvent(root, Doc(0)).Timestamp}
	if err := s.Append(ctx, rej, 0); err != nil { // 3
		t.Fatalf("reject: %v", err)
	}
	if _, err := s.AppendPublish(ctx, CreatedEvent(root, Doc(2)), ActivatedEvent(root, RevisionOf(Doc(2)), 1), 1); err != nil { // 4, 5
		t.Fatalf("publish: %v", err)
	}
	if _, err := s.AppendPublish(ctx, CreatedEvent(root, Doc(1)), ActivatedEvent(root, r1, 2), 2); err != nil { // 6: the revision exists
		t.Fatalf("publish of a stored revision: %v", err)
	}
	c1 := mustCreate(t, s, child, Doc(3)) // child 1
	mustActivate(t, s, child, c1, 0)      // child 2
	ev := DeactivatedEvent(root, 3)
	if err := s.AppendSubtreeDeactivation(ctx, ev, 3); err != nil { // 7 (child: a cascade entry)
		t.Fatalf("deactivate: %v", err)
	}
	if ev.Seq != 7 || ev.Hash == "" {
		t.Errorf("the deactivation's event came back with seq %d hash %q, want seq 7 and its hash", ev.Seq, ev.Hash)
	}
	if len(ev.Cascade) != 1 || ev.Cascade[0].Scope != child {
		t.Fatalf("cascade %+v, want %s", ev.Cascade, child)
	}
	head := wantChain(t, s, root, 7)
	if head.Hash != ev.Hash {
		t.Errorf("chain head %s, the last event's hash %s", head.Hash, ev.Hash)
	}
	wantChain(t, s, child, 2)
	mustActivate(t, s, child, c1, 2) // child 3: the chain goes on after the cascade entry
	wantChain(t, s, child, 3)
}

func testChainCallerLinksIgnored(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("chain.forged")
	cr := CreatedEvent(scope, Doc(1))
	cr.Seq, cr.Hash = 41, strings.Repeat("0", 64)
	if err := s.Append(ctx, cr, 0); err != nil {
		t.Fatal(err)
	}
	if cr.Seq != 1 {
		t.Errorf("created: seq %d after Append, want 1 (the store links, not the caller)", cr.Seq)
	}
	act := ActivatedEvent(scope, cr.Revision, 0)
	act.Seq, act.Hash = 1, cr.Hash
	if err := s.Append(ctx, act, 0); err != nil {
		t.Fatal(err)
	}
	created, activated := CreatedEvent(scope, Doc(2)), ActivatedEvent(scope, RevisionOf(Doc(2)), 1)
	created.Seq, activated.Seq, activated.Hash = 9, 10, "forged"
	if _, err := s.AppendPublish(ctx, created, activated, 1); err != nil {
		t.Fatal(err)
	}
	if created.Seq != 3 || activated.Seq != 4 || activated.Hash != varplane.ChainHash(created.Hash, 4, activated) {
		t.Errorf("publish came back with seqs %d, %d; want 3, 4 and the store's hashes", created.Seq, activated.Seq)
	}
	wantChain(t, s, scope, 4)
}

func testChainRefused(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("chain.refused")
	r := mustCreate(t, s, scope, Doc(1))
	mustActivate(t, s, scope, r, 0)
	refusals := []struct {
		what string
		do   func() error
	}{
		{"stale activation", func() error { return s.Append(ctx, ActivatedEvent(scope, r, 0), 0) }},
		{"unknown revision", func() error { return s.Append(ctx, ActivatedEvent(scope, RevisionOf(Doc(99)), 1), 1) }},
		{"existing revision", func() error { return s.Append(ctx, CreatedEvent(scope, Doc(1)), 0) }},
		{"stale publish", func() error {
			_, err := s.AppendPublish(ctx, CreatedEvent(scope, Doc(2)), ActivatedEvent(scope, RevisionOf(Doc(2)), 0), 0)
			return err
		}},
		{"stale deactivation", func() error { return s.AppendSubtreeDeactivation(ctx, DeactivatedEvent(scope, 0), 0) }},
		{"duplicate key", func() error {
			a := CreatedEvent(scope, Doc(3))
			a.IdempotencyKey, a.RequestHash = "chain-k", "h1"
			if err := s.Append(ctx, a, 0); err != nil {
				return fmt.Errorf("first use of the key: %w", err)
			}
			b := CreatedEvent(scope, Doc(4))
			b.IdempotencyKey, b.RequestHash = "chain-k", "h2"
			return s.Append(ctx, b, 0)
		}},
	}
	want := uint64(2)
	for _, r := range refusals {
		err := r.do()
		if err == nil {
			t.Fatalf("%s: accepted", r.what)
		}
		if strings.HasPrefix(err.Error(), "first use") {
			t.Fatal(err)
		}
		if r.what == "duplicate key" {
			want++ // the first create of that case was committed
		}
		wantChain(t, s, scope, want)
	}
	// The next commit takes the next link: no gap where the refusals were.
	r5 := mustCreate(t, s, scope, Doc(5))
	mustActivate(t, s, scope, r5, 1)
	wantChain(t, s, scope, want+2)
}

// testChainConcurrent races writers on one scope and on several: every
// scope's chain comes out gapless and sound, with one link per commit that
// succeeded.
func testChainConcurrent(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const writers, rounds = 8, 12
	scopes := []varplane.Scope{"chainrace.shared", "chainrace.a", "chainrace.b"}
	var mu sync.Mutex
	won := map[varplane.Scope]uint64{}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				scope := scopes[0]
				if i%2 == 1 {
					scope = scopes[1+w%2]
				}
				doc := Doc(1000*w + i)
				err := s.Append(ctx, CreatedEvent(scope, doc), 0)
				if err != nil && !errors.Is(err, varplane.ErrRevisionExists) {
					errs <- fmt.Errorf("writer %d create: %w", w, err)
					return
				}
				if err == nil {
					mu.Lock()
					won[scope]++
					mu.Unlock()
				}
				st, err := s.State(ctx, scope)
				if err != nil {
					errs <- err
					return
				}
				_, err = s.AppendPublish(ctx, CreatedEvent(scope, doc), ActivatedEvent(scope, RevisionOf(doc), st.Generation), st.Generation)
				switch {
				case err == nil:
					mu.Lock()
					won[scope]++ // the revision existed: the activation only
					mu.Unlock()
				case errors.Is(err, varplane.ErrConflict):
				default:
					errs <- fmt.Errorf("writer %d publish: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, scope := range scopes {
		wantChain(t, s, scope, won[scope])
	}
}

func testChainRestart(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("ephemeral store")
	}
	s := open(t, h)
	const scope = varplane.Scope("chain.restart")
	r := mustCreate(t, s, scope, Doc(1))
	mustActivate(t, s, scope, r, 0)
	before := wantChain(t, s, scope, 2)
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	if st := mustState(t, s, scope); st.Chain != before {
		t.Fatalf("after a restart the chain head is %+v, it was %+v", st.Chain, before)
	}
	r2 := mustCreate(t, s, scope, Doc(2))
	mustActivate(t, s, scope, r2, 1)
	wantChain(t, s, scope, 4)
}
