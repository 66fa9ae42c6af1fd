package control

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/varplane/varplane"
)

// Check is a check hook a Go service registers (Options.Checks), for rules
// that span documents. It reads other heads through in.Head, which records
// the generation and revision of each head it read, so that after a
// publish the heads can be compared again.
type Check interface {
	// Name names the check in the change's results.
	Name() string
	// Check returns the issues it finds in the candidate (none: passed).
	// An error is an internal failure and fails the proposal.
	Check(ctx context.Context, in *CheckInput) ([]varplane.Issue, error)
}

// CheckFunc adapts a function to Check.
type CheckFunc struct {
	CheckName string
	Fn        func(ctx context.Context, in *CheckInput) ([]varplane.Issue, error)
}

// Name returns CheckName.
func (f CheckFunc) Name() string { return f.CheckName }

// Check calls Fn.
func (f CheckFunc) Check(ctx context.Context, in *CheckInput) ([]varplane.Issue, error) {
	return f.Fn(ctx, in)
}

// CheckInput is what a check sees: the change's scope, base and candidate,
// and the heads it reads.
type CheckInput struct {
	Scope    varplane.Scope
	Base     varplane.Generation
	Document json.RawMessage
	SchemaID string

	store varplane.Store
	mu    sync.Mutex
	reads []HeadRead
}

// HeadRead is one head a check read: its scope, generation and revision
// (empty when the scope had no head).
type HeadRead struct {
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation"`
	Revision   varplane.Revision   `json:"revision,omitempty"`
}

// Head returns the head of scope (nil when it has none) and records the
// read on the check's result.
func (in *CheckInput) Head(ctx context.Context, scope varplane.Scope) (*varplane.Head, error) {
	st, err := in.store.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	r := HeadRead{Scope: scope, Generation: st.Generation}
	if st.Head != nil {
		r.Revision = st.Head.Revision
	}
	in.Record(r)
	return st.Head, nil
}

// Record records a head the check read by other means (an outside check
// that reads heads through the API declares them in its answer), so that
// after a publish it is compared like the heads read through Head.
func (in *CheckInput) Record(r HeadRead) {
	in.mu.Lock()
	in.reads = append(in.reads, r)
	in.mu.Unlock()
}

// CheckResult is the outcome of one check, recorded on the change.
type CheckResult struct {
	Name   string           `json:"name"`
	Passed bool             `json:"passed"`
	Issues []varplane.Issue `json:"issues,omitempty"`
	Reads  []HeadRead       `json:"reads,omitempty"`
	// SchemaID, on the schema check, is the schema the document was
	// checked against: its scope's bound schema, or the one the change
	// named (none: only the document's syntax and numbers were checked).
	SchemaID string `json:"schemaId,omitempty"`
}

// SchemaCheck names the schema validation every change runs first.
const SchemaCheck = "schema"

// runChecks validates c's document as the engine would store it (against
// its scope's bound schema, if any), stores it
// as a revision of c.Scope when valid, and runs the check hooks; it records
// every result on c.
func (svc *Service) runChecks(ctx context.Context, c *Change) error {
	c.Checks = nil
	res, err := svc.engine.Validate(ctx, varplane.ValidateRequest{Document: c.Document, SchemaID: c.SchemaID, Scope: c.Scope})
	if err != nil {
		return err
	}
	c.Checks = append(c.Checks, CheckResult{Name: SchemaCheck, Passed: res.Valid, Issues: res.Issues, SchemaID: res.SchemaID})
	if !res.Valid {
		c.Revision = ""
		return nil
	}
	// The hooks run before the revision is stored: one that cannot answer
	// fails the proposal, and then nothing was written.
	for _, chk := range svc.opts.Checks {
		r, err := svc.runHook(ctx, chk, c)
		if err != nil {
			return err
		}
		c.Checks = append(c.Checks, r)
	}
	if c.Revision == "" {
		created, err := svc.engine.CreateRevision(ctx, varplane.CreateRevisionRequest{
			Scope: c.Scope, Document: c.Document, SchemaID: c.SchemaID,
			Actor: c.Author, Owner: OwnerName, Reason: "proposed in change " + c.ID,
		})
		if err != nil {
			return err
		}
		c.Revision = created.Revision
	}
	return nil
}

func (svc *Service) runHook(ctx context.Context, chk Check, c *Change) (CheckResult, error) {
	in := &CheckInput{Scope: c.Scope, Base: c.Base, Document: c.Document, SchemaID: c.SchemaID, store: svc.store}
	issues, err := chk.Check(ctx, in)
	if err != nil {
		return CheckResult{}, fmt.Errorf("control: check %s: %w", chk.Name(), err)
	}
	return CheckResult{Name: chk.Name(), Passed: len(issues) == 0, Issues: issues, Reads: in.reads}, nil
}

