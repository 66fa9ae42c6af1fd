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
	labels map[string]string // the embedding instance's, for a label step
	none   *RolloutReading   // the reading of no rollouts document, shared: it stages nothing, so it reads nothing
	read   atomic.Pointer[RolloutReading]
	mu     sync.Mutex // one reading of RolloutScope built at a time
}

// RolloutReading is one reading of RolloutScope: the rollouts in progress
// and the heads of their revisions, built on first use. A request that
// evaluates several flags picks every one from the same reading, so that
// a rollout's step moving during the request never serves two flags of
// one scope from two revisions.
type RolloutReading struct {
	store      Store
	labels     map[string]string
	generation Generation
	staged     StagedRollouts
	mu         sync.Mutex
	heads      map[string]*Head // by rollout id; at most the rollouts staged
}

// NewRolloutPicker returns a picker over e's store. labels are those of
// the instance the picker answers for (a read replica's
// --instance-label), nil for a server that is no instance: a label step
// that selects them selects every key, as Cache.GetFor does on that
// instance; the picker keeps them as given.
func NewRolloutPicker(e *Engine, labels map[string]string) *RolloutPicker {
	return &RolloutPicker{engine: e, labels: labels, none: &RolloutReading{store: e.store, labels: labels}}
}

// Pick is Reading followed by the reading's Pick: for a single evaluation.
func (p *RolloutPicker) Pick(ctx context.Context, head *Head, targetingKey string) (*Head, bool, error) {
	if head == nil || targetingKey == "" {
		return head, false, nil
	}
	rd, err := p.Reading(ctx)
	if err != nil {
		return nil, false, err
	}
	return rd.Pick(ctx, head, targetingKey)
}

// Reading returns the rollouts in progress as the store holds them now.
func (p *RolloutPicker) Reading(ctx context.Context) (*RolloutReading, error) {
	st, err := p.engine.store.State(ctx, RolloutScope)
	if err != nil {
		return nil, err
	}
	return p.readingAt(st.Generation, st.Head), nil
}

// ReadingOf returns the reading of head, RolloutScope's head as a request
// read it together with the scopes it evaluates (Engine.Heads), so that
// the rollouts and the heads are of one view; nil is no rollouts.
func (p *RolloutPicker) ReadingOf(head *Head) *RolloutReading {
	if head == nil {
		return p.none
	}
	return p.readingAt(head.Generation, head)
}

// PickerOf is ReadingOf's Pick, as httpapi.Rollouts takes it.
func (p *RolloutPicker) PickerOf(head *Head) func(context.Context, *Head, string) (*Head, bool, error) {
	return p.ReadingOf(head).Pick
}

// readingAt returns the reading of RolloutScope at generation gen, whose
// head is head: the one kept when it is of gen, else a new one, kept when
// it is newer than the one kept.
func (p *RolloutPicker) readingAt(gen Generation, head *Head) *RolloutReading {
	if rd := p.read.Load(); rd != nil && rd.generation == gen {
		return rd
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if rd := p.read.Load(); rd != nil && rd.generation == gen {
		return rd
	}
	rd := &RolloutReading{store: p.engine.store, labels: p.labels, generation: gen, heads: map[string]*Head{}}
	if head != nil {
		if err := json.Unmarshal(head.Document, &rd.staged); err != nil {
			rd.staged.Rollouts = nil
		}
	}
	if cur := p.read.Load(); cur == nil || cur.generation < gen {
		p.read.Store(rd)
	}
	return rd
}

// Pick returns what an evaluation of head's scope for targetingKey serves:
// the revision of the scope's running rollout, as generation Base+1, when
// head is still the rollout's base and the rollout's step selects the key
// (split true); head itself otherwise, and always without a key (the head
// is what a reader that names no entity is served). A rollouts document
// that does not decode serves the head, as the embedded instance does.
func (rd *RolloutReading) Pick(ctx context.Context, head *Head, targetingKey string) (*Head, bool, error) {
	if head == nil || targetingKey == "" {
		return head, false, nil
	}
	r, ok := rd.staged.Of(head.Scope)
	if !ok || head.Generation != r.Base || !r.Target().Key(targetingKey, rd.labels) {
		return head, false, nil
	}
	h, err := rd.head(ctx, r)
	if err != nil {
		return nil, false, err
	}
	return h, true, nil
}

// head returns the head of r's revision, reading its record once.
func (rd *RolloutReading) head(ctx context.Context, r StagedRollout) (*Head, error) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if h := rd.heads[r.ID]; h != nil {
		return h, nil
	}
	rec, err := rd.store.Revision(ctx, r.Scope, r.Revision)
	if err != nil {
		return nil, fmt.Errorf("rollout %s of %q: revision %s: %w", r.ID, r.Scope, r.Revision, err)
	}
	h := NewHead(&Event{Kind: EventActivated, Scope: r.Scope, Revision: r.Revision, Generation: r.Base + 1, Timestamp: r.StepStartedAt}, rec)
	rd.heads[r.ID] = h
	return h, nil
}
