package varplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/memory"
)

// stageRollout writes the rollouts document as the control subsystem
// would (straight to the store: RolloutScope is owned).
func stageRollout(t interface{ Fatal(...any) }, e *varplane.Engine, expected varplane.Generation, rs ...varplane.StagedRollout) {
	doc, err := json.Marshal(varplane.StagedRollouts{Rollouts: rs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(context.Background(), varplane.PublishRequest{Scope: varplane.RolloutScope, Document: doc, ExpectedGeneration: expected}); err != nil {
		t.Fatal(err)
	}
}

// pickerFixture is an engine whose scope app.f has head {"v":1} at
// generation 1 and a created revision {"v":2}, which it returns.
func pickerFixture(t *testing.T) (*varplane.Engine, varplane.CreateRevisionResult) {
	t.Helper()
	ctx := context.Background()
	e := varplane.NewEngine(memory.New(), varplane.Options{})
	if _, err := e.Publish(ctx, varplane.PublishRequest{Scope: "app.f", Document: json.RawMessage(`{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	created, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "app.f", Document: json.RawMessage(`{"v":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	return e, created
}

// TestRolloutPicker: a key the step selects is served the rollout's
// revision as generation base+1 (split), one it does not select the head,
// a request without a key the head; a rollout on another base, paused or
// ended, or on another scope changes nothing; a new reading of the
// rollouts (the step grew) is picked up.
func TestRolloutPicker(t *testing.T) {
	ctx := context.Background()
	e, created := pickerFixture(t)
	head, err := e.Head(ctx, "app.f")
	if err != nil {
		t.Fatal(err)
	}
	p := varplane.NewRolloutPicker(e, nil)
	r := varplane.StagedRollout{ID: "ro1", Scope: "app.f", Revision: created.Revision, Base: 1, State: varplane.RolloutRunning, Step: 0, Steps: 2, Share: rollout.Full / 2}
	stageRollout(t, e, 0, r)

	var in, out string
	for i := 0; in == "" || out == ""; i++ {
		k := fmt.Sprint("user-", i)
		if r.Target().Key(k, nil) {
			in = k
		} else {
			out = k
		}
	}
	got, split, err := p.Pick(ctx, head, in)
	if err != nil || !split || got.Revision != created.Revision || got.Generation != 2 || string(got.Document) != `{"v":2}` {
		t.Fatalf("a selected key: %+v split %v %v", got, split, err)
	}
	for _, k := range []string{out, ""} {
		if got, split, err := p.Pick(ctx, head, k); err != nil || split || got != head {
			t.Errorf("key %q: %+v split %v %v, want the head", k, got, split, err)
		}
	}

	for i, other := range []varplane.StagedRollout{
		{ID: "ro2", Scope: "app.f", Revision: created.Revision, Base: 7, State: varplane.RolloutRunning, Share: rollout.Full},
		{ID: "ro3", Scope: "app.g", Revision: created.Revision, Base: 1, State: varplane.RolloutRunning, Share: rollout.Full},
		{ID: "ro4", Scope: "app.f", Revision: created.Revision, Base: 1, State: "rolled-back", Share: rollout.Full},
	} {
		stageRollout(t, e, varplane.Generation(i+1), other)
		if got, split, err := p.Pick(ctx, head, in); err != nil || split || got != head {
			t.Errorf("rollout %s: %+v split %v %v, want the head", other.ID, got, split, err)
		}
	}
	r.Share = rollout.Full
	stageRollout(t, e, 4, r)
	if _, split, _ := p.Pick(ctx, head, out); !split {
		t.Error("a step of every key does not select the key the half step left out")
	}
}

// TestRolloutPickerAgreesWithTheInstanceRule: the picker selects exactly
// the keys rollout.Target.Key selects (the embedded instance's rule for an
// entity key), for any share.
func TestRolloutPickerAgreesWithTheInstanceRule(t *testing.T) {
	ctx := context.Background()
	e, created := pickerFixture(t)
	head, _ := e.Head(ctx, "app.f")
	p := varplane.NewRolloutPicker(e, nil)
	gen := varplane.Generation(0)
	rapid.Check(t, func(t *rapid.T) {
		r := varplane.StagedRollout{ID: rapid.StringMatching(`[a-z0-9]{4,12}`).Draw(t, "id"), Scope: "app.f", Revision: created.Revision,
			Base: 1, State: varplane.RolloutRunning, Share: rapid.IntRange(0, rollout.Full).Draw(t, "share")}
		stageRollout(t, e, gen, r)
		gen++
		for _, k := range rapid.SliceOfN(rapid.String(), 1, 20).Draw(t, "keys") {
			if k == "" {
				continue
			}
			_, split, err := p.Pick(ctx, head, k)
			if err != nil || split != r.Target().Key(k, nil) {
				t.Fatalf("key %q share %d: split %v (%v), the rule says %v", k, r.Share, split, err, r.Target().Key(k, nil))
			}
		}
	})
}

// TestRolloutReadingHolds: a reading keeps answering what it read while
// RolloutScope moves on (a request's flags are picked from one reading);
// the picker's next reading, and ReadingOf the new head, see the move;
// ReadingOf nil (no rollouts document) picks the head.
func TestRolloutReadingHolds(t *testing.T) {
	ctx := context.Background()
	e, created := pickerFixture(t)
	head, _ := e.Head(ctx, "app.f")
	p := varplane.NewRolloutPicker(e, nil)
	if _, split, err := p.ReadingOf(nil).Pick(ctx, head, "k"); err != nil || split {
		t.Fatalf("no rollouts document: split %v %v", split, err)
	}
	stageRollout(t, e, 0, varplane.StagedRollout{ID: "ro1", Scope: "app.f", Revision: created.Revision, Base: 1, State: varplane.RolloutRunning, Share: rollout.Full})
	rd, err := p.Reading(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stageRollout(t, e, 1)
	if got, split, err := rd.Pick(ctx, head, "k"); err != nil || !split || got.Revision != created.Revision {
		t.Fatalf("the reading taken before the rollout ended: %+v split %v %v", got, split, err)
	}
	if _, split, err := p.Pick(ctx, head, "k"); err != nil || split {
		t.Fatalf("a new reading after the rollout ended: split %v %v", split, err)
	}
	now, _ := e.Head(ctx, varplane.RolloutScope)
	if _, split, _ := p.ReadingOf(now).Pick(ctx, head, "k"); split {
		t.Fatal("ReadingOf the rollouts' new head still splits")
	}
}

// TestRolloutPickerLabels: a label step selects every key of a picker
// whose instance has the label (as Cache.GetFor on that instance), and no
// key of a picker without it (a server that is no instance).
func TestRolloutPickerLabels(t *testing.T) {
	ctx := context.Background()
	e, created := pickerFixture(t)
	head, _ := e.Head(ctx, "app.f")
	stageRollout(t, e, 0, varplane.StagedRollout{ID: "ro1", Scope: "app.f", Revision: created.Revision, Base: 1, State: varplane.RolloutRunning,
		Steps: 2, Share: 0, Selectors: []rollout.Selector{{"zone": "a"}}})
	for _, tc := range []struct {
		labels map[string]string
		split  bool
	}{{map[string]string{"zone": "a"}, true}, {map[string]string{"zone": "b"}, false}, {nil, false}} {
		p := varplane.NewRolloutPicker(e, tc.labels)
		for _, k := range []string{"user-1", "user-2", "user-3"} {
			if _, split, err := p.Pick(ctx, head, k); err != nil || split != tc.split {
				t.Errorf("labels %v, key %s: split %v %v, want %v", tc.labels, k, split, err, tc.split)
			}
		}
	}
}
