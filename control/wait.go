package control

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// Bounds of a wait (Service.Wait).
const (
	// MaxWait bounds how long one wait request holds: a longer wait (the
	// CLI's --timeout) asks again.
	MaxWait = time.Minute
	// MaxWaiting bounds the waits held at once by one Service; past it a
	// wait answers the progress at once without waiting.
	MaxWaiting = 64
	// WaitPoll is how often a held wait reads the statuses again.
	WaitPoll = 500 * time.Millisecond
	// MaxWaitRejections bounds the rejecting instances a progress names.
	MaxWaitRejections = 20
)

// WaitRequest asks how far generation Generation of Scope has reached.
type WaitRequest struct {
	Scope      varplane.Scope
	Generation varplane.Generation
	// Min is the share of the live instances (0 to 100 percent) that
	// must have installed it.
	Min float64
	// For is how long to hold until Min is met or a rejection is seen (at
	// most MaxWait; zero answers at once).
	For time.Duration
}

// WaitProgress is how far a generation has reached: of the Live instances
// that hold the scope (a fresh status listing it), Installed have
// installed that generation or a later one; Rejected name those that
// installed it as failed (they could not decode it).
type WaitProgress struct {
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation"`
	Live       int                 `json:"live"`
	Installed  int                 `json:"installed"`
	// Share is Installed of Live in percent (0 when no instance is live).
	Share float64 `json:"share"`
	Min   float64 `json:"min"`
	// Met is true when Share reaches Min with at least one live instance.
	Met      bool     `json:"met"`
	Rejected []string `json:"rejected"`
	// RejectedOmitted counts the rejecting instances past
	// MaxWaitRejections.
	RejectedOmitted int `json:"rejectedOmitted,omitempty"`
	// Unknown says why nothing can be counted (no instance reports to
	// this control plane).
	Unknown string `json:"unknown,omitempty"`
}

// Wait answers how far req.Generation of req.Scope has reached among the
// live instances, holding up to req.For (at most MaxWait) until the share
// reaches req.Min or an instance rejects it. It reads the instances'
// statuses (as propagation and the fleet view do), then counts again every
// WaitPoll from one read shared by every held wait; past MaxWaiting waits
// at once it answers without holding.
func (svc *Service) Wait(ctx context.Context, req WaitRequest) (*WaitProgress, error) {
	if _, err := varplane.ParseScope(string(req.Scope)); err != nil {
		return nil, err
	}
	if req.Generation == 0 {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "generation must be at least 1")
	}
	if math.IsNaN(req.Min) || req.Min < 0 || req.Min > 100 {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "min must be a share from 0 to 100 percent")
	}
	if req.For < 0 || req.For > MaxWait {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "a wait holds at most %v; ask again for longer", MaxWait)
	}
	hold := req.For > 0
	if hold {
		select {
		case svc.waits.slots <- struct{}{}:
			defer func() { <-svc.waits.slots }()
		default:
			hold = false
		}
	}
	if !hold {
		return svc.progress(ctx, req, svc.statuses)
	}
	deadline := time.NewTimer(req.For)
	defer deadline.Stop()
	// The first count reads the statuses as they are; the next ones share
	// the held waits' read.
	read := svc.statuses
	for {
		p, err := svc.progress(ctx, req, read)
		read = svc.waits.statuses
		if err != nil || p.Met || len(p.Rejected) > 0 || p.Unknown != "" {
			return p, err
		}
		t := time.NewTimer(WaitPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, varplane.Unavailable(ctx.Err())
		case <-deadline.C:
			t.Stop()
			return p, nil // the time is up: the progress as it stands
		case <-t.C:
		}
	}
}

// progress counts once, from the statuses read answers.
func (svc *Service) progress(ctx context.Context, req WaitRequest, read func(context.Context, time.Duration) ([]InstanceStatus, string, error)) (*WaitProgress, error) {
	p := &WaitProgress{Scope: req.Scope, Generation: req.Generation, Min: req.Min, Rejected: []string{}}
	statuses, unknown, err := read(ctx, StatusFresh)
	if err != nil {
		return nil, err
	}
	if unknown != "" {
		p.Unknown = unknown
		return p, nil
	}
	for _, s := range statuses {
		g, holds := s.Installed[req.Scope]
		fg, failed := s.Failed[req.Scope]
		if !holds && !failed {
			continue
		}
		p.Live++
		switch {
		case failed && fg >= req.Generation:
			if len(p.Rejected) < MaxWaitRejections {
				p.Rejected = append(p.Rejected, s.Instance)
			} else {
				p.RejectedOmitted++
			}
		case holds && g >= req.Generation:
			p.Installed++
		}
	}
	slices.Sort(p.Rejected)
	if p.Live > 0 {
		p.Share = 100 * float64(p.Installed) / float64(p.Live)
	}
	p.Met = p.Live > 0 && p.Share >= req.Min
	return p, nil
}

