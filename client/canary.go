package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// The canary side of the SDK (docs/control.md, "Instances over HTTP"): the
// same part an instance cache plays through the store (package instance),
// played through the control API of the server the client reads. At every
// heartbeat the client files its status (what it holds, so it counts as an
// instance), lists the open windows, decodes the candidate of each window
// on a scope it holds with the consumer's decoder, runs the evaluation
// hook beside the value it holds, and files its cumulative report of every
// open window (varplane.CanaryReport), each replacing the previous one. A window
// closes only once every instance with a fresh status has reported, and
// one candidate error blocks it.

// CanaryOptions make a Client take part in canary windows (Options.Canary).
type CanaryOptions struct {
	// InstanceID is the id the status and reports are filed under: the
	// identity the server knows Options.Token as, or that identity
	// followed by ':' and a name of this process ("billing-reader:pod-7"),
	// so that processes sharing a token count as distinct instances (at
	// most varplane.MaxInstanceNames at a time). The token must be an
	// instance identity, one given varplane.InstanceRole by name; the
	// server refuses any other token or id (403). Required.
	InstanceID string
	// Interval is the time between heartbeats; varplane.HeartbeatInterval
	// (30s) when zero. A heartbeat that failed is tried again sooner, after
	// the client's backoff (MinBackoff, MaxBackoff), never later than
	// Interval. The server counts a status as fresh for a minute.
	Interval time.Duration
	// Decode is the consumer's decoder: it refuses a document the
	// application could not use. When nil, the candidate must be JSON and
	// pass Options.Validate (when set). A refusal is a candidate error.
	Decode func(scope varplane.Scope, doc json.RawMessage) error
	// Evaluate, when set, decides with the candidate beside the value the
	// client holds of the same scope, as the application would, and
	// returns an error when the candidate fails where it matters. It runs
	// only when the candidate decodes and the client holds a value. An
	// error (or a panic) counts in the report's errors, and the first one
	// becomes its candidateError, which blocks the window.
	Evaluate func(ctx context.Context, candidate, current Value) error
	// Labels describe this process to people in the fleet view (region,
	// version, ...); they are filed with every status as given.
	Labels map[string]string
}

// ErrNoCanary is returned by Beat on a client without Options.Canary.
var ErrNoCanary = errors.New("client: Options.Canary is not set")

// canaryState is the client's running reports, one per open window.
type canaryState struct {
	opts CanaryOptions

	mu      sync.Mutex // one heartbeat at a time
	reports map[string]*varplane.CanaryReport
	docs    map[string]json.RawMessage // the candidate of each window, read once

	beats, beatErrors atomic.Uint64
}

// CanaryStats counts the client's heartbeats.
type CanaryStats struct {
	// Beats counts heartbeats whose status and reports were all filed;
	// BeatErrors those where one of them failed.
	Beats, BeatErrors uint64
}

// CanaryStats returns the heartbeat counters; zero without Options.Canary.
func (c *Client) CanaryStats() CanaryStats {
	if c.canary == nil {
		return CanaryStats{}
	}
	return CanaryStats{Beats: c.canary.beats.Load(), BeatErrors: c.canary.beatErrors.Load()}
}

// initCanary checks Options.Canary and prepares the state.
func (c *Client) initCanary() error {
	o := c.opts.Canary
	if o == nil {
		return nil
	}
	id := o.InstanceID
	if id == "" || len(id) > varplane.MaxInstanceID || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '{' || r == '}' || r == '/' }) {
		return fmt.Errorf("client: Canary.InstanceID %q: want 1 to %d printable characters without spaces, braces or slashes", id, varplane.MaxInstanceID)
	}
	oc := *o
	if oc.Interval <= 0 {
		oc.Interval = varplane.HeartbeatInterval
	}
	c.canary = &canaryState{opts: oc, reports: map[string]*varplane.CanaryReport{}, docs: map[string]json.RawMessage{}}
	return nil
}

