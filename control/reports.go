package control

import (
	"cmp"
	"context"
	"slices"

	"github.com/varplane/varplane"
)

// WindowReports is what the instances told of one change's canary window:
// the window as the change records it, every report filed for it, and the
// instances with a fresh status that have filed none (the ones a closed
// window still waits for).
type WindowReports struct {
	// Change is the change's id.
	Change string `json:"change"`
	// Window is the change's last window, as the window pass last decided
	// it (State and Reason are the record's, not a new evaluation).
	Window Window `json:"window"`
	// Reports are sorted by the instance id they were filed under.
	Reports []varplane.CanaryReportEntry `json:"reports"`
	// Unreported are the instances whose status is fresh now (StatusFresh)
	// and that no report names, sorted.
	Unreported []string `json:"unreported"`
}

// WindowReports returns the reports of c's canary window, judged by the
// rules Evaluate applies (doubts), and the fresh instances that have not
// reported: not-found when c never opened a window, store-unsupported
// when no instance reports to this control plane. The caller authorized
// reading c.
func (svc *Service) WindowReports(ctx context.Context, c *Change) (*WindowReports, error) {
	if c.Canary == nil {
		return nil, varplane.Errorf(varplane.CodeNotFound, "change %s has opened no canary window", c.ID)
	}
	if svc.opts.Instances == nil {
		return nil, varplane.Errorf(varplane.CodeStoreUnsupported, "no instances report to this control plane: canary windows are unavailable")
	}
	w := *c.Canary
	reports, err := svc.opts.Instances.Reports(ctx, w.ID)
	if err != nil {
		return nil, err
	}
	statuses, err := svc.opts.Instances.Statuses(ctx)
	if err != nil {
		return nil, err
	}
	// A store answers its reports in no order; the doubts of repeated
	// names depend on it, so sort first.
	reports = slices.Clone(reports)
	slices.SortStableFunc(reports, func(a, b varplane.CanaryReport) int {
		return cmp.Or(cmp.Compare(a.FiledAs, b.FiledAs), cmp.Compare(a.Instance, b.Instance))
	})
	out := &WindowReports{Change: c.ID, Window: w, Reports: make([]varplane.CanaryReportEntry, len(reports)), Unreported: []string{}}
	reports = judge(c, reports)
	for i, d := range doubts(w, reports) {
		r := reports[i]
		filed := r.FiledAs
		if filed == "" {
			filed = r.Instance
		}
		out.Reports[i] = varplane.CanaryReportEntry{Instance: r.Instance, FiledAs: filed, Window: r.Window, Decoded: r.Decoded, Errors: r.Errors,
			CandidateError: r.CandidateError, At: r.At, Doubtful: d != "", Doubt: d, Identity: r.Identity, Discount: r.Discount}
	}
	out.Unreported = append(out.Unreported, unreported(freshInstances(svc.now(), statuses), reports)...)
	slices.Sort(out.Unreported)
	return out, nil
}
