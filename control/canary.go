package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/varplane/varplane"
)

// Instances is what the workflow needs of the data-plane instances: their
// statuses (for propagation and canary windows) and their canary reports.
// The instances issue implements it over the store; tests implement it in
// process.
type Instances interface {
	// Statuses returns the status every instance last wrote.
	Statuses(ctx context.Context) ([]InstanceStatus, error)
	// Reports returns the reports written on window, one per instance
	// that reported (the latest write of each).
	Reports(ctx context.Context, window string) ([]varplane.CanaryReport, error)
	// Stage puts the candidate of an opened window where instances read
	// it; Unstage removes it once the window closes, only while it is
	// still the window's.
	Stage(ctx context.Context, w Window, c *Change) error
	Unstage(ctx context.Context, w Window, c *Change) error
}

// InstanceStatus is one instance's heartbeat: the generation it has
// installed of each scope it serves, and when it wrote this.
type InstanceStatus struct {
	Instance  string                                 `json:"instance"`
	At        time.Time                              `json:"at"`
	Installed map[varplane.Scope]varplane.Generation `json:"installed"`
}

// StatusFresh is how old a status may be and still count.
const StatusFresh = time.Minute

// The states of a canary window.
const (
	WindowOpen    = "open"
	WindowPassed  = "passed"
	WindowBlocked = "blocked"
)

// Window is a change's canary window.
type Window struct {
	ID           string        `json:"id"`
	Duration     time.Duration `json:"duration"`
	MinInstances int           `json:"minInstances"`
	OpenedAt     time.Time     `json:"openedAt"`
	ClosesAt     time.Time     `json:"closesAt"`
	State        string        `json:"state"`
	// Reason says why the window is still open, or what blocked it.
	Reason string `json:"reason,omitempty"`
}

func (w *Window) passed() bool { return w != nil && w.State == WindowPassed }

// MaxWindow bounds a canary window's duration.
const MaxWindow = 7 * 24 * time.Hour

// CanaryLease is the lease the window pass runs under, so one replica at a
// time closes windows.
const CanaryLease = "control:canary-windows"

// Evaluate decides a window at now from the instances' statuses and its
// reports: blocked by any candidate error; open while it runs, while fewer
// than MinInstances instances have a fresh status and a report that counts
// (no Discount: see judge), while one of them has
// not reported, or while a report is doubtful (it names another window or
// instance than where it was found, or carries a negative count); passed
// otherwise.
func Evaluate(w Window, now time.Time, statuses []InstanceStatus, reports []varplane.CanaryReport) (state, reason string) {
	for _, d := range doubts(w, reports) {
		if d != "" {
			return WindowOpen, d
		}
	}
	for _, r := range reports {
		if r.CandidateError != "" {
			return WindowBlocked, fmt.Sprintf("instance %q: the candidate failed", r.Instance)
		}
	}
	if now.Before(w.ClosesAt) {
		return WindowOpen, "the window is running"
	}
	fresh := freshInstances(now, statuses)
	if missing := unreported(fresh, reports); len(missing) > 0 {
		return WindowOpen, fmt.Sprintf("instance %q has a fresh status but no report", missing[0])
	}
	if n := counted(fresh, reports); n < w.MinInstances {
		return WindowOpen, fmt.Sprintf("%d of %d instances have a fresh status and a report that counts", n, w.MinInstances)
	}
	return WindowPassed, ""
}

// doubts returns, for each of reports (found on window w), why it is
// doubtful, or "" when it is not: it names another window than w, carries
// a negative count, was filed under one instance but names another, names
// no instance, or repeats an instance an earlier report named. Evaluate
// keeps a window open while any report is doubtful; the reports route
// shows each one's reason.
func doubts(w Window, reports []varplane.CanaryReport) []string {
	out := make([]string, len(reports))
	seen := make(map[string]bool, len(reports))
	for i, r := range reports {
		switch {
		case r.Window != w.ID:
			out[i] = fmt.Sprintf("a report found on window %s names window %q", w.ID, r.Window)
		case r.Decoded < 0 || r.Errors < 0:
			out[i] = fmt.Sprintf("the report of instance %q carries a negative count", r.Instance)
		case r.FiledAs != "" && r.FiledAs != r.Instance:
			out[i] = fmt.Sprintf("a report filed under instance %q names instance %q", r.FiledAs, r.Instance)
		case seen[r.Instance] || r.Instance == "":
			out[i] = fmt.Sprintf("instance %q reported twice or under no name", r.Instance)
		}
		// A doubtful report still claims its name, as Evaluate always
		// judged: a later one under the same name is doubtful too.
		seen[r.Instance] = true
	}
	return out
}

