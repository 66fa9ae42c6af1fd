package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/varplane/varplane"
)

// The bounds of one fleet page (Service.Fleet): every figure of a page is
// read by the request that asks for it, so each kind of read is bounded.
const (
	// DefaultFleetLimit and MaxFleetLimit bound the instances of a page.
	DefaultFleetLimit = 50
	MaxFleetLimit     = 200
	// MaxFleetHeads bounds the heads one page reads for the lag: entries
	// of further scopes carry no head figures (FleetScope.Head is 0).
	MaxFleetHeads = 256
	// MaxFleetWindows bounds the open canary windows whose reports one page
	// reads (the earliest to close first); FleetPage.WindowsOmitted counts
	// the others.
	MaxFleetWindows = 32
	// MaxFleetLabels bounds the labels shown per instance (by key order).
	MaxFleetLabels = 32
	// MaxFleetScopes bounds the scopes shown per instance (in scope order;
	// FleetInstance.ScopesOmitted counts the rest): an instance cache may
	// hold thousands. The scope route shows any one of them.
	MaxFleetScopes = 100
	// MaxFleetAuthorized bounds the distinct scopes one page asks the
	// authorizer about; entries of further scopes are counted in
	// ScopesOmitted, never shown unasked.
	MaxFleetAuthorized = 4096
)

// FleetQuery asks for one page of the fleet view.
type FleetQuery struct {
	// Scope, when set, narrows every instance to its entry of Scope (and
	// the reports to Scope's window); every instance is still listed,
	// since each is one that could install it.
	Scope varplane.Scope
	// After is the cursor: the page starts past this instance id.
	After string
	// Limit is the page's size (DefaultFleetLimit when 0, at most
	// MaxFleetLimit).
	Limit int
	// May says whether the caller may see scope; an instance's entries,
	// reports and rejections of a scope it may not see are left out, and
	// its root is shown only when it may. Nil: every scope.
	May func(varplane.Scope) (bool, error)
}

// FleetPage is one page of the fleet: the instances in id order.
type FleetPage struct {
	// AsOf is when the page was read: the ages and lags count to it.
	AsOf time.Time `json:"asOf"`
	// FreshSeconds is how old a status may be and count as live
	// (StatusFresh): propagation and canary windows count only those.
	FreshSeconds float64         `json:"freshSeconds"`
	Instances    []FleetInstance `json:"instances"`
	// Next is the cursor of the next page ("" when this is the last).
	Next string `json:"next,omitempty"`
	// WindowsOmitted counts the open windows past MaxFleetWindows whose
	// reports this page did not read.
	WindowsOmitted int `json:"windowsOmitted,omitempty"`
	// Unknown is set, with why, when no instance can report to this
	// control plane (as for Propagation): the list is then not empty but
	// unknown.
	Unknown string `json:"unknown,omitempty"`
}

