package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/varplane/varplane"
)

// ErrNoHeartbeats is what StoreInstances answers on a store that keeps no
// instance heartbeats (a Store of another module): no instance can
// report to this control plane. Propagation says so rather than counting
// 0 of 0, and a canary window cannot open.
var ErrNoHeartbeats = varplane.Errorf(varplane.CodeStoreUnsupported, "this store keeps no instance heartbeats or canary reports: no instance reports to this control plane")

// StoreInstances is the Instances of the store of record under e: the
// statuses are the instances' heartbeats (HeartbeatStore), the reports
// theirs (ReportReader), and the candidates of open windows are staged in
// the reserved scope varplane.StagedScope, which every instance reads.
// On a store that implements neither, Statuses and Reports answer
// ErrNoHeartbeats and Stage refuses with it.
func StoreInstances(e *varplane.Engine) Instances {
	si := &storeInstances{engine: e, store: e.Store()}
	if hs, ok := varplane.StoreAs[varplane.StatusReader](e.Store()); ok {
		si.heartbeats = hs
	}
	if rr, ok := varplane.StoreAs[varplane.ReportReader](e.Store()); ok {
		si.reports = rr
	}
	return si
}

type storeInstances struct {
	engine     *varplane.Engine
	store      varplane.Store
	heartbeats varplane.StatusReader
	reports    varplane.ReportReader
}

// Statuses decodes every instance's heartbeat; a value that does not
// decode counts as no status (it is not fresh). A failed document is not
// counted as installed.
func (si *storeInstances) Statuses(ctx context.Context) ([]InstanceStatus, error) {
	if si.heartbeats == nil {
		return nil, ErrNoHeartbeats
	}
	raw, err := si.heartbeats.InstanceStatuses(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]InstanceStatus, 0, len(raw))
	for id, b := range raw {
		var st varplane.InstanceStatus
		if json.Unmarshal(b, &st) != nil {
			continue
		}
		is := InstanceStatus{Instance: id, At: st.WrittenAt, Installed: map[varplane.Scope]varplane.Generation{}, Labels: st.Labels, Identity: st.Identity}
		for _, d := range st.Documents {
			if !d.Failed && d.Revision != "" {
				is.Installed[d.Scope] = d.Generation
			}
			if d.Failed {
				if is.Failed == nil {
					is.Failed = map[varplane.Scope]varplane.Generation{}
				}
				is.Failed[d.Scope] = d.Generation
			}
			if d.Rollout != "" && d.Serving != "" {
				if is.Serving == nil {
					is.Serving = map[varplane.Scope]varplane.Revision{}
				}
				is.Serving[d.Scope] = d.Serving
			}
		}
		out = append(out, is)
	}
	slices.SortFunc(out, func(a, b InstanceStatus) int {
		if a.Instance < b.Instance {
			return -1
		}
		if a.Instance > b.Instance {
			return 1
		}
		return 0
	})
	return out, nil
}

// Reports decodes the reports of window, each marked with the id it was
// filed under. A value that does not decode is a report with a negative
// count, so Evaluate keeps the window open (doubtful).
func (si *storeInstances) Reports(ctx context.Context, window string) ([]varplane.CanaryReport, error) {
	if si.reports == nil {
		return nil, ErrNoHeartbeats
	}
	raw, err := si.reports.CanaryReports(ctx, window)
	if err != nil {
		return nil, err
	}
	out := make([]varplane.CanaryReport, 0, len(raw))
	for id, b := range raw {
		var r varplane.CanaryReport
		if json.Unmarshal(b, &r) != nil {
			r = varplane.CanaryReport{Window: window, Instance: id, Decoded: -1}
		}
		r.FiledAs = id
		out = append(out, r)
	}
	return out, nil
}

// Stage adds w's candidate to the staged record (a compare-and-set,
// retried when another window moved it meanwhile), one window per scope
// (stageInSlot: canary-window-open while another change's is staged).
func (si *storeInstances) Stage(ctx context.Context, w Window, c *Change) error {
	if si.heartbeats == nil || si.reports == nil {
		return ErrNoHeartbeats
	}
	var refused error
	err := si.updateStaged(ctx, "stage "+w.ID, func(st *varplane.StagedWindows) bool {
		changed, err := stageInSlot(st, w, c)
		refused = err
		return changed
	})
	if refused != nil {
		return refused
	}
	return err
}

// Unstage removes w's candidate, only when the staged entry is still w's.
func (si *storeInstances) Unstage(ctx context.Context, w Window, c *Change) error {
	return si.updateStaged(ctx, "unstage "+w.ID, func(st *varplane.StagedWindows) bool {
		n := len(st.Windows)
		st.Windows = slices.DeleteFunc(st.Windows, func(x varplane.StagedWindow) bool { return x.Window == w.ID && x.Change == c.ID })
		return len(st.Windows) != n
	})
}

// updateStaged applies fn to the staged record and writes it when fn
// changed it, guarded by the record's version; a lost race reads again.
func (si *storeInstances) updateStaged(ctx context.Context, reason string, fn func(*varplane.StagedWindows) bool) error {
	for attempt := 0; ; attempt++ {
		var st varplane.StagedWindows
		version, _, err := readRecord(ctx, si.store, varplane.StagedScope, &st)
		if err != nil {
			return err
		}
		if !fn(&st) {
			return nil
		}
		if st.Windows == nil {
			st.Windows = []varplane.StagedWindow{}
		}
		_, err = writeRecord(ctx, si.engine, varplane.StagedScope, version, &st, "varplane:control", reason)
		if err == nil || !errors.Is(err, varplane.ErrConflict) || attempt >= 8 {
			if err != nil {
				return fmt.Errorf("control: %s: %w", reason, err)
			}
			return nil
		}
	}
}