// waiters is what the held waits share: at most MaxWaiting of them at
// once (slots), and one read of the statuses per WaitPoll among them all,
// so that many waits on a large fleet cost what one does.
type waiters struct {
	svc   *Service
	slots chan struct{}

	mu      sync.Mutex
	readAt  time.Time // by the system clock: an age of the cache, not of a status
	list    []InstanceStatus
	unknown string
}

// statuses answers the statuses as svc.statuses does, read again only once
// the last read is WaitPoll old.
func (w *waiters) statuses(ctx context.Context, within time.Duration) ([]InstanceStatus, string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.readAt.IsZero() && time.Since(w.readAt) < WaitPoll {
		return w.list, w.unknown, nil
	}
	list, unknown, err := w.svc.statuses(ctx, within)
	if err != nil {
		return nil, "", err
	}
	w.readAt, w.list, w.unknown = time.Now(), list, unknown
	return list, unknown, nil
}

// Deletion protection.
const (
	// ReaderWindow is how recent an instance's status must be for a
	// deactivation to name it: the stores keep a status that long after
	// its last write (varplane.StatusLifetime), so an instance that
	// stopped within the hour is named as well as one running now.
	ReaderWindow = varplane.StatusLifetime
	// MaxReadersNamed bounds the instances a refusal names.
	MaxReadersNamed = 20
)

// ProtectDeactivation refuses, with confirmation-required naming them, a
// deactivation of scope while instances whose status is at most
// ReaderWindow old hold scope or a scope below it (installed, or installed
// as failed): a deactivation would take their document away. The refusal
// says how many of them are live (a status at most StatusFresh old) and
// names each with when it last said so ("pod-3 (live, 20 s ago)", "pod-9
// (12 min ago)"), the most recent first. It answers nil when none does, or
// when no instance reports to this control plane.
func (svc *Service) ProtectDeactivation(ctx context.Context, scope varplane.Scope) error {
	statuses, unknown, err := svc.statuses(ctx, ReaderWindow)
	if err != nil || unknown != "" {
		return err
	}
	statuses = slices.DeleteFunc(statuses, func(s InstanceStatus) bool { return !holdsUnder(s, scope) })
	if len(statuses) == 0 {
		return nil
	}
	now := svc.now()
	live := 0
	for _, s := range statuses {
		if now.Sub(s.At) <= StatusFresh {
			live++
		}
	}
	// The most recent first, so that a long list names the live ones.
	slices.SortStableFunc(statuses, func(a, b InstanceStatus) int { return b.At.Compare(a.At) })
	var names []string
	for _, s := range statuses[:min(len(statuses), MaxReadersNamed)] {
		names = append(names, fmt.Sprintf("%s (%s)", s.Instance, seenAgo(now.Sub(s.At))))
	}
	msg := fmt.Sprintf("%d instance(s) held %q or a scope below it in the last hour (%d live now; each with when it last said so): %s",
		len(statuses), scope, live, strings.Join(names, ", "))
	if len(statuses) > len(names) {
		msg += fmt.Sprintf(" and %d more", len(statuses)-len(names))
	}
	return varplane.Errorf(varplane.CodeConfirmationRequired, "%s; deactivating takes their document away: send the request again with force to go ahead", msg)
}

// seenAgo says when a status of age d was written: "live, 20 s ago" for
// a live one (at most StatusFresh old), "12 min ago" otherwise.
func seenAgo(d time.Duration) string {
	if d <= StatusFresh {
		return "live, " + agoUnit(d) + " ago"
	}
	return agoUnit(d) + " ago"
}

// agoUnit writes d (at least 0) in whole seconds under a minute, whole
// minutes under an hour, and whole hours past it.
func agoUnit(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	default:
		return fmt.Sprintf("%d h", int(d/time.Hour))
	}
}

// holdsUnder reports whether s installed scope or a scope below it.
func holdsUnder(s InstanceStatus, scope varplane.Scope) bool {
	for _, m := range []map[varplane.Scope]varplane.Generation{s.Installed, s.Failed} {
		for sc := range m {
			if sc == scope || sc.IsDescendantOf(scope) {
				return true
			}
		}
	}
	return false
}
