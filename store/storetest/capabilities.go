package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// testCapabilities checks the optional capabilities a store declares
// (varplane's capabilities.go) beyond the ones with a suite of their own
// (Replayer, HeartbeatStore, Reclaimer, CheckedPublisher): a capability
// that comes in parts is whole, and each one keeps its promise on a store
// the harness opened (writable, empty, open).
func testCapabilities(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()

	// The heartbeat parts are read and written by different packages (the
	// instance cache writes, control reads): a store with one part and not
	// another would lose what one side wrote.
	_, w1 := s.(varplane.StatusWriter)
	_, r1 := s.(varplane.StatusReader)
	_, d1 := s.(varplane.StatusDeleter)
	_, w2 := s.(varplane.ReportWriter)
	_, r2 := s.(varplane.ReportReader)
	if _, whole := s.(varplane.HeartbeatStore); (w1 || r1 || d1 || w2 || r2) && !whole {
		t.Errorf("the %s store has part of varplane.HeartbeatStore (StatusWriter %v, StatusReader %v, StatusDeleter %v, ReportWriter %v, ReportReader %v), not all of it", s.Name(), w1, r1, d1, w2, r2)
	}
	if _, fin := s.(varplane.ReclaimFinisher); fin {
		if _, ok := s.(varplane.Reclaimer); !ok {
			t.Errorf("the %s store finishes reclamation passes (ReclaimFinisher) but does not reclaim (Reclaimer)", s.Name())
		}
	}
	if ro, ok := s.(varplane.ReadOnlyStore); ok && ro.ReadOnly() {
		t.Errorf("the %s store the harness opened reports ReadOnly", s.Name())
	}
	if r, ok := s.(varplane.Readier); ok {
		if err := r.Ready(ctx); err != nil {
			t.Errorf("Ready on a store just opened: %v", err)
		}
	}
	if d, ok := s.(varplane.ReadyDetailer); ok {
		b, err := json.Marshal(d.ReadyDetails())
		if err != nil || !bytes.HasPrefix(b, []byte("{")) {
			t.Errorf("ReadyDetails encodes as %s, %v; want a JSON object", b, err)
		}
	}

	const scope = "capabilities.k"
	rev := mustCreate(t, s, scope, Doc(1))
	mustActivate(t, s, scope, rev, 0)
	mustDeactivate(t, s, scope, 1)
	mustActivate(t, s, scope, rev, 2)

	if f, ok := s.(varplane.Forgetter); ok {
		// Forgetting drops the store's own copy only: the next read goes
		// to the store of record and finds the same head.
		before := mustState(t, s, scope)
		f.Forget(scope)
		after := mustState(t, s, scope)
		if after.Head == nil || after.Generation != before.Generation || after.Head.Revision != before.Head.Revision {
			t.Errorf("State after Forget = %+v, want generation %d and %s as before", after, before.Generation, before.Head.Revision)
		}
	}
	if c, ok := s.(varplane.Confirmer); ok {
		mustState(t, s, scope)
		at, held := c.ConfirmedAt(scope)
		if !held || at.IsZero() || at.After(time.Now().Add(time.Minute)) {
			t.Errorf("ConfirmedAt(%s) after a read = %v, %v; want a time of confirmation", scope, at, held)
		}
		if _, held := c.ConfirmedAt("capabilities.never-read"); held {
			t.Errorf("ConfirmedAt of a scope never read reports it held")
		}
	}
}