// FleetInstance is one instance as its last status and reports show it.
type FleetInstance struct {
	Instance string `json:"instance"`
	// Live is true when the status is at most FreshSeconds old. An
	// instance last seen longer ago (the stores keep a status an hour,
	// varplane.StatusLifetime) is listed with Live false and its age, and
	// counts toward nothing live.
	Live bool `json:"live"`
	// LastStatus is when its status was written; AgeSeconds its age at
	// AsOf.
	LastStatus time.Time `json:"lastStatus"`
	AgeSeconds float64   `json:"ageSeconds"`
	Ready      bool      `json:"ready"`
	// Identity is the instance identity that filed the status over HTTP
	// (empty: the instance wrote it to the store itself).
	Identity string            `json:"identity,omitempty"`
	Root     varplane.Scope    `json:"root,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Scopes are its installed documents the caller may see, by scope,
	// at most MaxFleetScopes. ScopesOmitted counts those it may see past
	// MaxFleetScopes, and those past the page's MaxFleetAuthorized (never
	// those it may not see).
	Scopes        []FleetScope `json:"scopes"`
	ScopesOmitted int          `json:"scopesOmitted,omitempty"`
	// LastReport is its latest canary report among the windows read.
	LastReport *FleetReport `json:"lastReport,omitempty"`
	// Rejections are the documents it installed as failed and the
	// candidates it reported errors for.
	Rejections []FleetRejection `json:"rejections"`
}

// FleetScope is one installed document of an instance, beside the head.
type FleetScope struct {
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation"`
	Revision   varplane.Revision   `json:"revision,omitempty"`
	// Failed: the instance could not decode it (a rejection) and answers
	// document-failed for the scope.
	Failed bool `json:"failed,omitempty"`
	// ConfirmedLagSeconds is the instance's own figure: how long since the
	// store last confirmed what it holds.
	ConfirmedLagSeconds float64 `json:"confirmedLagSeconds"`
	// Head is the scope's current generation (0: not read, past
	// MaxFleetHeads); Behind how many generations the installed one is
	// behind it; BehindSeconds, when it is behind an active head, how long
	// ago that head was published.
	Head          varplane.Generation `json:"head,omitempty"`
	Behind        uint64              `json:"behind"`
	BehindSeconds float64             `json:"behindSeconds,omitempty"`
	// Rollout and Serving are set while the instance serves a rollout's
	// revision of the scope instead of the installed one (docs/rollouts.md).
	Rollout string            `json:"rollout,omitempty"`
	Serving varplane.Revision `json:"serving,omitempty"`
}

// FleetReport is an instance's report of one open canary window.
type FleetReport struct {
	Window         string         `json:"window"`
	Change         string         `json:"change"`
	Scope          varplane.Scope `json:"scope"`
	Decoded        int64          `json:"decoded"`
	Errors         int64          `json:"errors"`
	CandidateError string         `json:"candidateError,omitempty"`
	At             time.Time      `json:"at"`
}

// The kinds of FleetRejection.
const (
	// RejectionDecode is a document the instance installed as failed.
	RejectionDecode = "decode"
	// RejectionCandidate is a canary candidate the instance reported
	// errors for.
	RejectionCandidate = "candidate"
)

// FleetRejection is one document an instance refused.
type FleetRejection struct {
	Kind       string              `json:"kind"`
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation,omitempty"`
	Revision   varplane.Revision   `json:"revision,omitempty"`
	Window     string              `json:"window,omitempty"`
	Change     string              `json:"change,omitempty"`
	Errors     int64               `json:"errors,omitempty"`
	Error      string              `json:"error,omitempty"`
}

// Fleet reads one page of the instances that report to this control plane
// (their statuses in the store of record, StatusPager) with what each has
// installed, how far behind the heads it is, its latest canary report and
// its rejections. It reads at most one page of statuses, MaxFleetHeads
// heads (the store's State, never a revision) and the reports of
// MaxFleetWindows open windows. Without Options.Instances, or on a store
// that keeps no heartbeats, the page is empty and Unknown says why.
func (svc *Service) Fleet(ctx context.Context, q FleetQuery) (*FleetPage, error) {
	now := svc.now()
	page := &FleetPage{AsOf: now, FreshSeconds: StatusFresh.Seconds(), Instances: []FleetInstance{}}
	if svc.opts.Instances == nil {
		page.Unknown = "no instance reports to this control plane"
		return page, nil
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultFleetLimit
	}
	limit = min(limit, MaxFleetLimit)
	raw, next, err := svc.statusPage(ctx, q.After, limit)
	if errors.Is(err, ErrNoHeartbeats) {
		page.Unknown = varplane.ErrorMessage(err)
		return page, nil
	}
	if err != nil {
		return nil, err
	}
	page.Next = next
	f := &fleetReader{svc: svc, q: q, now: now, may: map[varplane.Scope]bool{}, heads: map[varplane.Scope]*varplane.ScopeState{}}
	for _, v := range raw {
		var st varplane.InstanceStatus
		if json.Unmarshal(v.Value, &st) != nil {
			continue // not a status: not an instance (as for propagation)
		}
		in, err := f.instance(ctx, v.ID, &st)
		if err != nil {
			return nil, err
		}
		page.Instances = append(page.Instances, in)
	}
	if err := f.reports(ctx, page); err != nil {
		return nil, err
	}
	return page, nil
}

