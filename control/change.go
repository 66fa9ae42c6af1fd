package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/varplane/varplane"
)

// State is where a change request stands.
type State string

// The states of a change request. Open states may still move; published,
// rejected, withdrawn and expired are final.
const (
	StateProposed   State = "proposed"   // recorded, checks not yet run
	StateChecked    State = "checked"    // every check passed; awaiting approvals
	StateFailed     State = "failed"     // a check found issues
	StateCanary     State = "canary"     // a canary window is open
	StateApproved   State = "approved"   // approved as the policy asks; may publish
	StatePublishing State = "publishing" // claimed by a publish; only a publish moves it
	// StateRollout (rolling-out, rollout.go): claimed by a rollout; only
	// the rollout moves it.
	StateConflicted State = "conflicted" // its base moved; rebase re-checks it
	StatePublished  State = "published"
	StateRejected   State = "rejected"
	StateWithdrawn  State = "withdrawn"
	StateExpired    State = "expired"
)

// Open reports whether a change in state s may still move.
func (s State) Open() bool {
	switch s {
	case StatePublished, StateRejected, StateWithdrawn, StateExpired:
		return false
	}
	return true
}

func validState(s State) bool {
	switch s {
	case StateProposed, StateChecked, StateFailed, StateCanary, StateApproved, StatePublishing, StateRollout, StateConflicted,
		StatePublished, StateRejected, StateWithdrawn, StateExpired:
		return true
	}
	return false
}

// Change is one change request, as stored and as the API answers it.
type Change struct {
	ID    string         `json:"id"`
	Scope varplane.Scope `json:"scope"`
	// Base is the generation of Scope the change was proposed (or rebased)
	// on; publishing activates the candidate at Base+1 or not at all.
	Base varplane.Generation `json:"base"`
	// Revision is the candidate, stored as a revision of Scope; empty when
	// schema validation refused the document (the change then failed).
	Revision varplane.Revision `json:"revision,omitempty"`
	// Document is the candidate, read from its revision: the record does
	// not repeat it, so a record stays within the limits of the document
	// it proposes. Absent when it failed validation or was reclaimed.
	Document json.RawMessage `json:"document,omitempty"`
	SchemaID string          `json:"schemaId,omitempty"`
	Note     string          `json:"note,omitempty"`
	// RollbackTo is the generation whose document a rollback change
	// restores.
	RollbackTo *varplane.Generation `json:"rollbackTo,omitempty"`
	Author     string               `json:"author"`
	State      State                `json:"state"`
	Checks     []CheckResult        `json:"checks"`
	Approvals  []Approval           `json:"approvals"`
	Canary     *Window              `json:"canary,omitempty"`
	// Rollout is the id of the rollout that publishes (or published, or
	// rolled back) the change in steps, when one started.
	Rollout string `json:"rollout,omitempty"`
	// Published is set once the change is the head.
	Published *Publication `json:"published,omitempty"`
	// AfterPublish is what the comparison of the heads its checks read
	// found right after publishing.
	AfterPublish *Detection   `json:"afterPublish,omitempty"`
	ProposedAt   time.Time    `json:"proposedAt"`
	ExpiresAt    time.Time    `json:"expiresAt"`
	Transitions  []Transition `json:"transitions"`
	// Version is the generation of the change's record: the compare-and-set
	// every transition is guarded by. It is not stored in the record.
	Version varplane.Generation `json:"version"`
}

// Approval is one identity's approval.
type Approval struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Roles are the roles By held when approving. Publish counts the
	// approval toward a policy that asks for roles only when one of these
	// holds one of them (Identity.Has): the policy in force at publish
	// decides, not the one in force at approval.
	Roles []string `json:"roles,omitempty"`
}

// countedApprovals returns how many of c's approvals the policy pol counts
// (has: whether one applies): each by a distinct identity other than the
// author and, when pol lists roles, by an identity that held one of them
// when it approved. Approve and Publish both decide with it, so the state
// "approved" and the publish never count differently.
func countedApprovals(c *Change, pol Policy, has bool) int {
	seen := make(map[string]bool, len(c.Approvals))
	n := 0
	for _, a := range c.Approvals {
		if a.By == c.Author || seen[a.By] {
			continue
		}
		seen[a.By] = true
		if has && len(pol.Roles) > 0 && !slices.ContainsFunc(pol.Roles, varplane.Identity{ID: a.By, Roles: a.Roles}.Has) {
			continue
		}
		n++
	}
	return n
}

