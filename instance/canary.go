package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// The canary side of an instance (reviewed changes, docs/control.md): the
// control plane stages the candidate of each open canary window in
// StagedScope; every instance reads it at each heartbeat, decodes the
// candidate of each window with its Decoder, runs Options.CanaryEvaluate
// beside its current head when the scope is one it holds, and writes its
// cumulative report of the window to the store (ReportStore). The control
// plane closes a window only once every instance with a fresh status has
// reported, and one candidate error blocks it.
//
// The formats live here, in the data plane's package, because both sides
// read them: package control imports them.

// StagedScope is the reserved scope (owned by the control subsystem, under
// its record root "varplane-control") whose document lists the open canary
// windows and their candidates. Instances only read it.
const StagedScope varplane.Scope = "varplane-control.canary"

// Staged is the document of StagedScope.
type Staged struct {
	Windows []StagedWindow `json:"windows"`
}

// StagedWindow is one open window: the candidate is revision Revision of
// Scope, proposed on generation Base.
type StagedWindow struct {
	Window   string              `json:"window"`
	Change   string              `json:"change"`
	Scope    varplane.Scope      `json:"scope"`
	Revision varplane.Revision   `json:"revision"`
	Base     varplane.Generation `json:"base"`
	ClosesAt time.Time           `json:"closesAt"`
}

// Report is one instance's cumulative report of one canary window: how
// many times it decoded and evaluated the candidate, how many of those
// evaluations failed, and the first error the candidate caused (empty:
// none). Each write replaces the instance's previous one.
type Report struct {
	Window         string    `json:"window"`
	Instance       string    `json:"instance"`
	Decoded        int64     `json:"decoded"`
	Errors         int64     `json:"errors"`
	CandidateError string    `json:"candidateError,omitempty"`
	At             time.Time `json:"at"`
	// FiledAs is the instance id the store filed the report under (not
	// part of the value): a report whose Instance differs is doubtful.
	FiledAs string `json:"-"`
}

// ReportStore is implemented by a store that keeps the instances' canary
// reports (store/redis): each write replaces the instance's previous
// report of the window, and a report expires 8 days after its last write.
type ReportStore interface {
	WriteCanaryReport(ctx context.Context, window, id string, value []byte) error
}

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
	reports map[string]*Report
}

// Beat writes the status heartbeat and the canary reports now, as the
// heartbeat loop does every HeartbeatInterval. It does nothing without an
// InstanceID or on a store that holds no heartbeats.
func (c *Cache[T]) Beat(ctx context.Context) {
	if c.opts.InstanceID == "" {
		return
	}
	hs, ok := c.store.(StatusStore)
	if !ok {
		return
	}
	c.beat(ctx, hs)
}

// beat writes the status value and then the canary reports; a heartbeat
// is counted once both are done.
func (c *Cache[T]) beat(ctx context.Context, hs StatusStore) {
	b, _ := json.Marshal(c.status())
	err := hs.WriteStatus(ctx, c.opts.InstanceID, b)
	if err != nil {
		c.log.Warn("instance: the status heartbeat could not be written; it is written again at the next one", "err", err)
	}
	c.canaryStep(ctx)
	if err != nil {
		c.stats.heartbeatErrors.Add(1)
	} else {
		c.stats.heartbeats.Add(1)
	}
}

// canaryStep reads the staged windows and writes this instance's report of
// each. A failure is logged and the next heartbeat tries again.
func (c *Cache[T]) canaryStep(ctx context.Context) {
	rs, ok := c.store.(ReportStore)
	if !ok || c.opts.InstanceID == "" {
		return
	}
	st, err := c.store.State(ctx, StagedScope)
	if err != nil {
		c.log.Warn("instance: the staged canary windows could not be read; they are read again at the next heartbeat", "err", err)
		return
	}
	var staged Staged
	if st.Head != nil {
		if err := json.Unmarshal(st.Head.Document, &staged); err != nil {
			c.log.Error("instance: the staged canary windows do not decode", "scope", string(StagedScope), "err", err)
			return
		}
	}
	c.canary.mu.Lock()
	defer c.canary.mu.Unlock()
	if c.canary.reports == nil {
		c.canary.reports = map[string]*Report{}
	}
	open := map[string]bool{}
	for _, w := range staged.Windows {
		open[w.Window] = true
		r := c.canary.reports[w.Window]
		if r == nil {
			r = &Report{Window: w.Window, Instance: c.opts.InstanceID}
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
func (c *Cache[T]) tryCandidate(ctx context.Context, w StagedWindow, r *Report) {
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