// canaryLoop beats every Interval until Stop, sooner after a failure.
func (c *Client) canaryLoop() {
	cs := c.canary
	failures := 0
	for {
		wait := cs.opts.Interval
		if err := c.Beat(c.ctx); err != nil {
			if c.ctx.Err() != nil {
				return
			}
			failures++
			wait = min(c.backoff(failures), cs.opts.Interval)
			if failures%c.opts.WarnEvery == 1 {
				c.log.Warn("varplane canary heartbeat failed; it is tried again", "instance", cs.opts.InstanceID, "failures", failures, "retry_in", wait.String(), "err", err)
			}
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Beat files the status and the reports of every open window now, as the
// heartbeat loop does every Interval (tests, or an application that wants
// its report in before the next heartbeat). Each request is bounded by
// RequestTimeout. It returns what failed; what did not was filed.
func (c *Client) Beat(ctx context.Context) error {
	cs := c.canary
	if cs == nil {
		return ErrNoCanary
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	err := c.beat(ctx, cs)
	if err != nil {
		cs.beatErrors.Add(1)
	} else {
		cs.beats.Add(1)
	}
	return err
}

func (c *Client) beat(ctx context.Context, cs *canaryState) error {
	id := cs.opts.InstanceID
	var errs []error
	if err := c.canaryPut(ctx, "/control/instances/"+id+"/status", c.canaryStatus()); err != nil {
		errs = append(errs, fmt.Errorf("client: file the status of %q: %w", id, err))
	}
	var list struct {
		Windows []varplane.StagedWindow `json:"windows"`
	}
	if err := c.canaryGet(ctx, "/control/windows", &list); err != nil {
		return errors.Join(append(errs, fmt.Errorf("client: list the open canary windows: %w", err))...)
	}
	open := map[string]bool{}
	for _, w := range list.Windows {
		r := cs.reports[w.Window]
		if r == nil {
			r = &varplane.CanaryReport{Window: w.Window, Instance: id}
			cs.reports[w.Window] = r
		}
		c.tryCandidate(ctx, cs, w, r)
		r.At = time.Now().UTC()
		err := c.canaryPut(ctx, "/control/windows/"+w.Window+"/reports/"+id, r)
		if varplane.ErrorCode(err) == varplane.CodeNotFound {
			continue // the window closed meanwhile
		}
		open[w.Window] = true
		if err != nil {
			errs = append(errs, fmt.Errorf("client: file the report of window %q: %w", w.Window, err))
		}
	}
	for w := range cs.reports {
		if !open[w] {
			delete(cs.reports, w)
			delete(cs.docs, w)
		}
	}
	return errors.Join(errs...)
}

// canaryStatus is the status the client files: what it holds from the
// server (the runtime tier) of every scope it follows. A followed scope
// without a runtime value makes it not ready.
func (c *Client) canaryStatus() varplane.InstanceStatus {
	st := varplane.InstanceStatus{Instance: c.canary.opts.InstanceID, WrittenAt: time.Now().UTC(), Ready: true, Documents: []varplane.InstanceDocument{}, Labels: c.canary.opts.Labels}
	for sc, s := range *c.slots.Load() {
		if s.override {
			continue
		}
		v := s.cur.Load().val
		if v.Tier != TierRuntime {
			st.Ready = false
			continue
		}
		st.Documents = append(st.Documents, varplane.InstanceDocument{Scope: sc, Generation: v.Generation, Revision: v.Revision})
	}
	slices.SortFunc(st.Documents, func(a, b varplane.InstanceDocument) int { return strings.Compare(string(a.Scope), string(b.Scope)) })
	if len(st.Documents) > varplane.MaxStatusDocuments {
		st.Documents = st.Documents[:varplane.MaxStatusDocuments]
	}
	return st
}

// tryCandidate decodes the candidate of w and evaluates it beside the held
// value, when the client follows w's scope; a client that does not (or
// may not read it: the server then lists the window without its scope)
// reports without counting. A candidate that cannot be read counts
// nothing this time.
func (c *Client) tryCandidate(ctx context.Context, cs *canaryState, w varplane.StagedWindow, r *varplane.CanaryReport) {
	if w.Scope == "" {
		return
	}
	s := c.slot(w.Scope)
	if s == nil || s.override {
		return
	}
	doc, ok := cs.docs[w.Window]
	if !ok {
		var cand varplane.CanaryCandidate
		if err := c.canaryGet(ctx, "/control/windows/"+w.Window+"/candidate", &cand); err != nil {
			c.log.Warn("varplane canary candidate could not be read; it is read again at the next heartbeat", "window", w.Window, "scope", string(w.Scope), "err", err)
			return
		}
		doc = cand.Document
		cs.docs[w.Window] = doc
	}
	r.Decoded++
	fail := func(what string, err error) {
		r.Errors++
		if r.CandidateError == "" {
			r.CandidateError = fmt.Sprintf("the candidate %s of scope %q %s: %v", w.Revision, w.Scope, what, err)
		}
	}
	if err := c.decodeCandidate(w.Scope, doc); err != nil {
		fail("does not decode", err)
		return
	}
	cur := s.cur.Load().val
	if cs.opts.Evaluate == nil || cur.Tier == TierNone {
		return
	}
	cand := Value{Scope: w.Scope, Raw: doc, Tier: TierRuntime, Generation: w.Base + 1, Revision: w.Revision}
	if err := evaluate(ctx, cs.opts.Evaluate, cand, cur); err != nil {
		fail("fails evaluation", err)
	}
}

// decodeCandidate runs the consumer's decoder on doc.
func (c *Client) decodeCandidate(scope varplane.Scope, doc json.RawMessage) error {
	if d := c.canary.opts.Decode; d != nil {
		return d(scope, doc)
	}
	if !json.Valid(doc) {
		return errors.New("not JSON")
	}
	if c.opts.Validate != nil {
		return c.opts.Validate(scope, doc)
	}
	return nil
}

// evaluate runs the hook, a panic counting as its error.
func evaluate(ctx context.Context, fn func(context.Context, Value, Value) error, cand, cur Value) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the evaluation hook panicked: %v", p)
		}
	}()
	return fn(ctx, cand, cur)
}

// canaryPut sends body to path under the base, bounded by RequestTimeout.
func (c *Client) canaryPut(ctx context.Context, path string, body any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodPut, path, nil, body)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// canaryGet reads the JSON answer of path into dst, bounded by
// RequestTimeout and by MaxEventBytes.
func (c *Client) canaryGet(ctx context.Context, path string, dst any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, int64(c.opts.MaxEventBytes))).Decode(dst); err != nil {
		return fmt.Errorf("decode the answer of %s: %w", path, err)
	}
	return nil
}