func (c *Change) checksPassed() bool {
	return !slices.ContainsFunc(c.Checks, func(r CheckResult) bool { return !r.Passed })
}

// The outcomes of the comparison after a publish.
const (
	HeadsUnchanged = "heads-unchanged"
	HeadsMoved     = "heads-moved"
	ReviewNeeded   = "review-needed"
)

// The reasons a comparison escalates to review-needed.
const (
	// NewIssues: a check re-run on the current heads found issues.
	NewIssues = "new-issues"
	// CheckFailed: a check could not be run again (an error), so a
	// person decides.
	CheckFailed = "check-failed"
	// DetectionTimedOut: the comparison did not finish within
	// Options.DetectTimeout; what moved is unknown, so a person decides.
	// It is told apart from a head that moved by this reason.
	DetectionTimedOut = "detection-timed-out"
)

// Detection is what the comparison of read heads found right after a
// publish: nothing moved, heads moved but the re-run checks find nothing
// new, or review-needed with its Reason (they find more, cannot run, or the
// comparison did not finish in time).
type Detection struct {
	Outcome string           `json:"outcome"`
	Reason  string           `json:"reason,omitempty"`
	Moved   []varplane.Scope `json:"moved,omitempty"`
	Issues  []varplane.Issue `json:"issues,omitempty"`
}

// timedOut is the outcome of a comparison cut short by its bound.
func timedOut(moved []varplane.Scope) Detection {
	return Detection{Outcome: ReviewNeeded, Reason: DetectionTimedOut, Moved: moved}
}

// detectAfterPublish compares the heads c's checks read with the current
// ones, re-runs the checks whose heads moved, and records the outcome on
// c, within DetectTimeout and even when the publishing request is gone.
// A failure to record it is logged: the publish stands.
func (svc *Service) detectAfterPublish(ctx context.Context, c *Change) {
	if !slices.ContainsFunc(c.Checks, func(r CheckResult) bool { return len(r.Reads) > 0 }) {
		return // no check read another head: nothing to compare
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), svc.opts.DetectTimeout)
	defer cancel()
	d := svc.detect(dctx, c)
	version := c.Version
	c.AfterPublish = &d
	if d.Outcome != HeadsUnchanged {
		c.Transitions = append(c.Transitions, Transition{From: c.State, To: c.State, By: c.Published.By, At: svc.now(), Note: d.Outcome})
	}
	if err := svc.save(context.WithoutCancel(ctx), c, version, "after-publish"); err != nil {
		svc.opts.Logger.Error("control: record the heads compared after a publish", "change", c.ID, "err", err)
	}
}

func (svc *Service) detect(ctx context.Context, c *Change) Detection {
	moved := map[varplane.Scope]bool{}
	rerun := map[int]bool{} // indices into Options.Checks
	for _, r := range c.Checks {
		for _, h := range r.Reads {
			st, err := svc.store.State(ctx, h.Scope)
			if ctx.Err() != nil {
				return timedOut(sortedScopes(moved))
			}
			cur := varplane.Revision("")
			if err == nil && st.Head != nil {
				cur = st.Head.Revision
			}
			if err != nil || cur != h.Revision {
				moved[h.Scope] = true
				if i := slices.IndexFunc(svc.opts.Checks, func(k Check) bool { return k.Name() == r.Name }); i >= 0 {
					rerun[i] = true
				}
			}
		}
	}
	if len(moved) == 0 {
		return Detection{Outcome: HeadsUnchanged}
	}
	d := Detection{Outcome: HeadsMoved, Moved: sortedScopes(moved)}
	for i, chk := range svc.opts.Checks {
		if !rerun[i] {
			continue
		}
		r, err := svc.runHook(ctx, chk, c)
		switch {
		case ctx.Err() != nil:
			return timedOut(d.Moved)
		case err != nil:
			// The check could not run: a person decides. A reason already
			// given (new issues) is kept: it says more.
			d.Outcome = ReviewNeeded
			if d.Reason == "" {
				d.Reason = CheckFailed
			}
		case len(r.Issues) > 0:
			d.Outcome, d.Reason, d.Issues = ReviewNeeded, NewIssues, append(d.Issues, r.Issues...)
		}
	}
	return d
}

func sortedScopes(set map[varplane.Scope]bool) []varplane.Scope {
	var out []varplane.Scope
	for sc := range set {
		out = append(out, sc)
	}
	slices.Sort(out)
	return out
}
