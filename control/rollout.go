package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/rollout"
)

// Rollouts (docs/rollouts.md): a change's publish made in steps. The
// rollouts in progress live in one record, varplane.RolloutScope, which
// every instance follows: each transition (a start, a step, a gate's
// verdict, a pause, a resume, an abort, a rollback, the end) is a
// compare-and-set publish of that record by the identity that made it, so
// it is audited in the store's log like every change, and any replica of
// the control plane can drive a rollout from what the record holds (a
// control plane killed in the middle of a step resumes from the step's
// stored start). A rollout that ended is archived in its own record,
// varplane-control.rollout.<id>, before it leaves the list: nothing is
// overwritten, and a rollback is an event of its own with the gates'
// evidence. The change itself moves to rolling-out when its rollout
// starts, and only the rollout moves it on: published when the last step
// completes (the head moves to Base+1 then, not before), failed when a
// gate rolls it back, back to where it was when a person aborts it.

// StateRollout is the state of a change whose rollout is in progress.
const StateRollout State = "rolling-out"

// RolloutActor is the identity recorded for what the rollout pass does
// (steps, gate verdicts, rollbacks, completion).
const RolloutActor = "varplane:rollout"

// RolloutLease is the lease the rollout pass runs under, so one replica at
// a time drives the rollouts.
const RolloutLease = "control:rollouts"

// Bounds of rollouts.
const (
	// MaxRollouts bounds the rollouts in progress at once (one per scope).
	MaxRollouts = 64
	// MaxRolloutEvents bounds the events one rollout records.
	MaxRolloutEvents = 256
	// MaxGateChecks bounds the external checks one rollout names.
	MaxGateChecks = 8
	// MaxEvidence bounds the lines of evidence one gate keeps.
	MaxEvidence = 10
	// eventsReserved is the room MaxRolloutEvents keeps for the events
	// that move or end a rollout.
	eventsReserved = rollout.MaxSteps + 8
	// DefaultMaxLag is how long after a step starts its selected
	// instances may take to serve the revision when Gates.MaxLag is zero.
	DefaultMaxLag = 2 * time.Minute
)

// rolloutArchivePrefix is what the record of an ended rollout's scope
// starts with.
const rolloutArchivePrefix = string(RecordRoot) + ".rollout."

func rolloutArchive(id string) varplane.Scope { return varplane.Scope(rolloutArchivePrefix + id) }

// Gates are what a rollout checks during each step's bake; a failed gate
// rolls it back.
type Gates struct {
	// MaxRejections is how many instances may reject the revision (it
	// does not decode there, from their reports) before the gate fails:
	// zero fails at the first.
	MaxRejections int `json:"maxRejections"`
	// MaxLag is how long after a step starts every selected instance has
	// to serve the revision (DefaultMaxLag when zero).
	MaxLag rollout.Duration `json:"maxLag,omitempty"`
	// Checks name external checks (serve --check NAME=URL) asked during
	// each bake: each must pass.
	Checks []string `json:"checks,omitempty"`
}

func (g Gates) maxLag() time.Duration {
	if g.MaxLag <= 0 {
		return DefaultMaxLag
	}
	return time.Duration(g.MaxLag)
}

// The verdicts of a gate.
const (
	GatePass    = "pass"
	GatePending = "pending"
	GateFail    = "fail"
)

// GateState is one gate's verdict at the last pass, with its evidence.
type GateState struct {
	Gate     string    `json:"gate"`
	State    string    `json:"state"`
	Evidence []string  `json:"evidence,omitempty"`
	At       time.Time `json:"at"`
}

// RolloutEvent is one transition of a rollout.
type RolloutEvent struct {
	At   time.Time `json:"at"`
	By   string    `json:"by"`
	Kind string    `json:"kind"`
	Step int       `json:"step"`
	Note string    `json:"note,omitempty"`
	// Evidence is the gates' verdicts that made a rollback.
	Evidence []GateState `json:"evidence,omitempty"`
}