// neededApprovals is how many counted approvals a change needs: the
// policy's count, or one without a policy (approving a change of a scope
// without a policy approves it).
func neededApprovals(pol Policy, has bool) int {
	if has {
		return pol.Approvals
	}
	return 1
}

// publishable reports why c may not publish now under pol (has: whether
// one applies), or nil: with no policy a checked or approved change
// publishes; under a policy it needs pol.Approvals counted approvals
// (countedApprovals) and, when pol.Canary, a passed canary window. Publish
// asks it with the policy read at the moment it publishes, so a policy
// raised after the approvals is the one that decides.
func publishable(c *Change, pol Policy, has bool) error {
	if c.State != StateChecked && c.State != StateApproved && c.State != StatePublishing {
		return stateError(c, "publish")
	}
	if !has {
		return nil
	}
	if n := countedApprovals(c, pol, has); n < pol.Approvals {
		msg := fmt.Sprintf("change %s has %d of %d approvals that the policy of %q in force now counts (distinct identities other than the author", c.ID, n, pol.Approvals, pol.Scope)
		if len(pol.Roles) > 0 {
			msg += ", holding one of the roles " + strings.Join(pol.Roles, ", ")
		}
		msg += ")"
		who := "another identity"
		if len(pol.Roles) > 0 {
			who = "an identity holding one of the roles " + strings.Join(pol.Roles, ", ")
		}
		return &varplane.Error{Code: varplane.CodeChangeState, Message: msg,
			Hint: fmt.Sprintf("%s approves it (varplane change approve %s), then publish it again", who, c.ID)}
	}
	if pol.Canary && !c.Canary.passed() {
		return &varplane.Error{Code: varplane.CodeStoreUnavailable, Message: fmt.Sprintf("change %s needs a passed canary window", c.ID)}
	}
	return nil
}

// Publication records the publish of a change.
type Publication struct {
	Generation varplane.Generation `json:"generation"`
	By         string              `json:"by"`
	At         time.Time           `json:"at"`
}