// freshInstances returns the instances whose status is at most StatusFresh
// old at now, in the order of statuses: the ones a window waits for.
func freshInstances(now time.Time, statuses []InstanceStatus) []string {
	var out []string
	for _, s := range statuses {
		if now.Sub(s.At) <= StatusFresh {
			out = append(out, s.Instance)
		}
	}
	return out
}

// unreported returns the instances of fresh that no report names.
func unreported(fresh []string, reports []varplane.CanaryReport) []string {
	named := make(map[string]bool, len(reports))
	for _, r := range reports {
		named[r.Instance] = true
	}
	var out []string
	for _, id := range fresh {
		if !named[id] {
			out = append(out, id)
		}
	}
	return out
}

// OpenCanary opens a canary window on a checked change: the candidate is
// staged where instances read it, and the window pass decides it.
func (svc *Service) OpenCanary(ctx context.Context, by varplane.Identity, id string, d time.Duration, minInstances int) (*Change, error) {
	if svc.opts.Instances == nil {
		return nil, varplane.Errorf(varplane.CodeStoreUnsupported, "no instances report to this control plane: canary windows are unavailable")
	}
	if d <= 0 || d > MaxWindow || minInstances < 0 {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "a window needs a duration of up to %v and minInstances >= 0", MaxWindow)
	}
	return svc.transition(ctx, id, "canary", func(c *Change, _ Policy, _ bool) error {
		if c.State != StateChecked {
			return stateError(c, "open a canary window")
		}
		now := svc.now()
		w := Window{ID: fmt.Sprintf("%s-%d", c.ID, c.Version+1), Duration: d, MinInstances: minInstances, OpenedAt: now, ClosesAt: now.Add(d), State: WindowOpen}
		if err := svc.opts.Instances.Stage(ctx, w, c); err != nil {
			return err
		}
		c.Canary = &w
		c.move(StateCanary, by.ID, now, fmt.Sprintf("window %s for %v", w.ID, d))
		return nil
	})
}

// CanaryPass decides every open window once, under CanaryLease held by
// holder: a passed window returns its change to checked (approved when it
// already has its approvals), a blocked one fails it. A pass the lease
// keeps from running returns nil and does nothing.
func (svc *Service) CanaryPass(ctx context.Context, holder string) error {
	if svc.opts.Instances == nil {
		return nil
	}
	if err := svc.store.AcquireLease(ctx, CanaryLease, holder, time.Minute); err != nil {
		if errors.Is(err, varplane.ErrLeaseHeld) {
			return nil
		}
		return err
	}
	defer func() { _ = svc.store.ReleaseLease(context.WithoutCancel(ctx), CanaryLease, holder) }()
	statuses, err := svc.opts.Instances.Statuses(ctx)
	if errors.Is(err, ErrNoHeartbeats) {
		return nil // no window can open on this store (Stage refuses)
	}
	if err != nil {
		return err
	}
	return svc.each(ctx, func(c *Change) error {
		if c.State != StateCanary || c.Canary == nil {
			return nil
		}
		reports, err := svc.opts.Instances.Reports(ctx, c.Canary.ID)
		if err != nil {
			return err
		}
		state, reason := Evaluate(*c.Canary, svc.now(), statuses, judge(c, reports))
		if state == c.Canary.State && reason == c.Canary.Reason {
			return nil
		}
		pol, has, err := svc.PolicyFor(ctx, c.Scope)
		if err != nil {
			return err
		}
		version := c.Version
		w := *c.Canary
		w.State, w.Reason = state, reason
		c.Canary = &w
		switch state {
		case WindowPassed:
			need := 1
			if has {
				need = pol.Approvals
			}
			to := StateChecked
			if len(c.Approvals) >= need {
				to = StateApproved
			}
			c.move(to, holder, svc.now(), "canary passed")
		case WindowBlocked:
			c.move(StateFailed, holder, svc.now(), reason)
		}
		if state != WindowOpen {
			if err := svc.opts.Instances.Unstage(ctx, w, c); err != nil {
				return err
			}
		}
		if err := svc.save(ctx, c, version, "canary "+state); err != nil && !errors.Is(err, varplane.ErrConflict) {
			return err
		}
		return nil
	})
}
