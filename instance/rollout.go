package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	"github.com/varplane/varplane"
)

// The rollout side of an instance (docs/rollouts.md): the control plane
// lists the rollouts in progress in varplane.RolloutScope; the instance
// follows that scope like a document it holds (its commits reach the
// invalidation loop, and each revalidation pass and heartbeat reads it
// again), and for each rollout on a scope it holds whose step selects it
// (rollout.Target.Instance, by InstanceID and Labels) it serves the
// rollout's revision in place of the installed head, as generation Base+1,
// while the installed head is still Base. A rollout that ends, or leaves
// the list, or whose revision does not decode, is served no more at once:
// reads go back to the installed head, and the decode failure is reported
// (a rejection, which stops the rollout).

// rolloutSet is the rollouts an instance knows, by scope: immutable once
// stored, so reads find theirs without a lock.
type rolloutSet[T any] struct {
	version varplane.Generation // the generation of RolloutScope it was read at
	byScope map[varplane.Scope]*served[T]
}

// served is one rollout on a scope the instance holds, with its decoded
// revision (nil when it did not decode: err says why).
type served[T any] struct {
	r        varplane.StagedRollout
	doc      *Doc[T]
	err      error
	selected bool // this instance is selected by the step
}

// rolloutState is the instance's reports of rollouts and the lock of
// reading them.
type rolloutState struct {
	mu      sync.Mutex // one reading of RolloutScope at a time
	reports map[string]*varplane.CanaryReport
}

// serving returns what a read of scope answers, where d is the installed
// head: the revision of a rollout that selects this instance (for its
// InstanceID), or d.
func (c *Cache[T]) serving(d *Doc[T]) *Doc[T] {
	rs := c.rollouts.Load()
	if rs == nil || len(rs.byScope) == 0 {
		return d
	}
	s := rs.byScope[d.Scope]
	if s == nil || !s.selected || s.doc == nil || d.Generation != s.r.Base {
		return d
	}
	return s.doc
}

// GetFor is Get for one entity (a user, a tenant): while a rollout of
// scope runs, the entity key decides, with rollout.Target.Key, whether
// this read answers the rollout's revision, so one key gets one version
// on every instance, whatever the instance itself serves to Get.
func (c *Cache[T]) GetFor(ctx context.Context, scope varplane.Scope, key string) (*Doc[T], error) {
	d, err := c.getHead(ctx, scope, true)
	if err != nil {
		return nil, err
	}
	rs := c.rollouts.Load()
	if rs == nil {
		return d, nil
	}
	s := rs.byScope[scope]
	if s == nil || s.doc == nil || d.Generation != s.r.Base || !s.r.Target().Key(key, c.opts.Labels) {
		return d, nil
	}
	return s.doc, nil
}

// Labels returns a copy of this instance's labels (Options.Labels), which
// a rollout's label steps select it by.
func (c *Cache[T]) Labels() map[string]string { return maps.Clone(c.opts.Labels) }

// Rollout is a running rollout of a scope as this instance sees it.
type Rollout struct {
	ID       string
	Scope    varplane.Scope
	Revision varplane.Revision
	Step     int
	Steps    int
	Share    int
	// Selected is whether this instance serves the revision; Err is why
	// it cannot (the revision does not decode), nil otherwise.
	Selected bool
	Err      error
}

// Rollouts returns the rollouts on the scopes this instance holds.
func (c *Cache[T]) Rollouts() []Rollout {
	rs := c.rollouts.Load()
	if rs == nil {
		return nil
	}
	out := make([]Rollout, 0, len(rs.byScope))
	for _, s := range rs.byScope {
		out = append(out, Rollout{ID: s.r.ID, Scope: s.r.Scope, Revision: s.r.Revision, Step: s.r.Step, Steps: s.r.Steps,
			Share: s.r.Share, Selected: s.selected && s.doc != nil, Err: s.err})
	}
	return out
}

// syncRollouts reads the rollouts again. When that changed what the
// instance serves it writes its status at once, and when it found a
// rollout's revision that does not decode it reports it at once, rather
// than at the next heartbeat: the rollout's lag and rejection gates read
// them.
func (c *Cache[T]) syncRollouts(ctx context.Context) {
	changed, rejected := c.readRollouts(ctx)
	if rejected {
		c.reportRollouts(ctx)
	}
	if changed && c.opts.InstanceID != "" {
		if hs, ok := c.store.(varplane.StatusWriter); ok {
			b, _ := json.Marshal(c.status())
			if err := hs.WriteStatus(ctx, c.opts.InstanceID, b); err != nil {
				c.log.Warn("instance: the status could not be written after a rollout's step; it is written again at the next heartbeat", "err", err)
			}
		}
	}
}

