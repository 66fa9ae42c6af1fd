package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	// it, one window per scope: while another change's window is staged
	// on the scope it refuses with canary-window-open naming that change
	// (ErrCanaryWindowOpen, with Error.Change), atomically with staging.
	// Unstage removes it once the window closes, only while it is still
	// the window's.
	Stage(ctx context.Context, w Window, c *Change) error
	Unstage(ctx context.Context, w Window, c *Change) error
}

// InstanceStatus is one instance's heartbeat: the generation it has
// installed of each scope it serves, and when it wrote this.
type InstanceStatus struct {
	Instance  string                                 `json:"instance"`
	At        time.Time                              `json:"at"`
	Installed map[varplane.Scope]varplane.Generation `json:"installed"`
	// Labels are the instance's labels (a rollout's label steps select by
	// them); Serving the revision it serves of each scope where a rollout
	// selects it (instead of the installed head).
	Labels  map[string]string                    `json:"labels,omitempty"`
	Serving map[varplane.Scope]varplane.Revision `json:"serving,omitempty"`
	// Failed holds the generation of each scope the instance installed
	// as failed (it could not decode it: a rejection).
	Failed map[varplane.Scope]varplane.Generation `json:"failed,omitempty"`
	// Identity is the instance identity that filed the status over HTTP
	// (a Go SDK consumer, which takes part in no rollout); empty when an
	// instance cache wrote it to the store itself.
	Identity string `json:"identity,omitempty"`
}

// StatusFresh is how old a status may be and its instance still count as
// live (varplane.StatusFresh): propagation, waits, canary windows, rollout
// gates and the fleet's live flag count only those. The stores keep a
// status longer (varplane.StatusLifetime), for deletion protection.
const StatusFresh = varplane.StatusFresh

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

// ErrCanaryWindowOpen matches the refusal to open a second canary window
// on a scope (errors.Is): its *varplane.Error names the scope and, in
// Change, the change whose window holds it.
var ErrCanaryWindowOpen = &varplane.Error{Code: varplane.CodeCanaryWindowOpen}

// stageInSlot adds w's candidate (of change c) to the staged windows st,
// keeping one staging slot per scope, as the reference keeps one per
// document: instances never evaluate two candidates of one document at
// once. It reports whether st changed. A window of another change on c's
// scope refuses it with canary-window-open naming that change; an earlier
// window of c itself is over (c is opening another) and is replaced.
// Instances.Stage implementations call it inside their compare-and-set,
// so two changes opening at once cannot both take the slot.
func stageInSlot(st *varplane.StagedWindows, w Window, c *Change) (bool, error) {
	if slices.ContainsFunc(st.Windows, func(x varplane.StagedWindow) bool { return x.Window == w.ID }) {
		return false, nil
	}
	for _, x := range st.Windows {
		if x.Scope == c.Scope && x.Change != c.ID {
			return false, &varplane.Error{Code: varplane.CodeCanaryWindowOpen, Scope: c.Scope, Change: x.Change,
				Message: fmt.Sprintf("scope %q already has an open canary window (%s) of change %s: one window per scope at a time; wait for it to close, or withdraw or reject that change", c.Scope, x.Window, x.Change)}
		}
	}
	st.Windows = slices.DeleteFunc(st.Windows, func(x varplane.StagedWindow) bool { return x.Change == c.ID })
	st.Windows = append(st.Windows, varplane.StagedWindow{Window: w.ID, Change: c.ID, Scope: c.Scope,
		Revision: c.Revision, Base: c.Base, ClosesAt: w.ClosesAt})
	return true, nil
}

// OpenCanary opens a canary window on a checked (or approved) change: the
// candidate is staged where instances read it, and the window pass decides
// it. A scope has one staging slot: while another change's window is open
// on it, opening is refused with canary-window-open (ErrCanaryWindowOpen),
// naming that change, and nothing changes.
func (svc *Service) OpenCanary(ctx context.Context, by varplane.Identity, id string, d time.Duration, minInstances int) (*Change, error) {
	if svc.opts.Instances == nil {
		return nil, varplane.Errorf(varplane.CodeStoreUnsupported, "no instances report to this control plane: canary windows are unavailable")
	}
	if d <= 0 || d > MaxWindow || minInstances < 0 {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "a window needs a duration of up to %v and minInstances >= 0", MaxWindow)
	}
	staged := false
	c, err := svc.transition(ctx, id, "canary", func(c *Change, _ Policy, _ bool) error {
		// An approved change may still need a window: a policy that asks
		// for one since it was approved decides when it publishes.
		if c.State != StateChecked && c.State != StateApproved {
			return stateError(c, "open a canary window")
		}
		now := svc.now()
		w := Window{ID: fmt.Sprintf("%s-%d", c.ID, c.Version+1), Duration: d, MinInstances: minInstances, OpenedAt: now, ClosesAt: now.Add(d), State: WindowOpen}
		if err := svc.stage(ctx, w, c); err != nil {
			return err
		}
		staged = true
		c.Canary = &w
		c.move(StateCanary, by.ID, now, fmt.Sprintf("window %s for %v", w.ID, d))
		return nil
	})
	if err != nil && staged {
		// The candidate is staged where instances read it: not "nothing
		// changed". Opening again stages nothing twice and records it.
		return nil, varplane.AfterCommit(err, "the canary window was staged and the store then failed before the change recorded it; "+
			"read the change, or open its canary window again to finish")
	}
	return c, err
}

// stage stages w's candidate of c. When the slot of c's scope is held by
// a staged window that its change no longer has open (the change's record
// moved past the version that would have recorded the window, without it:
// a transition whose record write lost its compare-and-set after staging,
// or an unstage that failed), that stale entry is removed and staging is
// tried once more; a window still being opened (its change's record not
// yet written) is left alone.
func (svc *Service) stage(ctx context.Context, w Window, c *Change) error {
	err := svc.opts.Instances.Stage(ctx, w, c)
	var held *varplane.Error
	if !errors.As(err, &held) || held.Code != varplane.CodeCanaryWindowOpen || held.Change == "" {
		return err
	}
	holder, lerr := svc.load(ctx, held.Change)
	if lerr != nil && !errors.Is(lerr, errNoRecord) {
		return lerr
	}
	stale, window := svc.staleSlot(ctx, held.Change, holder)
	if !stale {
		return err
	}
	if holder == nil {
		holder = &Change{ID: held.Change}
	}
	if uerr := svc.opts.Instances.Unstage(ctx, Window{ID: window}, holder); uerr != nil {
		return uerr
	}
	return svc.opts.Instances.Stage(ctx, w, c)
}

// staleSlot reports whether the staged window of change id (whose record
// is holder, nil when there is none) on its scope is stale, and which
// window that is. A window's id is "<change>-<version>", the version its
// change's record takes when it records the window.
func (svc *Service) staleSlot(ctx context.Context, id string, holder *Change) (bool, string) {
	var st varplane.StagedWindows
	if _, _, err := readRecord(ctx, svc.store, varplane.StagedScope, &st); err != nil {
		return false, ""
	}
	for _, x := range st.Windows {
		if x.Change != id {
			continue
		}
		if holder == nil {
			return true, x.Window
		}
		if holder.State == StateCanary && holder.Canary != nil && holder.Canary.ID == x.Window && holder.Canary.State == WindowOpen {
			return false, ""
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(x.Window, id+"-"), 10, 64)
		if err == nil && varplane.Generation(v) <= holder.Version {
			return true, x.Window
		}
	}
	return false, ""
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
			to := StateChecked
			if countedApprovals(c, pol, has) >= neededApprovals(pol, has) {
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