// statusPage reads a page of statuses from the store of record: through
// its StatusPager, or, on a store of another module that only reads them
// all, by cutting the page from all of them.
func (svc *Service) statusPage(ctx context.Context, after string, limit int) ([]varplane.StatusValue, string, error) {
	if p, ok := varplane.StoreAs[varplane.StatusPager](svc.store); ok {
		return p.InstanceStatusPage(ctx, after, limit)
	}
	r, ok := varplane.StoreAs[varplane.StatusReader](svc.store)
	if !ok {
		return nil, "", ErrNoHeartbeats
	}
	all, err := r.InstanceStatuses(ctx)
	if err != nil {
		return nil, "", err
	}
	ids := slices.Sorted(maps.Keys(all))
	ids = slices.DeleteFunc(ids, func(id string) bool { return id <= after })
	next := ""
	if len(ids) > limit {
		ids, next = ids[:limit], ids[limit-1]
	}
	out := make([]varplane.StatusValue, len(ids))
	for i, id := range ids {
		out[i] = varplane.StatusValue{ID: id, Value: all[id]}
	}
	return out, next, nil
}

// fleetReader builds one page, remembering per scope what it decided and
// read so that each scope is authorized and its head read once.
type fleetReader struct {
	svc   *Service
	q     FleetQuery
	now   time.Time
	may   map[varplane.Scope]bool
	heads map[varplane.Scope]*varplane.ScopeState // nil value: not read (bound reached)
}

// errUnasked is visible's answer past MaxFleetAuthorized: the scope was
// not asked about, so it is not shown.
var errUnasked = errors.New("control: past the fleet page's authorizations")

// visible reports whether the caller may see scope (and, with a Scope
// query, whether it is that scope); errUnasked past MaxFleetAuthorized.
func (f *fleetReader) visible(scope varplane.Scope) (bool, error) {
	if f.q.Scope != "" && scope != f.q.Scope {
		return false, nil
	}
	if ok, seen := f.may[scope]; seen {
		return ok, nil
	}
	if len(f.may) >= MaxFleetAuthorized {
		return false, errUnasked
	}
	ok := true
	if f.q.May != nil {
		var err error
		if ok, err = f.q.May(scope); err != nil {
			return false, err
		}
	}
	f.may[scope] = ok
	return ok, nil
}

// head returns scope's state, read at most once, nil past MaxFleetHeads.
func (f *fleetReader) head(ctx context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	if st, seen := f.heads[scope]; seen {
		return st, nil
	}
	if len(f.heads) >= MaxFleetHeads {
		return nil, nil
	}
	st, err := f.svc.store.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	f.heads[scope] = st
	return st, nil
}