// readRollouts reads RolloutScope and installs what it says: a rollout
// on a scope this instance holds is decoded (once per revision) and
// served when its step selects the instance. A failure to read keeps
// what is installed; one that does not decode serves no rollout (the
// control plane wrote it, so that is a fault to log, and safe).
// It reports whether what the instance serves changed, and whether a
// revision newly failed to decode.
func (c *Cache[T]) readRollouts(ctx context.Context) (changed, rejected bool) {
	c.rollout.mu.Lock()
	defer c.rollout.mu.Unlock()
	st, err := c.store.State(ctx, varplane.RolloutScope)
	if err != nil {
		c.log.Warn("instance: the rollouts could not be read; they are read again at the next pass", "err", err)
		return false, false
	}
	var staged varplane.StagedRollouts
	if st.Head != nil {
		if err := json.Unmarshal(st.Head.Document, &staged); err != nil {
			c.log.Error("instance: the rollouts do not decode; serving the installed heads", "scope", string(varplane.RolloutScope), "err", err)
			staged.Rollouts = nil
		}
	}
	old := c.rollouts.Load()
	if old != nil && old.version > st.Generation {
		return false, false // a later reading is installed
	}
	next := &rolloutSet[T]{version: st.Generation, byScope: map[varplane.Scope]*served[T]{}}
	for _, r := range staged.Rollouts {
		if !r.Serves() {
			continue
		}
		if _, ok := c.entries.Load(r.Scope); !ok {
			continue // not a scope this instance holds
		}
		s := &served[T]{r: r, selected: c.opts.InstanceID != "" && r.Target().Instance(c.opts.InstanceID, c.opts.Labels)}
		if prev := old.find(r.Scope); prev != nil && prev.r.ID == r.ID && prev.r.Revision == r.Revision && (prev.doc != nil || prev.err != nil) {
			s.doc, s.err = prev.doc, prev.err
		} else {
			s.doc, s.err = c.decodeRollout(ctx, r)
			rejected = rejected || s.err != nil
		}
		next.byScope[r.Scope] = s
	}
	c.rollouts.Store(next)
	return !sameServing(old, next), rejected
}

// sameServing reports whether a and b serve the same revisions.
func sameServing[T any](a, b *rolloutSet[T]) bool {
	count := func(rs *rolloutSet[T]) int {
		n := 0
		if rs != nil {
			for _, s := range rs.byScope {
				if s.selected && s.doc != nil {
					n++
				}
			}
		}
		return n
	}
	if count(a) != count(b) {
		return false
	}
	if b == nil {
		return true
	}
	for sc, s := range b.byScope {
		if !s.selected || s.doc == nil {
			continue
		}
		p := a.find(sc)
		if p == nil || !p.selected || p.doc == nil || p.r.ID != s.r.ID || p.r.Revision != s.r.Revision {
			return false
		}
	}
	return true
}

func (rs *rolloutSet[T]) find(scope varplane.Scope) *served[T] {
	if rs == nil {
		return nil
	}
	return rs.byScope[scope]
}

// decodeRollout reads and decodes the revision of r.
func (c *Cache[T]) decodeRollout(ctx context.Context, r varplane.StagedRollout) (*Doc[T], error) {
	rec, err := c.store.Revision(ctx, r.Scope, r.Revision)
	if err != nil {
		// Not a rejection: nothing is served, and the next reading tries
		// again.
		c.log.Warn("instance: the revision of a rollout could not be read; it is read again at the next pass", "rollout", r.ID, "err", err)
		return nil, nil
	}
	v, err := c.opts.Decode(ctx, rec)
	if err != nil {
		c.stats.decodeErrors.Add(1)
		c.log.Error("instance: the revision of a rollout cannot be decoded; serving the installed head and reporting it",
			"rollout", r.ID, "scope", string(r.Scope), "revision", string(r.Revision), "err", err)
		return nil, fmt.Errorf("the revision %s of scope %q (rollout %s) does not decode: %w", r.Revision, r.Scope, r.ID, err)
	}
	ev := &varplane.Event{Kind: varplane.EventActivated, Scope: r.Scope, Generation: r.Base + 1, Revision: rec.Revision, Actor: rec.Actor}
	return &Doc[T]{Scope: r.Scope, Generation: r.Base + 1, Head: varplane.NewHead(ev, rec), Value: v}, nil
}

// reportRollouts writes this instance's report of each rollout it knows
// (window: the rollout's id), as canary reports are written: how many
// times it decoded the revision and the decode failure, which the
// rollout's rejection gate reads.
func (c *Cache[T]) reportRollouts(ctx context.Context) {
	rw, ok := c.store.(varplane.ReportWriter)
	if !ok || c.opts.InstanceID == "" {
		return
	}
	rs := c.rollouts.Load()
	c.rollout.mu.Lock()
	defer c.rollout.mu.Unlock()
	if c.rollout.reports == nil {
		c.rollout.reports = map[string]*varplane.CanaryReport{}
	}
	open := map[string]bool{}
	if rs != nil {
		for _, s := range rs.byScope {
			open[s.r.ID] = true
			rep := c.rollout.reports[s.r.ID]
			if rep == nil {
				rep = &varplane.CanaryReport{Window: s.r.ID, Instance: c.opts.InstanceID, Decoded: 1}
				if s.err != nil {
					rep.Errors, rep.CandidateError = 1, s.err.Error()
				}
				c.rollout.reports[s.r.ID] = rep
			}
			rep.At = c.clock.Now().UTC()
			b, _ := json.Marshal(rep)
			if err := rw.WriteCanaryReport(ctx, s.r.ID, c.opts.InstanceID, b); err != nil {
				c.log.Warn("instance: the rollout report could not be written; it is written again at the next heartbeat", "rollout", s.r.ID, "err", err)
			}
		}
	}
	for id := range c.rollout.reports {
		if !open[id] {
			delete(c.rollout.reports, id)
		}
	}
}