// Rollout is one rollout, as stored and as the API answers it. Its
// embedded varplane.StagedRollout is what instances read.
type Rollout struct {
	varplane.StagedRollout
	Strategy  rollout.Strategy `json:"strategy"`
	Gates     Gates            `json:"gates"`
	Author    string           `json:"author"`
	StartedAt time.Time        `json:"startedAt"`
	EndedAt   *time.Time       `json:"endedAt,omitempty"`
	// From is the state of the change before the rollout started: an
	// abort returns it there.
	From       State          `json:"from"`
	GateStates []GateState    `json:"gateStates"`
	Events     []RolloutEvent `json:"events"`
	// Generation is the scope's generation once the rollout completed.
	Generation varplane.Generation `json:"generation,omitempty"`
	// Completing is set, before the head moves, once the last step baked
	// with every gate passing: from then on only the completion moves the
	// rollout (no gate, pause or abort), so a head that moved is never
	// recorded as aborted or rolled back.
	Completing bool `json:"completing,omitempty"`
}

// rolloutsDoc is the document of varplane.RolloutScope.
type rolloutsDoc struct {
	Rollouts []Rollout `json:"rollouts"`
}

func newRolloutID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("rollout id: %w", err)
	}
	return "ro-" + hex.EncodeToString(b[:]), nil
}

func validRolloutID(id string) bool {
	if len(id) != 19 || !strings.HasPrefix(id, "ro-") {
		return false
	}
	_, err := hex.DecodeString(id[3:])
	return err == nil && strings.ToLower(id) == id
}

// step sets r at step i (0-based), started at now.
func (r *Rollout) step(i int, now time.Time) {
	t := r.Strategy.Target(r.ID, i)
	r.Step, r.Steps, r.StepStartedAt, r.Share, r.Selectors = i, len(r.Strategy.Steps), now, t.Share, t.Selectors
	r.GateStates = nil
}

// event records an event on r. A pause or a resume past
// MaxRolloutEvents-eventsReserved events is refused (limit-exceeded); the
// events that end or move a rollout (start, a step, a rollback, an abort,
// the completion) are always recorded: there are at most MaxSteps+4 of
// them, within the room kept.
func (r *Rollout) event(at time.Time, by, kind, note string, evidence []GateState) error {
	if (kind == "pause" || kind == "resume") && len(r.Events) >= MaxRolloutEvents-eventsReserved {
		return varplane.Errorf(varplane.CodeLimitExceeded, "rollout %s has recorded %d events, the most pauses and resumes leave room for; it can still be aborted", r.ID, len(r.Events))
	}
	r.Events = append(r.Events, RolloutEvent{At: at, By: by, Kind: kind, Step: r.Step + 1, Note: note, Evidence: evidence})
	return nil
}

// StartRolloutRequest starts a rollout of a change.
type StartRolloutRequest struct {
	Strategy rollout.Strategy
	Gates    Gates
	Note     string
}

