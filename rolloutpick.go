package varplane

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
)

// RolloutPicker chooses the revision an evaluation for a targeting key
// (an OpenFeature flag evaluated for one user or tenant) is served while
// a progressive rollout of its scope runs: the rollout's revision when the
// rollout's current step selects the key (rollout.Target.Key, the rule
// the embedded instance's GetFor applies to an entity key), the head
// otherwise. So one key gets one version from every instance and from the
// server's OFREP endpoint. It reads the rollouts in progress from
// RolloutScope and a rollout's revision from the store, each once per
// version of what it read.
type RolloutPicker struct {
	engine *Engine
	read   atomic.Pointer[pickerRead]
	mu     sync.Mutex // one reading of RolloutScope at a time
}

// pickerRead is one reading of RolloutScope: the rollouts in progress and
// the heads of their revisions, built on first use.
type pickerRead struct {
	generation Generation
	staged     StagedRollouts
	mu         sync.Mutex
	heads      map[string]*Head // by rollout id; at most the rollouts staged
}

// NewRolloutPicker returns a picker over e's store.
func NewRolloutPicker(e *Engine) *RolloutPicker { return &RolloutPicker{engine: e} }

// Pick returns what an evaluation of head's scope for targetingKey serves:
// the revision of the scope's running rollout, as generation Base+1, when
// head is still the rollout's base and the rollout's step selects the key
// (split true); head itself otherwise, and always without a key (the head
// is what a reader that names no entity is served). A rollouts document
// that does not decode serves the head, as the embedded instance does.
func (p *RolloutPicker) Pick(ctx context.Context, head *Head, targetingKey string) (*Head, bool, error) {
	if head == nil || targetingKey == "" {
		return head, false, nil
	}
	rd, err := p.current(ctx)
	if err != nil {
		return nil, false, err
	}
	r, ok := rd.staged.Of(head.Scope)
	if !ok || head.Generation != r.Base || !r.Target().Key(targetingKey, nil) {
		return head, false, nil
	}
	h, err := rd.head(ctx, p.engine.store, r)
	if err != nil {
		return nil, false, err
	}
	return h, true, nil
}

// current returns the reading of RolloutScope as the store holds it now.
func (p *RolloutPicker) current(ctx context.Context) (*pickerRead, error) {
	st, err := p.engine.store.State(ctx, RolloutScope)
	if err != nil {
		return nil, err
	}
	if rd := p.read.Load(); rd != nil && rd.generation == st.Generation {
		return rd, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if rd := p.read.Load(); rd != nil && rd.generation >= st.Generation {
		return rd, nil
	}
	rd := &pickerRead{generation: st.Generation, heads: map[string]*Head{}}
	if st.Head != nil {
		if err := json.Unmarshal(st.Head.Document, &rd.staged); err != nil {
			rd.staged.Rollouts = nil
		}
	}
	p.read.Store(rd)
	return rd, nil
}

// head returns the head of r's revision, reading its record once.
func (rd *pickerRead) head(ctx context.Context, s Store, r StagedRollout) (*Head, error) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if h := rd.heads[r.ID]; h != nil {
		return h, nil
	}
	rec, err := s.Revision(ctx, r.Scope, r.Revision)
	if err != nil {
		return nil, fmt.Errorf("rollout %s of %q: revision %s: %w", r.ID, r.Scope, r.Revision, err)
	}
	h := NewHead(&Event{Kind: EventActivated, Scope: r.Scope, Revision: r.Revision, Generation: r.Base + 1, Timestamp: r.StepStartedAt}, rec)
	rd.heads[r.ID] = h
	return h, nil
}
