// Package controltest holds test doubles of the control API's
// dependencies for the packages that test against a control plane
// (client, ui): an in-process control.Instances whose statuses and
// reports the test sets.
package controltest

import (
	"context"
	"slices"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// Instances is an in-process control.Instances: the statuses and reports
// are what the test set last, and Stage and Unstage only record which
// windows are staged. It is safe for concurrent use (a console's request
// and the test read and write it at once).
type Instances struct {
	mu       sync.Mutex
	statuses []control.InstanceStatus
	reports  map[string][]varplane.CanaryReport
	staged   map[string]bool
}

// SetStatuses replaces every instance's status.
func (in *Instances) SetStatuses(st ...control.InstanceStatus) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.statuses = slices.Clone(st)
}

// SetReports replaces the reports of window.
func (in *Instances) SetReports(window string, rs ...varplane.CanaryReport) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.reports == nil {
		in.reports = map[string][]varplane.CanaryReport{}
	}
	in.reports[window] = slices.Clone(rs)
}

// Staged reports whether window's candidate is staged.
func (in *Instances) Staged(window string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.staged[window]
}

// Statuses returns the statuses set last.
func (in *Instances) Statuses(context.Context) ([]control.InstanceStatus, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.statuses), nil
}

// Reports returns the reports set last for window.
func (in *Instances) Reports(_ context.Context, window string) ([]varplane.CanaryReport, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.reports[window]), nil
}

// Stage records w as staged.
func (in *Instances) Stage(_ context.Context, w control.Window, _ *control.Change) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.staged == nil {
		in.staged = map[string]bool{}
	}
	in.staged[w.ID] = true
	return nil
}

// Unstage records w as no longer staged.
func (in *Instances) Unstage(_ context.Context, w control.Window, _ *control.Change) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.staged, w.ID)
	return nil
}