// StartRollout publishes change id in steps: the change must be publishable
// now (the approvals and canary its policy in force asks for, as Publish
// asks), its scope must have no rollout in progress, and the strategy and
// gates must be valid (each check named must be one this control plane
// runs). The change moves to rolling-out and the first step starts at
// once. The scope's head does not move until the last step completes.
func (svc *Service) StartRollout(ctx context.Context, by varplane.Identity, id string, req StartRolloutRequest) (*Rollout, error) {
	if err := req.Strategy.Validate(); err != nil {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "strategy: %v", err)
	}
	if err := svc.validGates(req.Gates); err != nil {
		return nil, err
	}
	rid, err := newRolloutID()
	if err != nil {
		return nil, err
	}
	var ro Rollout
	c, err := svc.transition(ctx, id, "rollout", func(c *Change, pol Policy, has bool) error {
		if c.Revision == "" {
			return varplane.Errorf(varplane.CodeChangeState, "change %s has no stored candidate to roll out", c.ID)
		}
		if err := publishable(c, pol, has); err != nil {
			return err
		}
		if c.State == StatePublishing {
			return stateError(c, "start a rollout")
		}
		st, err := svc.store.State(ctx, c.Scope)
		if err != nil {
			return err
		}
		if st.Generation != c.Base {
			cur := st.Generation
			return &varplane.Error{Code: varplane.CodeRevisionConflict, Scope: c.Scope, Expected: &c.Base, Current: &cur,
				Message: fmt.Sprintf("scope %q is at generation %d, not the change's base %d: rebase it", c.Scope, cur, c.Base)}
		}
		now := svc.now()
		ro = Rollout{StagedRollout: varplane.StagedRollout{ID: rid, Change: c.ID, Scope: c.Scope, Revision: c.Revision, Base: c.Base, State: varplane.RolloutRunning},
			Strategy: req.Strategy, Gates: req.Gates, Author: by.ID, StartedAt: now, From: c.State, Events: []RolloutEvent{}}
		ro.step(0, now)
		_ = ro.event(now, by.ID, "start", req.Note, nil)
		c.Rollout = rid
		c.move(StateRollout, by.ID, now, fmt.Sprintf("rollout %s: %s, %d steps", rid, req.Strategy.Kind, len(req.Strategy.Steps)))
		return nil
	})
	if err != nil {
		return nil, err
	}
	var refused error
	err = svc.updateRollouts(ctx, by.ID, fmt.Sprintf("rollout %s: start on %s (change %s)", rid, c.Scope, c.ID), func(d *rolloutsDoc) bool {
		for _, x := range d.Rollouts {
			if x.Scope == c.Scope {
				refused = varplane.Errorf(varplane.CodeChangeState, "scope %q already has rollout %s in progress (change %s): wait for it to end, or abort it", c.Scope, x.ID, x.Change)
				return false
			}
		}
		if len(d.Rollouts) >= MaxRollouts {
			refused = varplane.Errorf(varplane.CodeLimitExceeded, "%d rollouts are in progress, the most at once", MaxRollouts)
			return false
		}
		d.Rollouts = append(d.Rollouts, ro)
		return true
	})
	if refused == nil && err == nil {
		return &ro, nil
	}
	if refused == nil {
		refused = err
	}
	// Give the change back: the rollout never started.
	if _, rerr := svc.rolloutMoveChange(ctx, c.ID, rid, ro.From, by.ID, "rollout not started: "+varplane.ErrorMessage(refused), nil); rerr != nil {
		svc.opts.Logger.Error("control: a change claimed by a rollout that could not start stays rolling-out until the expiry pass gives it back", "change", c.ID, "rollout", rid, "err", rerr)
		// The claim landed and could not be undone: a 503 would say that
		// nothing changed.
		return nil, varplane.AfterCommit(refused, fmt.Sprintf("change %s was claimed by rollout %s and the store then failed before the rollout was recorded: the rollout did not start; the control plane gives the change back within %v, then start it again", c.ID, rid, orphanGrace+time.Minute))
	}
	return nil, refused
}

func (svc *Service) validGates(g Gates) error {
	if g.MaxRejections < 0 || g.MaxLag < 0 || time.Duration(g.MaxLag) > rollout.MaxBake {
		return varplane.Errorf(varplane.CodeBadRequest, "gates: maxRejections >= 0 and maxLag of 0 to %v", rollout.MaxBake)
	}
	if len(g.Checks) > MaxGateChecks {
		return varplane.Errorf(varplane.CodeBadRequest, "gates: at most %d checks", MaxGateChecks)
	}
	for i, name := range g.Checks {
		if _, ok := svc.opts.Gates[name]; !ok {
			return varplane.Errorf(varplane.CodeBadRequest, "gates: no check %q runs on this control plane (serve --gate NAME=URL)", name)
		}
		if slices.Contains(g.Checks[:i], name) {
			return varplane.Errorf(varplane.CodeBadRequest, "gates: check %q is named twice", name)
		}
	}
	return nil
}

// orphanGrace is how long a change may stay claimed by a rollout that is
// neither in progress nor archived before the claim is given back: a start
// records the rollout just after it claims the change.
const orphanGrace = time.Minute

