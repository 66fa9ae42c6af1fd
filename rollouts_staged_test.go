package varplane_test

import (
	"testing"

	"github.com/varplane/varplane"
)

// TestStagedRolloutsOf: the rollout of a scope that instances may serve
// (running or paused), never an ended one nor another scope's.
func TestStagedRolloutsOf(t *testing.T) {
	s := varplane.StagedRollouts{Rollouts: []varplane.StagedRollout{
		{ID: "ro-1", Scope: "a.b", State: varplane.RolloutRolledBack},
		{ID: "ro-2", Scope: "a.c", State: varplane.RolloutRunning},
		{ID: "ro-3", Scope: "a.b", State: varplane.RolloutPaused, Share: 10},
	}}
	if r, ok := s.Of("a.b"); !ok || r.ID != "ro-3" || r.Target().Share != 10 || r.Target().ID != "ro-3" {
		t.Fatalf("Of(a.b) = %+v %v", r, ok)
	}
	if _, ok := s.Of("a.d"); ok {
		t.Fatal("Of(a.d) found a rollout")
	}
}
