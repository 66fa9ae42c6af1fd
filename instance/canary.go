package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/varplane/varplane"
)

// The canary side of an instance (reviewed changes, docs/control.md): the
// control plane stages the candidate of each open canary window in
// StagedScope; every instance reads it at each heartbeat, decodes the
// candidate of each window with its Decoder, runs Options.CanaryEvaluate
// beside its current head when the scope is one it holds, and writes its
// cumulative report of the window to the store (varplane.ReportWriter). The control
// plane closes a window only once every instance with a fresh status has
// reported, and one candidate error blocks it.
//
// The formats (varplane.StagedWindows, varplane.CanaryReport) and the
// store's side (varplane.StatusWriter, varplane.ReportWriter) are the
// root package's: the control plane and the Go SDK read and write them too.

// CanaryEvaluator is the optional evaluation hook of Options.CanaryEvaluate:
// it decides with candidate beside current (the installed document of the
// same scope) as the service would, and returns an error when the
// candidate fails where it matters. The error is counted in the report's
// Errors and the first one becomes its CandidateError, which blocks the
// window.
type CanaryEvaluator[T any] func(ctx context.Context, candidate, current *Doc[T]) error

// canaryState is an instance's running reports, one per staged window.
type canaryState struct {
	mu      sync.Mutex
	reports map[string]*varplane.CanaryReport
}

// Beat writes the status heartbeat and the canary reports now, as the
// heartbeat loop does every varplane.HeartbeatInterval. It does nothing without an
// InstanceID or on a store that holds no heartbeats.
func (c *Cache[T]) Beat(ctx context.Context) {
	if c.opts.InstanceID == "" {
		return
	}
	hs, ok := c.store.(varplane.StatusWriter)
	if !ok {
		return
	}
	c.beat(ctx, hs)
}

// beat writes the status value and then the canary reports; a heartbeat
// is counted once both are done.
func (c *Cache[T]) beat(ctx context.Context, hs varplane.StatusWriter) {
	b, _ := json.Marshal(c.status())
	err := hs.WriteStatus(ctx, c.opts.InstanceID, b)
	if err != nil {
		c.log.Warn("instance: the status heartbeat could not be written; it is written again at the next one", "err", err)
	}
	c.canaryStep(ctx)
	c.syncRollouts(ctx)
	c.reportRollouts(ctx)
	if err != nil {
		c.stats.heartbeatErrors.Add(1)
	} else {
		c.stats.heartbeats.Add(1)
	}
}

// canaryStep reads the staged windows and writes this instance's report of
// each. A failure is logged and the next heartbeat tries again.
func (c *Cache[T]) canaryStep(ctx context.Context) {
	rs, ok := c.store.(varplane.ReportWriter)
	if !ok || c.opts.InstanceID == "" {
		return
	}
	st, err := c.store.State(ctx, varplane.StagedScope)
	if err != nil {
		c.log.Warn("instance: the staged canary windows could not be read; they are read again at the next heartbeat", "err", err)
		return
	}
	var staged varplane.StagedWindows
	if st.Head != nil {
		if err := json.Unmarshal(st.Head.Document, &staged); err != nil {
			c.log.Error("instance: the staged canary windows do not decode", "scope", string(varplane.StagedScope), "err", err)
			return
		}
	}
	c.canary.mu.Lock()
	defer c.canary.mu.Unlock()
	if c.canary.reports == nil {
		c.canary.reports = map[string]*varplane.CanaryReport{}
	}
	open := map[string]bool{}
	for _, w := range staged.Windows {
		open[w.Window] = true
		r := c.canary.reports[w.Window]
		if r == nil {
			r = &varplane.CanaryReport{Window: w.Window, Instance: c.opts.InstanceID}
			c.canary.reports[w.Window] = r
		}
		c.tryCandidate(ctx, w, r)
		r.At = c.clock.Now().UTC()
		b, _ := json.Marshal(r)
		if err := rs.WriteCanaryReport(ctx, w.Window, c.opts.InstanceID, b); err != nil {
			c.log.Warn("instance: the canary report could not be written; it is written again at the next heartbeat", "window", w.Window, "err", err)
		}
	}
	for id := range c.canary.reports {
		if !open[id] {
			delete(c.canary.reports, id) // the window closed
		}
	}
}

// tryCandidate decodes the candidate of w and evaluates it beside the
// installed head, when this instance holds w's scope; an instance that
// does not hold it reports without counting (the candidate cannot affect
// it). A store that cannot answer the candidate counts nothing this time.
func (c *Cache[T]) tryCandidate(ctx context.Context, w varplane.StagedWindow, r *varplane.CanaryReport) {
	e, ok := c.entries.Load(w.Scope)
	if !ok {
		return
	}
	cur := e.doc.Load()
	rec, err := c.store.Revision(ctx, w.Scope, w.Revision)
	if err != nil {
		c.log.Warn("instance: the candidate of a canary window could not be read", "window", w.Window, "scope", string(w.Scope), "err", err)
		return
	}
	v, err := c.opts.Decode(ctx, rec)
	r.Decoded++
	if err != nil {
		r.Errors++
		if r.CandidateError == "" {
			r.CandidateError = fmt.Sprintf("the candidate %s of scope %q does not decode: %v", w.Revision, w.Scope, err)
		}
		return
	}
	if c.opts.CanaryEvaluate == nil || cur.err != nil || cur.Head == nil {
		return
	}
	ev := &varplane.Event{Kind: varplane.EventActivated, Scope: w.Scope, Generation: w.Base + 1, Revision: rec.Revision, Actor: rec.Actor}
	cand := &Doc[T]{Scope: w.Scope, Generation: w.Base + 1, Head: varplane.NewHead(ev, rec), Value: v}
	if err := c.opts.CanaryEvaluate(ctx, cand, cur); err != nil {
		r.Errors++
		if r.CandidateError == "" {
			r.CandidateError = fmt.Sprintf("the candidate %s of scope %q fails evaluation: %v", w.Revision, w.Scope, err)
		}
	}
}