// releaseOrphanedClaim gives c back to the state it had before a rollout
// claimed it, when that rollout was never recorded: a start whose store
// failed between the claim and the rollouts record (it answered
// outcome-unknown). A claim younger than orphanGrace, or of a rollout in
// progress or archived, is left alone.
func (svc *Service) releaseOrphanedClaim(ctx context.Context, c *Change, staged rolloutsDoc) error {
	if c.Rollout == "" || len(c.Transitions) == 0 {
		return nil
	}
	last := c.Transitions[len(c.Transitions)-1]
	if last.To != StateRollout || svc.now().Sub(last.At) < orphanGrace {
		return nil
	}
	if slices.ContainsFunc(staged.Rollouts, func(r Rollout) bool { return r.ID == c.Rollout }) {
		return nil
	}
	if st, err := svc.store.State(ctx, rolloutArchive(c.Rollout)); err != nil || st.Head != nil {
		return err
	}
	_, err := svc.rolloutMoveChange(ctx, c.ID, c.Rollout, last.From, "varplane:control",
		"rollout "+c.Rollout+" was never recorded (its start was cut short): the change is given back", nil)
	return err
}

// rolloutMoveChange moves change id, claimed by rollout rid, to state to
// (published with pub when set), as by with note. A change no longer
// claimed by rid is left alone.
func (svc *Service) rolloutMoveChange(ctx context.Context, id, rid string, to State, by, note string, pub *Publication) (*Change, error) {
	for attempt := 0; ; attempt++ {
		c, err := svc.load(ctx, id)
		if err != nil {
			return nil, err
		}
		if c.State != StateRollout || c.Rollout != rid {
			return c, nil
		}
		version := c.Version
		if pub != nil {
			c.Published = pub
		}
		c.move(to, by, svc.now(), note)
		err = svc.save(ctx, c, version, "rollout")
		if err == nil || !errors.Is(err, varplane.ErrConflict) || attempt >= 4 {
			return c, err
		}
	}
}

// readRollouts returns the rollouts in progress and the record's version.
func (svc *Service) readRollouts(ctx context.Context) (rolloutsDoc, varplane.Generation, error) {
	var d rolloutsDoc
	v, _, err := readRecord(ctx, svc.store, varplane.RolloutScope, &d)
	return d, v, err
}

// updateRollouts applies fn to the rollouts record and writes it, as by
// with reason, when fn changed it; a lost compare-and-set reads again.
func (svc *Service) updateRollouts(ctx context.Context, by, reason string, fn func(*rolloutsDoc) bool) error {
	for attempt := 0; ; attempt++ {
		d, version, err := svc.readRollouts(ctx)
		if err != nil {
			return err
		}
		if !fn(&d) {
			return nil
		}
		if d.Rollouts == nil {
			d.Rollouts = []Rollout{}
		}
		_, err = writeRecord(ctx, svc.engine, varplane.RolloutScope, version, &d, by, reason)
		if err == nil || !errors.Is(err, varplane.ErrConflict) || attempt >= 8 {
			return err
		}
	}
}

// Rollouts returns the rollouts in progress (those that ended but are not
// archived yet too), for scope only when it is set.
func (svc *Service) Rollouts(ctx context.Context, scope varplane.Scope) ([]Rollout, error) {
	d, _, err := svc.readRollouts(ctx)
	if err != nil {
		return nil, err
	}
	out := []Rollout{}
	for _, r := range d.Rollouts {
		if scope == "" || r.Scope == scope {
			out = append(out, r)
		}
	}
	return out, nil
}

// GetRollout returns rollout id, in progress or archived.
func (svc *Service) GetRollout(ctx context.Context, id string) (*Rollout, error) {
	if !validRolloutID(id) {
		return nil, varplane.Errorf(varplane.CodeNotFound, "no rollout %q", id)
	}
	d, _, err := svc.readRollouts(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range d.Rollouts {
		if r.ID == id {
			return &r, nil
		}
	}
	var r Rollout
	_, found, err := readRecord(ctx, svc.store, rolloutArchive(id), &r)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, varplane.Errorf(varplane.CodeNotFound, "no rollout %q", id)
	}
	return &r, nil
}

// PauseRollout, ResumeRollout and AbortRollout are a person's controls of
// a rollout in progress, by an identity that the caller authorized to
// change its scope and that holds one of the roles the scope's review
// policy names, when it names any (as approving asks). A pause freezes
// the step (its instances keep serving the revision, no gate decides and
// no step starts); a resume starts the step's bake again; an abort ends
// the rollout and returns every instance to the head, and the change to
// the state it had before.
func (svc *Service) PauseRollout(ctx context.Context, by varplane.Identity, id, note string) (*Rollout, error) {
	return svc.control(ctx, by, id, "pause", note, func(r *Rollout, now time.Time) error {
		if r.State != varplane.RolloutRunning {
			return varplane.Errorf(varplane.CodeChangeState, "rollout %s is %s: it cannot pause", r.ID, r.State)
		}
		r.State = varplane.RolloutPaused
		return nil
	})
}