func (f *fleetReader) instance(ctx context.Context, id string, st *varplane.InstanceStatus) (FleetInstance, error) {
	age := f.now.Sub(st.WrittenAt)
	in := FleetInstance{Instance: id, Live: age <= StatusFresh, LastStatus: st.WrittenAt.UTC(), AgeSeconds: max(age.Seconds(), 0),
		Ready: st.Ready, Identity: st.Identity, Labels: fleetLabels(st.Labels), Scopes: []FleetScope{}, Rejections: []FleetRejection{}}
	if st.Root != "" && f.q.Scope == "" {
		ok, err := f.visible(st.Root)
		if err != nil && !errors.Is(err, errUnasked) {
			return in, err
		}
		if ok {
			in.Root = st.Root
		}
	}
	docs := slices.Clone(st.Documents)
	slices.SortStableFunc(docs, func(a, b varplane.InstanceDocument) int { return cmp.Compare(a.Scope, b.Scope) })
	for i, d := range docs {
		if i > 0 && docs[i-1].Scope == d.Scope {
			continue // a scope listed twice counts once, as the first
		}
		ok, err := f.visible(d.Scope)
		if errors.Is(err, errUnasked) {
			in.ScopesOmitted++
			continue
		}
		if err != nil {
			return in, err
		}
		if !ok {
			continue
		}
		if len(in.Scopes) >= MaxFleetScopes {
			in.ScopesOmitted++
			continue
		}
		fs := FleetScope{Scope: d.Scope, Generation: d.Generation, Revision: d.Revision, Failed: d.Failed, ConfirmedLagSeconds: d.LagSeconds,
			Rollout: d.Rollout, Serving: d.Serving}
		hs, err := f.head(ctx, d.Scope)
		if err != nil {
			return in, err
		}
		if hs != nil {
			fs.Head = hs.Generation
			if hs.Generation > d.Generation {
				fs.Behind = uint64(hs.Generation - d.Generation)
				if hs.Head != nil {
					fs.BehindSeconds = max(f.now.Sub(hs.Head.EffectiveAt).Seconds(), 0)
				}
			}
		}
		in.Scopes = append(in.Scopes, fs)
		if d.Failed {
			in.Rejections = append(in.Rejections, FleetRejection{Kind: RejectionDecode, Scope: d.Scope, Generation: d.Generation, Revision: d.Revision})
		}
	}
	return in, nil
}

// reports reads the reports of the open windows the caller may see (at
// most MaxFleetWindows, the earliest to close first) and gives each
// instance of page its latest one and its candidate rejections.
func (f *fleetReader) reports(ctx context.Context, page *FleetPage) error {
	if len(page.Instances) == 0 {
		return nil
	}
	var staged varplane.StagedWindows
	if _, _, err := readRecord(ctx, f.svc.store, varplane.StagedScope, &staged); err != nil {
		return err
	}
	var windows []varplane.StagedWindow
	for _, w := range staged.Windows {
		ok, err := f.visible(w.Scope)
		if errors.Is(err, errUnasked) {
			page.WindowsOmitted++
			continue
		}
		if err != nil {
			return err
		}
		if ok {
			windows = append(windows, w)
		}
	}
	slices.SortStableFunc(windows, func(a, b varplane.StagedWindow) int { return a.ClosesAt.Compare(b.ClosesAt) })
	if len(windows) > MaxFleetWindows {
		page.WindowsOmitted = len(windows) - MaxFleetWindows
		windows = windows[:MaxFleetWindows]
	}
	at := make(map[string]int, len(page.Instances))
	for i, in := range page.Instances {
		at[in.Instance] = i
	}
	for _, w := range windows {
		reports, err := f.svc.opts.Instances.Reports(ctx, w.Window)
		if errors.Is(err, ErrNoHeartbeats) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, r := range reports {
			i, ok := at[r.FiledAs]
			if !ok {
				continue
			}
			in := &page.Instances[i]
			fr := &FleetReport{Window: w.Window, Change: w.Change, Scope: w.Scope, Decoded: r.Decoded, Errors: r.Errors, CandidateError: r.CandidateError, At: r.At.UTC()}
			if in.LastReport == nil || fr.At.After(in.LastReport.At) {
				in.LastReport = fr
			}
			if r.Errors > 0 || r.CandidateError != "" {
				in.Rejections = append(in.Rejections, FleetRejection{Kind: RejectionCandidate, Scope: w.Scope, Revision: w.Revision,
					Window: w.Window, Change: w.Change, Errors: r.Errors, Error: r.CandidateError})
			}
		}
	}
	return nil
}

// fleetLabels is labels cut to the MaxFleetLabels first keys.
func fleetLabels(labels map[string]string) map[string]string {
	if len(labels) <= MaxFleetLabels {
		return labels
	}
	out := make(map[string]string, MaxFleetLabels)
	for _, k := range slices.Sorted(maps.Keys(labels))[:MaxFleetLabels] {
		out[k] = labels[k]
	}
	return out
}