// Transition is one move of a change, with the identity that made it (the
// same identity is the actor of the record's event in the store's log).
type Transition struct {
	From State     `json:"from,omitempty"`
	To   State     `json:"to"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
	Note string    `json:"note,omitempty"`
}

// Options configure a Service. The zero value is usable.
type Options struct {
	// Now is the clock (time.Now when nil); tests give a fake one.
	Now func() time.Time
	// ExpireAfter is how long after it was proposed an open change
	// expires: 7 days when zero.
	ExpireAfter time.Duration
	// Checks are the check hooks a Go service registers, run on every
	// proposal and rebase after schema validation.
	Checks []Check
	// DetectTimeout bounds the comparison of read heads after a publish
	// (detection-timed-out past it): 10 seconds when zero.
	DetectTimeout time.Duration
	// Instances reports the instances' statuses and canary reports; nil
	// when no instance reports (propagation then counts none).
	Instances Instances
	// Logger receives failures of background work; slog.Default when nil.
	Logger *slog.Logger
	// MaxDiffBytes bounds the patch Diff answers (DefaultMaxDiffBytes
	// when zero); MaxDiffs bounds the diffs computed at once
	// (DefaultMaxDiffs when zero). Together they bound a diff's memory.
	MaxDiffBytes int64
	MaxDiffs     int
	// Gates are the external checks a rollout may name among its gates
	// (Gates.Checks), by name: serve gives each --check webhook.
	Gates map[string]Gate
}

// DefaultDetectTimeout bounds the comparison after a publish by default.
const DefaultDetectTimeout = 10 * time.Second

// DefaultExpireAfter is how long an open change lives by default.
const DefaultExpireAfter = 7 * 24 * time.Hour

// ExpiryActor is the identity recorded for an expiry.
const ExpiryActor = "varplane:expiry"

// Service runs the workflow over an engine whose Options.Owners include the
// Guard's Owners.
type Service struct {
	engine *varplane.Engine
	store  varplane.Store
	guard  *Guard
	opts   Options
	listed listedInstances // the instances FileStatus listed, and when
	diffs  chan struct{}   // one token per diff being computed
	waits  *waiters        // the waits being held
}

// New returns a Service over engine and binds guard to the engine: its
// store, and the scopes its other Owners reserve (which no policy covers).
func New(engine *varplane.Engine, guard *Guard, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ExpireAfter <= 0 {
		opts.ExpireAfter = DefaultExpireAfter
	}
	if opts.DetectTimeout <= 0 {
		opts.DetectTimeout = DefaultDetectTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxDiffBytes <= 0 {
		opts.MaxDiffBytes = DefaultMaxDiffBytes
	}
	if opts.MaxDiffs <= 0 {
		opts.MaxDiffs = DefaultMaxDiffs
	}
	guard.bindEngine(engine)
	svc := &Service{engine: engine, store: engine.Store(), guard: guard, opts: opts, diffs: make(chan struct{}, opts.MaxDiffs)}
	svc.waits = &waiters{svc: svc, slots: make(chan struct{}, MaxWaiting)}
	return svc
}

func (svc *Service) now() time.Time { return svc.opts.Now().UTC() }

// ProposeRequest proposes a change of Scope's document, on Base.
type ProposeRequest struct {
	Scope    varplane.Scope
	Base     varplane.Generation
	Document json.RawMessage
	SchemaID string
	Note     string
	// rollbackTo is set by Rollback.
	rollbackTo *varplane.Generation
}

// Propose records a change by author, runs its checks and stores its
// candidate as a revision of the scope. It answers the change: checked, or
// failed with the issues. A base ahead of the scope is bad-request; a base
// behind it is accepted and the change is conflicted at once.
func (svc *Service) Propose(ctx context.Context, by varplane.Identity, req ProposeRequest) (*Change, error) {
	if _, err := varplane.ParseScope(string(req.Scope)); err != nil {
		return nil, err
	}
	if isRecordScope(req.Scope) {
		return nil, varplane.Errorf(varplane.CodeScopeOwned, "scope %q belongs to the %s", req.Scope, OwnerName)
	}
	st, err := svc.store.State(ctx, req.Scope)
	if err != nil {
		return nil, err
	}
	if req.Base > st.Generation {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "base %d is ahead of scope %q (generation %d)", req.Base, req.Scope, st.Generation)
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	now := svc.now()
	c := &Change{
		ID: id, Scope: req.Scope, Base: req.Base, Document: req.Document, SchemaID: req.SchemaID,
		Note: req.Note, RollbackTo: req.rollbackTo, Author: by.ID, State: StateProposed,
		ProposedAt: now, ExpiresAt: now.Add(svc.opts.ExpireAfter),
		Approvals: []Approval{}, Transitions: []Transition{{To: StateProposed, By: by.ID, At: now, Note: req.Note}},
	}
	if err := svc.runChecks(ctx, c); err != nil {
		return nil, err
	}
	to := StateChecked
	if !c.checksPassed() {
		to = StateFailed
	} else if st.Generation != c.Base {
		to = StateConflicted
	}
	c.move(to, by.ID, now, "")
	if err := svc.save(ctx, c, 0, "propose"); err != nil {
		if c.Revision != "" { // the checks stored the candidate
			err = varplane.AfterCommit(err, "the proposed document was stored as a revision of its scope (never made current), and the store then failed before the change was recorded: propose it again")
		}
		return nil, err
	}
	return c, nil
}

// Get returns change id, expiring it first when its time is up.
func (svc *Service) Get(ctx context.Context, id string) (*Change, error) {
	c, err := svc.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return c, svc.expireIfDue(ctx, c)
}

// ListRequest filters List. Zero fields do not filter; State "open"
// matches every open state.
type ListRequest struct {
	Scope varplane.Scope
	State string
	// Visible, when set, is asked of each change's scope that passes the
	// other filters (the caller's authorization): false leaves the change
	// out, an error ends the list with it.
	Visible func(varplane.Scope) (bool, error)
}

// List returns the changes that match, newest first. Changes whose time is
// up are expired first (an open list never shows them). A change's
// candidate document is read only once the change passed every filter.
func (svc *Service) List(ctx context.Context, req ListRequest) ([]*Change, error) {
	out := []*Change{}
	err := svc.ListEach(ctx, req, func(c *Change) error {
		kept := *c // ListEach drops c's candidate once fn returns
		out = append(out, &kept)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListEach calls fn with each change List returns, in its order, reading
// a change's candidate only just before fn sees it and dropping it after,
// so that a caller who streams the list holds one candidate at a time
// (the records, small, are all read first to be sorted). fn may keep c but
// not its Document.
func (svc *Service) ListEach(ctx context.Context, req ListRequest, fn func(c *Change) error) error {
	if req.State != "" && req.State != "open" && !validState(State(req.State)) {
		return varplane.Errorf(varplane.CodeBadRequest, "state %q is not a change state (nor open)", req.State)
	}
	var out []*Change
	err := svc.each(ctx, func(c *Change) error {
		if err := svc.expireIfDue(ctx, c); err != nil {
			return err
		}
		switch {
		case req.Scope != "" && c.Scope != req.Scope:
		case req.State == "open" && !c.State.Open():
		case req.State != "" && req.State != "open" && string(c.State) != req.State:
		default:
			if req.Visible != nil {
				if ok, err := req.Visible(c.Scope); !ok || err != nil {
					return err
				}
			}
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortStableFunc(out, func(a, b *Change) int { return b.ProposedAt.Compare(a.ProposedAt) })
	for _, c := range out {
		if err := svc.readCandidate(ctx, c); err != nil {
			return err
		}
		err := fn(c)
		c.Document = nil
		if err != nil {
			return err
		}
	}
	return nil
}

// ExpireDue expires every open change whose time is up, as the
// maintenance pass does; it returns how many it expired.
func (svc *Service) ExpireDue(ctx context.Context) (int, error) {
	n := 0
	var staged *rolloutsDoc
	err := svc.each(ctx, func(c *Change) error {
		if !c.State.Open() {
			return nil
		}
		if c.State == StateRollout {
			if staged == nil {
				d, _, err := svc.readRollouts(ctx)
				if err != nil {
					return err
				}
				staged = &d
			}
			return svc.releaseOrphanedClaim(ctx, c, *staged)
		}
		expired, err := svc.expire(ctx, c)
		if expired {
			n++
		}
		return err
	})
	return n, err
}

// Approve records by's approval, with the roles by holds. The author never
// approves their own change; under a policy by must hold one of its roles;
// an identity approves once. Once the policy's count is reached the change
// is approved. With no policy one approval approves. An approved change
// still takes approvals: a policy raised since may ask for more, and
// Publish counts them under the policy in force when it publishes.
func (svc *Service) Approve(ctx context.Context, by varplane.Identity, id, note string) (*Change, error) {
	return svc.transition(ctx, id, "approve", func(c *Change, pol Policy, hasPolicy bool) error {
		if c.State != StateChecked && c.State != StateCanary && c.State != StateApproved {
			return stateError(c, "approve")
		}
		if by.ID == c.Author {
			return varplane.Errorf(varplane.CodeForbidden, "the author of change %s cannot approve it", c.ID)
		}
		if hasPolicy && len(pol.Roles) > 0 && !slices.ContainsFunc(pol.Roles, by.Has) {
			return varplane.Errorf(varplane.CodeForbidden, "approving changes of %q needs one of the roles %s", c.Scope, strings.Join(pol.Roles, ", "))
		}
		if slices.ContainsFunc(c.Approvals, func(a Approval) bool { return a.By == by.ID }) {
			return varplane.Errorf(varplane.CodeChangeState, "%s already approved change %s", by.ID, c.ID)
		}
		now := svc.now()
		c.Approvals = append(c.Approvals, Approval{By: by.ID, At: now, Roles: slices.Clone(by.Roles)})
		if c.State == StateChecked && countedApprovals(c, pol, hasPolicy) >= neededApprovals(pol, hasPolicy) {
			c.move(StateApproved, by.ID, now, note)
		} else {
			c.Transitions = append(c.Transitions, Transition{From: c.State, To: c.State, By: by.ID, At: now, Note: "approval " + note})
		}
		return nil
	})
}

// Reject closes an open change as rejected, by anyone but its author (who
// withdraws instead).
func (svc *Service) Reject(ctx context.Context, by varplane.Identity, id, note string) (*Change, error) {
	return svc.transition(ctx, id, "reject", func(c *Change, _ Policy, _ bool) error {
		if by.ID == c.Author {
			return varplane.Errorf(varplane.CodeForbidden, "the author of change %s withdraws it rather than rejecting it", c.ID)
		}
		c.move(StateRejected, by.ID, svc.now(), note)
		return svc.closeWindow(ctx, c)
	})
}

// Withdraw closes an open change as withdrawn, by its author only.
func (svc *Service) Withdraw(ctx context.Context, by varplane.Identity, id, note string) (*Change, error) {
	return svc.transition(ctx, id, "withdraw", func(c *Change, _ Policy, _ bool) error {
		if by.ID != c.Author {
			return varplane.Errorf(varplane.CodeForbidden, "only the author of change %s may withdraw it", c.ID)
		}
		c.move(StateWithdrawn, by.ID, svc.now(), note)
		return svc.closeWindow(ctx, c)
	})
}

// Rebase moves an open change onto base, which must be the scope's current
// generation, clears its approvals and runs its checks again.
func (svc *Service) Rebase(ctx context.Context, by varplane.Identity, id string, base varplane.Generation) (*Change, error) {
	return svc.transition(ctx, id, "rebase", func(c *Change, _ Policy, _ bool) error {
		if c.Revision == "" {
			return varplane.Errorf(varplane.CodeChangeState, "change %s failed schema validation; propose a corrected document", c.ID)
		}
		st, err := svc.store.State(ctx, c.Scope)
		if err != nil {
			return err
		}
		if base != st.Generation {
			cur := st.Generation
			return &varplane.Error{Code: varplane.CodeRevisionConflict, Scope: c.Scope, Expected: &base, Current: &cur,
				Message: fmt.Sprintf("scope %q is at generation %d: rebase on that", c.Scope, cur)}
		}
		if err := svc.closeWindow(ctx, c); err != nil {
			return err
		}
		c.Base, c.Approvals, c.Canary = base, []Approval{}, nil
		if err := svc.runChecks(ctx, c); err != nil {
			return err
		}
		to := StateChecked
		if !c.checksPassed() {
			to = StateFailed
		}
		c.move(to, by.ID, svc.now(), fmt.Sprintf("rebased on %d", base))
		return nil
	})
}

// Publish activates the change's candidate at base+1, as by. It needs the
// approvals (and the canary) the policy in force now asks for
// (publishable), whatever the policy was when the change was approved;
// with no policy a checked change publishes. When the base moved the
// change becomes conflicted and the answer is revision-conflict carrying
// the current generation: the head is untouched.
//
// It takes three steps, each a compare-and-set: the change is claimed
// (publishing), so no reject or withdraw can land while the head moves;
// the candidate is activated, with an idempotency key of the change and its
// base; the change is recorded published (or conflicted). A publish cut
// short after its claim is finished by the next publish of the change: the
// key makes the activation answer what it did the first time. That next
// publish judges the change again under the policy then in force when the
// activation has not happened yet (the scope is still at the base); one
// the policy now refuses goes back to checked, with its approvals.
func (svc *Service) Publish(ctx context.Context, by varplane.Identity, id string) (*Change, error) {
	c, err := svc.load(ctx, id)
	if err != nil {
		return nil, err
	}
	// Once this publish claimed the change (its record now says
	// publishing) or its document was activated, the store of record holds
	// a trace of it: a store that fails after that is not "nothing
	// changed" (503 store-unavailable) but a publish left to finish.
	claimed := false
	if c.State == StatePublishing {
		if c, err = svc.recheckClaim(ctx, by, c); err != nil {
			return nil, err
		}
	} else {
		claimed = true
		if c, err = svc.transition(ctx, id, "publish", func(c *Change, pol Policy, hasPolicy bool) error {
			if err := publishable(c, pol, hasPolicy); err != nil {
				return err
			}
			c.move(StatePublishing, by.ID, svc.now(), "")
			return nil
		}); err != nil {
			return nil, err
		}
	}
	res, actErr := svc.engine.Activate(ctx, varplane.ActivateRequest{
		Scope: c.Scope, Revision: c.Revision, ExpectedGeneration: c.Base,
		Actor: by.ID, Owner: OwnerName, Reason: changeReason(c.ID),
		IdempotencyKey: fmt.Sprintf("control:%s:%d", c.ID, c.Base),
		RollbackOf:     rollbackOf(c),
	})
	invalid := varplane.ErrorCode(actErr) == varplane.CodeRevisionInvalid
	if actErr != nil && !errors.Is(actErr, varplane.ErrConflict) && !invalid {
		if claimed {
			return nil, varplane.AfterCommit(actErr, "the publish was started and the store then failed: the change is publishing and its document was not activated; read the change, or repeat its publish to finish it")
		}
		return nil, actErr // still publishing: the next publish finishes it
	}
	version, now := c.Version, svc.now()
	switch {
	case invalid:
		// A schema bound since the change was checked refuses its
		// candidate: the change fails, with the schema's issues.
		c.Checks = append(c.Checks, CheckResult{Name: SchemaCheck, Issues: issuesOf(actErr)})
		c.move(StateFailed, by.ID, now, "the bound schema refused the publish: "+varplane.ErrorMessage(actErr))
	case actErr != nil:
		c.move(StateConflicted, by.ID, now, "base moved")
	default:
		c.Published = &Publication{Generation: res.Generation, By: by.ID, At: now}
		c.move(StatePublished, by.ID, now, "")
	}
	if err := svc.save(ctx, c, version, "publish"); err != nil {
		if claimed || actErr == nil {
			return nil, varplane.AfterCommit(err, "the publish was started and the store then failed: the change is publishing and its document may be active; read the change, or repeat its publish to finish it")
		}
		return nil, err
	}
	if actErr != nil {
		return c, actErr
	}
	svc.detectAfterPublish(ctx, c)
	return c, nil
}

// rollbackOf is the generation a rollback change rolls back (its base),
// recorded on its activation (varplane.Event.RollbackOf); 0 for any other
// change.
func rollbackOf(c *Change) varplane.Generation {
	if c.RollbackTo == nil {
		return 0
	}
	return c.Base
}

// recheckClaim judges a publishing change again before its publish is
// finished: while the scope is still at the change's base (the activation
// has not happened), the policy in force now must allow it, or the change
// goes back to checked (its approvals kept) and the refusal is answered.
// Once the scope moved, the activation happened (or the base moved):
// finishing it only records what the store did.
func (svc *Service) recheckClaim(ctx context.Context, by varplane.Identity, c *Change) (*Change, error) {
	st, err := svc.store.State(ctx, c.Scope)
	if err != nil {
		return nil, err
	}
	if st.Generation != c.Base {
		return c, nil
	}
	pol, has, err := svc.PolicyFor(ctx, c.Scope)
	if err != nil {
		return nil, err
	}
	refusal := publishable(c, pol, has)
	if refusal == nil {
		return c, nil
	}
	version := c.Version
	c.move(StateChecked, by.ID, svc.now(), "the policy in force refused the publish: "+varplane.ErrorMessage(refusal))
	if err := svc.save(ctx, c, version, "publish refused"); err != nil {
		return nil, err
	}
	return nil, refusal
}

// changeReason is the reason of the activation that publishes change id;
// the head and the revisions name the change from it.
func changeReason(id string) string { return "change " + id }

// changeOf returns the change id an activation's reason names.
func changeOf(reason string) string {
	id, ok := strings.CutPrefix(reason, "change ")
	if !ok || !validID(id) {
		return ""
	}
	return id
}

// transition loads change id, refuses it when it is not open (expiring it
// when due), applies fn and saves the change guarded by its version.
func (svc *Service) transition(ctx context.Context, id, op string, fn func(c *Change, pol Policy, hasPolicy bool) error) (*Change, error) {
	c, err := svc.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := svc.expireIfDue(ctx, c); err != nil {
		return nil, err
	}
	if !c.State.Open() || (c.State == StatePublishing && op != "publish") || c.State == StateRollout {
		return nil, stateError(c, op)
	}
	pol, has, err := svc.PolicyFor(ctx, c.Scope)
	if err != nil {
		return nil, err
	}
	version := c.Version
	if err := fn(c, pol, has); err != nil {
		return nil, err
	}
	return c, svc.save(ctx, c, version, op)
}

// closeWindow unstages the candidate of c's open canary window, for a
// change that leaves the window another way (rejected, withdrawn, rebased,
// expired).
func (svc *Service) closeWindow(ctx context.Context, c *Change) error {
	if c.Canary == nil || c.Canary.State != WindowOpen || svc.opts.Instances == nil {
		return nil
	}
	w := *c.Canary
	w.State, w.Reason = WindowBlocked, "the change left the window"
	c.Canary = &w
	return svc.opts.Instances.Unstage(ctx, w, c)
}

func stateError(c *Change, op string) error {
	return varplane.Errorf(varplane.CodeChangeState, "change %s is %s: it cannot %s", c.ID, c.State, op)
}

// move records a transition of c to state to.
func (c *Change) move(to State, by string, at time.Time, note string) {
	c.Transitions = append(c.Transitions, Transition{From: c.State, To: to, By: by, At: at, Note: note})
	c.State = to
}

// each calls fn with every stored change, without its candidate document
// (readCandidate reads it), in the order of their record scopes. The changes are found from the store's scope list: a store of
// many changes makes this a scan, which the list of open changes of a
// later contract addition can replace.
func (svc *Service) each(ctx context.Context, fn func(*Change) error) error {
	scopes, err := svc.store.Scopes(ctx)
	if err != nil {
		return err
	}
	for _, sc := range scopes {
		id, ok := strings.CutPrefix(string(sc), changePrefix)
		if !ok || !validID(id) {
			continue
		}
		c, err := svc.loadRecord(ctx, id)
		if errors.Is(err, errNoRecord) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// expireIfDue expires c when it is open and its time is up.
func (svc *Service) expireIfDue(ctx context.Context, c *Change) error {
	_, err := svc.expire(ctx, c)
	return err
}

// expire moves c to expired when it is open and its time is up, and
// reports whether this call expired it.
func (svc *Service) expire(ctx context.Context, c *Change) (bool, error) {
	if !c.State.Open() || c.State == StatePublishing || c.State == StateRollout || svc.now().Before(c.ExpiresAt) {
		return false, nil
	}
	version := c.Version
	c.move(StateExpired, ExpiryActor, svc.now(), "")
	if err := svc.closeWindow(ctx, c); err != nil {
		return false, err
	}
	err := svc.save(ctx, c, version, "expire")
	if errors.Is(err, varplane.ErrConflict) {
		// Another replica moved it first: read what it wrote.
		fresh, lerr := svc.load(ctx, c.ID)
		if lerr != nil {
			return false, lerr
		}
		*c = *fresh
		return false, nil
	}
	return err == nil, err
}

// load returns change id with its candidate document.
func (svc *Service) load(ctx context.Context, id string) (*Change, error) {
	c, err := svc.loadRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	return c, svc.readCandidate(ctx, c)
}

// loadRecord returns change id as its record holds it: without the
// candidate document.
func (svc *Service) loadRecord(ctx context.Context, id string) (*Change, error) {
	if !validID(id) {
		return nil, varplane.Errorf(varplane.CodeNotFound, "no change %q", id)
	}
	var c Change
	version, found, err := readRecord(ctx, svc.store, changeScope(id), &c)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, &varplane.Error{Code: varplane.CodeNotFound, Message: fmt.Sprintf("no change %q", id), Err: errNoRecord}
	}
	c.Version = version
	return &c, nil
}

// readCandidate sets c.Document from its revision, when stored.
func (svc *Service) readCandidate(ctx context.Context, c *Change) error {
	if c.Revision == "" {
		return nil
	}
	rec, err := svc.store.Revision(ctx, c.Scope, c.Revision)
	switch {
	case err == nil:
		c.Document = rec.Document
	case !errors.Is(err, varplane.ErrNotFound) && !errors.Is(err, varplane.ErrReclaimed):
		return err
	}
	return nil
}

// save writes c guarded by version and sets its new version.
func (svc *Service) save(ctx context.Context, c *Change, version varplane.Generation, op string) error {
	rec := *c
	rec.Document, rec.Version = nil, 0
	v, err := writeRecord(ctx, svc.engine, changeScope(c.ID), version, &rec, c.Transitions[len(c.Transitions)-1].By, op+": "+string(c.State))
	if err != nil {
		return err
	}
	c.Version = v
	return nil
}
