package storetest

import (
	"testing"

	"github.com/varplane/varplane"
)

// testUnauthenticatedCascade: a subtree deactivation whose actor nobody
// authenticated (Event.Unauthenticated) marks the cascade entries it writes
// in its descendants' histories the same way, before and after a restart,
// so that no entry passes a claimed actor off as a verified one.
func testUnauthenticatedCascade(t *testing.T, h Harness) {
	s := open(t, h)
	rev := mustCreate(t, s, "claim.a.b", Doc(1))
	mustActivate(t, s, "claim.a.b", rev, 0)
	ev := DeactivatedEvent("claim.a", 0)
	ev.Actor, ev.Unauthenticated = "ana", true
	if err := s.AppendSubtreeDeactivation(t.Context(), ev, 0); err != nil {
		t.Fatal(err)
	}
	check := func(s varplane.Store, when string) {
		t.Helper()
		for _, scope := range []varplane.Scope{"claim.a", "claim.a.b"} {
			hist := mustHistory(t, s, scope)
			last := hist[len(hist)-1]
			if last.Kind != varplane.EventDeactivated || last.Actor != "ana" || !last.Unauthenticated {
				t.Errorf("%s: last event of %s = %s by %q unauthenticated %v, want a deactivation by \"ana\", unauthenticated",
					when, scope, last.Kind, last.Actor, last.Unauthenticated)
			}
		}
	}
	check(s, "after the deactivation")
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after a restart")
	}
}