// ResumeRollout: see PauseRollout.
func (svc *Service) ResumeRollout(ctx context.Context, by varplane.Identity, id, note string) (*Rollout, error) {
	return svc.control(ctx, by, id, "resume", note, func(r *Rollout, now time.Time) error {
		if r.State != varplane.RolloutPaused {
			return varplane.Errorf(varplane.CodeChangeState, "rollout %s is %s: it cannot resume", r.ID, r.State)
		}
		r.State = varplane.RolloutRunning
		r.StepStartedAt = now
		r.GateStates = nil
		return nil
	})
}

// AbortRollout: see PauseRollout.
func (svc *Service) AbortRollout(ctx context.Context, by varplane.Identity, id, note string) (*Rollout, error) {
	r, err := svc.control(ctx, by, id, "abort", note, func(r *Rollout, now time.Time) error {
		if !r.Serves() {
			return varplane.Errorf(varplane.CodeChangeState, "rollout %s is %s: it cannot abort", r.ID, r.State)
		}
		r.State = varplane.RolloutAborted
		r.EndedAt = &now
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := svc.finish(ctx, *r); err != nil {
		// The abort is recorded: no instance serves the rollout's
		// revision any more; what is left the rollout pass finishes.
		return nil, varplane.AfterCommit(err, fmt.Sprintf("rollout %s is aborted (recorded; no instance serves its revision) and the store then failed before the change was given back: the control plane finishes it at its next rollout pass; read the rollout", r.ID))
	}
	return r, nil
}

// control applies a person's control op to rollout id.
func (svc *Service) control(ctx context.Context, by varplane.Identity, id, op, note string, fn func(*Rollout, time.Time) error) (*Rollout, error) {
	if !validRolloutID(id) {
		return nil, varplane.Errorf(varplane.CodeNotFound, "no rollout %q", id)
	}
	var out *Rollout
	var refused error
	err := svc.updateRollouts(ctx, by.ID, fmt.Sprintf("rollout %s: %s", id, op), func(d *rolloutsDoc) bool {
		refused, out = nil, nil
		i := slices.IndexFunc(d.Rollouts, func(r Rollout) bool { return r.ID == id })
		if i < 0 {
			refused = varplane.Errorf(varplane.CodeChangeState, "rollout %q is not in progress", id)
			return false
		}
		r := d.Rollouts[i]
		if r.Completing {
			refused = varplane.Errorf(varplane.CodeChangeState, "rollout %s is completing: its head is moving to the new generation", r.ID)
			return false
		}
		pol, has, err := svc.PolicyFor(ctx, r.Scope)
		if err != nil {
			refused = err
			return false
		}
		if has && len(pol.Roles) > 0 && !slices.ContainsFunc(pol.Roles, by.Has) {
			refused = varplane.Errorf(varplane.CodeForbidden, "to %s a rollout of %q needs one of the roles %s", op, r.Scope, strings.Join(pol.Roles, ", "))
			return false
		}
		now := svc.now()
		if refused = fn(&r, now); refused != nil {
			return false
		}
		if refused = r.event(now, by.ID, op, note, nil); refused != nil {
			return false
		}
		d.Rollouts[i] = r
		out = &r
		return true
	})
	if refused != nil {
		return nil, refused
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// finish ends rollout r, whose record says it ended (completed, rolled
// back, aborted, conflicted): the change is moved on, the rollout is
// archived in its own record, then it leaves the list. Each step is
// idempotent, so the next pass finishes one cut short.
func (svc *Service) finish(ctx context.Context, r Rollout) error {
	last := r.Events[len(r.Events)-1]
	var err error
	switch r.State {
	case varplane.RolloutCompleted:
		var c *Change
		c, err = svc.rolloutMoveChange(ctx, r.Change, r.ID, StatePublished, last.By, "rollout "+r.ID+" completed",
			&Publication{Generation: r.Generation, By: last.By, At: last.At})
		if err == nil && c != nil && c.State == StatePublished && c.AfterPublish == nil {
			svc.detectAfterPublish(ctx, c)
		}
	case varplane.RolloutRolledBack:
		_, err = svc.rolloutMoveChange(ctx, r.Change, r.ID, StateFailed, last.By, "rollout "+r.ID+" rolled back: "+last.Note, nil)
	case varplane.RolloutAborted:
		_, err = svc.rolloutMoveChange(ctx, r.Change, r.ID, r.From, last.By, "rollout "+r.ID+" aborted by "+last.By+": "+last.Note, nil)
	case varplane.RolloutConflicted:
		_, err = svc.rolloutMoveChange(ctx, r.Change, r.ID, StateConflicted, last.By, "rollout "+r.ID+": base moved", nil)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := writeRecord(ctx, svc.engine, rolloutArchive(r.ID), 0, &r, last.By, fmt.Sprintf("rollout %s: %s", r.ID, r.State)); err != nil && !errors.Is(err, varplane.ErrConflict) {
		return err
	}
	return svc.updateRollouts(ctx, last.By, fmt.Sprintf("rollout %s: archived (%s)", r.ID, r.State), func(d *rolloutsDoc) bool {
		n := len(d.Rollouts)
		d.Rollouts = slices.DeleteFunc(d.Rollouts, func(x Rollout) bool { return x.ID == r.ID && !x.Serves() })
		return len(d.Rollouts) != n
	})
}

// RolloutPass drives every rollout in progress once, under RolloutLease
// held by holder: a rollout whose gate failed is rolled back (its own
// event, with the gates' evidence), one whose step baked with every gate
// passing moves to the next step, and one whose last step baked completes:
// its revision is activated at Base+1 (the head moves only then) and its
// change is published. A rollout that ended is finished (archived). A pass
// the lease keeps from running returns nil and does nothing.
func (svc *Service) RolloutPass(ctx context.Context, holder string) error {
	if err := svc.store.AcquireLease(ctx, RolloutLease, holder, time.Minute); err != nil {
		if errors.Is(err, varplane.ErrLeaseHeld) {
			return nil
		}
		return err
	}
	defer func() { _ = svc.store.ReleaseLease(context.WithoutCancel(ctx), RolloutLease, holder) }()
	d, _, err := svc.readRollouts(ctx)
	if err != nil || len(d.Rollouts) == 0 {
		return err
	}
	var statuses []InstanceStatus
	if svc.opts.Instances != nil {
		if statuses, err = svc.opts.Instances.Statuses(ctx); err != nil && !errors.Is(err, ErrNoHeartbeats) {
			return err
		}
	}
	var errs []error
	for _, r := range d.Rollouts {
		if err := svc.drive(ctx, r, statuses); err != nil {
			errs = append(errs, fmt.Errorf("rollout %s: %w", r.ID, err))
		}
	}
	return errors.Join(errs...)
}

// drive decides one rollout once.
func (svc *Service) drive(ctx context.Context, r Rollout, statuses []InstanceStatus) error {
	if !r.Serves() {
		return svc.finish(ctx, r)
	}
	if r.Completing {
		return svc.complete(ctx, r) // a completion cut short
	}
	if r.State == varplane.RolloutPaused {
		return nil
	}
	now := svc.now()
	gates := svc.evaluateGates(ctx, r, now, statuses)
	failed := slices.IndexFunc(gates, func(g GateState) bool { return g.State == GateFail }) >= 0
	pending := slices.IndexFunc(gates, func(g GateState) bool { return g.State == GatePending }) >= 0
	baked := !now.Before(r.StepStartedAt.Add(time.Duration(r.Strategy.Steps[r.Step].Bake)))
	next := r
	next.GateStates = gates
	var reason string
	switch {
	case failed:
		next.State = varplane.RolloutRolledBack
		next.EndedAt = &now
		_ = next.event(now, RolloutActor, "rollback", failedGates(gates), gates)
		reason = fmt.Sprintf("rollout %s: rolled back at step %d/%d: %s", r.ID, r.Step+1, r.Steps, failedGates(gates))
	case !baked || pending:
		if gatesEqual(r.GateStates, gates) {
			return nil
		}
		reason = fmt.Sprintf("rollout %s: gates at step %d/%d", r.ID, r.Step+1, r.Steps)
	case r.Step+1 < len(r.Strategy.Steps):
		next.step(r.Step+1, now)
		next.GateStates = []GateState{}
		_ = next.event(now, RolloutActor, "step", fmt.Sprintf("share %s", rollout.Percent(next.Share)), nil)
		reason = fmt.Sprintf("rollout %s: step %d/%d (%s)", r.ID, next.Step+1, next.Steps, rollout.Percent(next.Share))
	default:
		// The last step baked with every gate passing: claim the
		// completion before the head moves.
		next.Completing = true
		lost, err := svc.replaceRollout(ctx, r, next, fmt.Sprintf("rollout %s: completing", r.ID))
		if err != nil || lost {
			return err
		}
		return svc.complete(ctx, next)
	}
	lost, err := svc.replaceRollout(ctx, r, next, reason)
	if err != nil || lost || next.Serves() {
		return err
	}
	return svc.finish(ctx, next)
}

// replaceRollout writes next in place of r, only while the record still
// holds r as this pass judged it (its state, step, step start, events and
// completion): a person's pause or abort meanwhile wins, lost is true and
// the next pass judges again.
func (svc *Service) replaceRollout(ctx context.Context, r, next Rollout, reason string) (lost bool, err error) {
	err = svc.updateRollouts(ctx, RolloutActor, reason, func(d *rolloutsDoc) bool {
		i := slices.IndexFunc(d.Rollouts, func(x Rollout) bool { return x.ID == r.ID })
		if i < 0 {
			lost = true
			return false
		}
		x := d.Rollouts[i]
		if x.State != r.State || x.Step != r.Step || !x.StepStartedAt.Equal(r.StepStartedAt) || len(x.Events) != len(r.Events) || x.Completing != r.Completing {
			lost = true
			return false
		}
		d.Rollouts[i] = next
		return true
	})
	return lost, err
}

// complete moves the head of a completing rollout r: its revision is
// activated at Base+1 (with the change's idempotency key, so a completion
// cut short and done again activates once), then the rollout is recorded
// completed (or conflicted when the scope moved past the base) and
// finished.
func (svc *Service) complete(ctx context.Context, r Rollout) error {
	c, err := svc.load(ctx, r.Change)
	if err != nil {
		return err
	}
	res, actErr := svc.engine.Activate(ctx, varplane.ActivateRequest{
		Scope: r.Scope, Revision: r.Revision, ExpectedGeneration: r.Base,
		Actor: c.Author, Owner: OwnerName, Reason: changeReason(r.Change),
		IdempotencyKey: fmt.Sprintf("control:%s:%d", r.Change, r.Base),
	})
	now := svc.now()
	next := r
	next.EndedAt = &now
	switch {
	case actErr == nil:
		next.State, next.Generation = varplane.RolloutCompleted, res.Generation
		_ = next.event(now, RolloutActor, "complete", fmt.Sprintf("generation %d", res.Generation), nil)
	case errors.Is(actErr, varplane.ErrConflict):
		next.State = varplane.RolloutConflicted
		_ = next.event(now, RolloutActor, "conflict", "the scope moved past the base "+fmt.Sprint(r.Base), nil)
	default:
		return actErr
	}
	lost, err := svc.replaceRollout(ctx, r, next, fmt.Sprintf("rollout %s: %s", r.ID, next.State))
	if err != nil || lost {
		return err
	}
	return svc.finish(ctx, next)
}

func failedGates(gates []GateState) string {
	var parts []string
	for _, g := range gates {
		if g.State == GateFail {
			msg := "gate " + g.Gate + " failed"
			if len(g.Evidence) > 0 {
				msg += ": " + g.Evidence[0]
			}
			parts = append(parts, msg)
		}
	}
	return strings.Join(parts, "; ")
}

func gatesEqual(a, b []GateState) bool {
	return slices.EqualFunc(a, b, func(x, y GateState) bool {
		return x.Gate == y.Gate && x.State == y.State && slices.Equal(x.Evidence, y.Evidence)
	})
}
