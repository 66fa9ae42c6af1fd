package storetest

import (
	"testing"

	"github.com/varplane/varplane"
)

// testRollbackMark: a rollback's activation carries RollbackOf (the
// generation it rolled back) through the store: History, EventHistory,
// the idempotency record of its key, and the same after a restart; the
// scope's chain, which covers the field, verifies; no other event carries
// it. Driven through the engine, whose Rollback writes it.
func testRollbackMark(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := t.Context()
	const scope = varplane.Scope("rbmark.a")
	e := varplane.NewEngine(s, varplane.Options{})
	for gen, doc := range []int{1, 2} {
		if _, err := e.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: Doc(doc), ExpectedGeneration: varplane.Generation(gen), Actor: "storetest"}); err != nil {
			t.Fatalf("publish %d: %v", gen+1, err)
		}
	}
	rb, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: 2, Actor: "storetest", IdempotencyKey: "rbmark-key"})
	if err != nil || rb.Generation != 3 {
		t.Fatalf("Rollback = %+v, %v", rb, err)
	}
	if _, err := e.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: Doc(3), ExpectedGeneration: 3, Actor: "storetest"}); err != nil {
		t.Fatalf("publish after the rollback: %v", err)
	}
	check := func(s varplane.Store, when string) {
		t.Helper()
		hist := mustHistory(t, s, scope)
		events, err := s.EventHistory(ctx, scope)
		if err != nil {
			t.Fatalf("%s: EventHistory: %v", when, err)
		}
		for name, list := range map[string][]varplane.Event{"History": hist, "EventHistory": events} {
			marked := 0
			for _, ev := range list {
				switch {
				case ev.Kind == varplane.EventActivated && ev.Generation == 3:
					if ev.RollbackOf != 2 {
						t.Errorf("%s: %s: the rollback's activation has RollbackOf %d, want 2", when, name, ev.RollbackOf)
					}
					marked++
				case ev.RollbackOf != 0:
					t.Errorf("%s: %s: %s at generation %d carries RollbackOf %d", when, name, ev.Kind, ev.Generation, ev.RollbackOf)
				}
			}
			if marked != 1 {
				t.Errorf("%s: %s holds %d activations at generation 3, want 1", when, name, marked)
			}
		}
		if v, err := varplane.VerifyChain(scope, hist); err != nil {
			t.Errorf("%s: the chain does not verify with the rollback's mark: %+v, %v", when, v, err)
		}
		rec, err := s.Idempotency(ctx, "rbmark-key")
		if err != nil || rec.Event.RollbackOf != 2 {
			t.Errorf("%s: the rollback's idempotency record = %+v, %v; want its event with RollbackOf 2", when, rec, err)
		}
	}
	check(s, "after the rollback")
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after a restart")
	}
}
