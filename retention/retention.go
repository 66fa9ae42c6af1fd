// Package retention keeps each scope's revision history bounded (seed 002,
// "Reclaiming revisions"): a pass, every Interval and first after one
// interval, reclaims the revision bodies a scope no longer needs, under a
// lease per scope ("reclaim:<scope>") so that one replica at a time does
// each scope.
//
// Per scope a pass keeps the head, the RetainCount most recently created
// revisions and every revision younger than RetainMinAge, and reclaims the
// others, whether or not they were ever activated: a revision created and
// waiting for its activation (the two-step flow, create now and activate
// after review) is a revision like any other. An orphan is something else:
// a revision record whose commit did not complete, so that no
// revision-created event names it (a store whose records can be written
// apart from their commit lists them: varplane.RecordLister); it is reclaimed once
// older than OrphanAge whatever its rank. A pass never reclaims a revision
// an open change rests on (InUse), and when the open changes cannot be read
// it reclaims nothing that pass. Reclamation removes bodies only: the events
// stay, so the audit history is whole, and a reclaimed revision answers
// revision-reclaimed (410) where its document would be returned.
//
// Concurrency contract: a Runner runs one pass at a time (Run and RunOnce
// share a mutex); its Metrics are safe to read from any goroutine.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// Policy is what a pass keeps.
type Policy struct {
	// RetainCount revisions, the most recently created, are kept per scope
	// (orphans aside).
	RetainCount int
	// RetainMinAge: a revision younger than this is kept (orphans aside).
	RetainMinAge time.Duration
	// OrphanAge: an orphan, a record whose commit did not complete (no
	// revision-created event names it), is reclaimed once older than
	// this. A revision that was created and never activated is not an
	// orphan.
	OrphanAge time.Duration
}

// The defaults of seed 002.
const (
	DefaultInterval     = time.Hour
	DefaultRetainCount  = 50
	DefaultRetainMinAge = 7 * 24 * time.Hour
	DefaultOrphanAge    = time.Hour
	// DefaultLease is how long a pass holds a scope's lease: far longer than
	// one scope takes, short enough that a replica that died frees it soon.
	DefaultLease = 5 * time.Minute
)

// DefaultPolicy returns the seed's policy: 50 revisions, 7 days, orphans
// after 1 hour.
func DefaultPolicy() Policy {
	return Policy{RetainCount: DefaultRetainCount, RetainMinAge: DefaultRetainMinAge, OrphanAge: DefaultOrphanAge}
}

// Validate refuses a policy that would reclaim everything or nothing by
// mistake: negative ages or a count below 1.
func (p Policy) Validate() error {
	if p.RetainCount < 1 {
		return varplane.Errorf(varplane.CodeBadRequest, "retain count must be at least 1, not %d", p.RetainCount)
	}
	if p.RetainMinAge < 0 || p.OrphanAge < 0 {
		return varplane.Errorf(varplane.CodeBadRequest, "retention ages must not be negative")
	}
	return nil
}

// InUse returns, by scope, the revisions open changes rest on (their base
// and their candidate). An error means the open changes could not all be
// read: the pass then reclaims nothing.
type InUse func(ctx context.Context) (map[varplane.Scope][]varplane.Revision, error)

// Reclaimer is a store a Runner reclaims in: the Store contract with its
// optional varplane.Reclaimer capability (and, when the store completes
// its deletions at the end of a pass, varplane.ReclaimFinisher).
type Reclaimer interface {
	varplane.Store
	varplane.Reclaimer
}

// Options configure a Runner.
type Options struct {
	Policy
	// Interval between passes (DefaultInterval when 0).
	Interval time.Duration
	// InUse names the revisions open changes rest on; nil: none.
	InUse InUse
	// Holder is this process's lease token (unique per process).
	Holder string
	// Lease is how long a scope's lease is held (DefaultLease when 0).
	Lease time.Duration
	// Now is the clock (time.Now when nil; tests pass a fake one).
	Now func() time.Time
	// Logger receives a line per pass and failures (slog.Default when nil).
	Logger *slog.Logger
}

// Runner runs reclamation passes on one store.
type Runner struct {
	store Reclaimer
	opts  Options
	mu    sync.Mutex

	reclaimed, failed atomic.Uint64
	lastPass          atomic.Int64 // unix nanoseconds of the last pass's start
	lastDuration      atomic.Int64 // nanoseconds
}

// New returns a Runner for store with opts (defaults filled in).
func New(store Reclaimer, opts Options) (*Runner, error) {
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := varplane.CheckLeaseHolder("reclaim:x", opts.Holder); err != nil {
		return nil, err
	}
	return &Runner{store: store, opts: opts}, nil
}

// Metrics are a Runner's counters since New.
type Metrics struct {
	// Reclaimed counts revision bodies deleted.
	Reclaimed uint64
	// DeletionsFailed counts deletions that failed (retried next pass).
	DeletionsFailed uint64
	// LastPass is when the last pass started (zero: none yet).
	LastPass time.Time
	// LastDuration is how long it took.
	LastDuration time.Duration
}

// Metrics returns the counters. Safe for concurrent use.
func (r *Runner) Metrics() Metrics {
	m := Metrics{Reclaimed: r.reclaimed.Load(), DeletionsFailed: r.failed.Load(), LastDuration: time.Duration(r.lastDuration.Load())}
	if t := r.lastPass.Load(); t != 0 {
		m.LastPass = time.Unix(0, t)
	}
	return m
}

// Run runs a pass every Interval, the first after one interval, until ctx
// ends. A failed pass is logged and the next one runs.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.opts.Logger.Error("retention: reclamation pass failed; the next one runs in an interval", "err", err)
		}
	}
}

// Report is what one pass did.
type Report struct {
	Scopes    int // scopes visited
	Skipped   int // scopes whose lease another replica held
	Reclaimed int // bodies deleted
	Failed    int // deletions that failed
}

// RunOnce runs one pass over every scope of the store.
func (r *Runner) RunOnce(ctx context.Context) (Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.opts.Now()
	t0 := time.Now()
	r.lastPass.Store(start.UnixNano())
	defer func() { r.lastDuration.Store(int64(time.Since(t0))) }()
	var rep Report
	inUse := map[varplane.Scope][]varplane.Revision{}
	if r.opts.InUse != nil {
		var err error
		if inUse, err = r.opts.InUse(ctx); err != nil {
			return rep, fmt.Errorf("retention: open changes cannot be read, nothing reclaimed this pass: %w", err)
		}
	}
	// The records are listed before any history is read, so that a
	// record whose commit completes meanwhile has its event in the history
	// read after it.
	var records map[varplane.Scope][]varplane.Revision
	if rl, ok := r.store.(varplane.RecordLister); ok {
		var err error
		if records, err = rl.RevisionRecords(ctx); err != nil {
			return rep, fmt.Errorf("retention: list revision records: %w", err)
		}
	}
	scopes, err := r.store.Scopes(ctx)
	if err != nil {
		return rep, fmt.Errorf("retention: list scopes: %w", err)
	}
	for sc := range records {
		if _, found := slices.BinarySearch(scopes, sc); !found {
			scopes = append(scopes, sc) // a scope whose only commit did not complete
		}
	}
	var errs []error
	for _, scope := range scopes {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Scopes++
		n, held, err := r.scope(ctx, scope, start, inUse[scope], records[scope])
		switch {
		case held:
			rep.Skipped++
		case err != nil:
			errs = append(errs, fmt.Errorf("scope %q: %w", scope, err))
		}
		rep.Reclaimed += n
	}
	if f, ok := r.store.(varplane.ReclaimFinisher); ok {
		n, err := f.FinishReclaim(ctx)
		rep.Reclaimed += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		var fe failedDeletions
		if errors.As(err, &fe) {
			rep.Failed += fe.Failed()
		}
	}
	r.reclaimed.Add(uint64(rep.Reclaimed))
	r.failed.Add(uint64(rep.Failed))
	r.opts.Logger.Info("retention: reclamation pass", "scopes", rep.Scopes, "skipped", rep.Skipped, "reclaimed", rep.Reclaimed,
		"failed", rep.Failed, "took", time.Since(t0))
	return rep, errors.Join(errs...)
}

// failedDeletions is how a store's error counts the deletions that failed
// (they stay on its to-delete list).
type failedDeletions interface{ Failed() int }

// scope reclaims in one scope under its lease; held reports that another
// replica holds the lease. records are the revisions whose records the
// store listed for the scope (varplane.RecordLister), nil when it lists none.
func (r *Runner) scope(ctx context.Context, scope varplane.Scope, now time.Time, inUse, records []varplane.Revision) (n int, held bool, err error) {
	name := "reclaim:" + string(scope)
	if len(name) > varplane.MaxLeaseName {
		name = name[:varplane.MaxLeaseName]
	}
	if err := r.store.AcquireLease(ctx, name, r.opts.Holder, r.opts.Lease); err != nil {
		if errors.Is(err, varplane.ErrLeaseHeld) {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	defer func() {
		// Only while still held: a lease that expired and was taken is its
		// new holder's.
		if rerr := r.store.ReleaseLease(context.WithoutCancel(ctx), name, r.opts.Holder); rerr != nil && !errors.Is(rerr, varplane.ErrLeaseLost) {
			err = errors.Join(err, fmt.Errorf("release lease %s: %w", name, rerr))
		}
	}()
	st, err := r.store.State(ctx, scope)
	if err != nil {
		return 0, false, err
	}
	hist, err := r.store.EventHistory(ctx, scope)
	if err != nil {
		return 0, false, err
	}
	var head varplane.Revision
	if st.Head != nil {
		head = st.Head.Revision
	}
	revs := Select(r.opts.Policy, now, hist, head, inUse)
	orphans, err := r.orphans(ctx, scope, hist, records)
	if err != nil {
		return 0, false, err
	}
	revs = append(revs, SelectOrphans(r.opts.Policy, now, orphans, head, inUse)...)
	if len(revs) == 0 {
		return 0, false, nil
	}
	n, err = r.store.ReclaimRevisions(ctx, scope, revs)
	return n, false, err
}

// Orphan is a revision record whose commit did not complete: no
// revision-created event of its scope names it.
type Orphan struct {
	Revision  varplane.Revision
	CreatedAt time.Time // the record's
}

// orphans returns the records of scope that no revision-created event of
// hist names, with their creation times read from the records; a record
// that is gone meanwhile (reclaimed, or never there) is left out.
func (r *Runner) orphans(ctx context.Context, scope varplane.Scope, hist []varplane.Event, records []varplane.Revision) ([]Orphan, error) {
	if len(records) == 0 {
		return nil, nil
	}
	created := map[varplane.Revision]bool{}
	for i := range hist {
		if hist[i].Kind == varplane.EventRevisionCreated {
			created[hist[i].Revision] = true
		}
	}
	var out []Orphan
	for _, rev := range records {
		if created[rev] {
			continue
		}
		rec, err := r.store.Revision(ctx, scope, rev)
		switch {
		case errors.Is(err, varplane.ErrNotFound), errors.Is(err, varplane.ErrReclaimed):
			continue
		case err != nil:
			return nil, fmt.Errorf("read revision record %s: %w", rev, err)
		}
		out = append(out, Orphan{Revision: rev, CreatedAt: rec.CreatedAt})
	}
	return out, nil
}

// SelectOrphans returns the orphans of a scope that policy reclaims at now:
// those older than OrphanAge, never the head nor a revision an open change
// rests on.
func SelectOrphans(policy Policy, now time.Time, orphans []Orphan, head varplane.Revision, inUse []varplane.Revision) []varplane.Revision {
	var out []varplane.Revision
	for _, o := range orphans {
		if o.Revision != head && !slices.Contains(inUse, o.Revision) && now.Sub(o.CreatedAt) > policy.OrphanAge {
			out = append(out, o.Revision)
		}
	}
	return out
}

// Select returns the revisions of a scope that policy reclaims at now,
// from its whole history hist, its head and the revisions open changes rest
// on, oldest first: those beyond the RetainCount most recently created and
// older than RetainMinAge, activated or not (a revision with a
// revision-created event is never an orphan; SelectOrphans). Revisions
// already reclaimed are among them (a store ignores what it no longer
// holds).
func Select(policy Policy, now time.Time, hist []varplane.Event, head varplane.Revision, inUse []varplane.Revision) []varplane.Revision {
	type info struct {
		rev     varplane.Revision
		created time.Time
	}
	byRev := map[varplane.Revision]*info{}
	var order []*info // by latest creation, oldest first
	for i := range hist {
		ev := &hist[i]
		if ev.Kind != varplane.EventRevisionCreated {
			continue
		}
		in := byRev[ev.Revision]
		if in == nil {
			in = &info{rev: ev.Revision}
			byRev[ev.Revision] = in
		} else {
			order = slices.DeleteFunc(order, func(x *info) bool { return x == in })
		}
		in.created = ev.Timestamp
		order = append(order, in)
	}
	var out []varplane.Revision
	for i, in := range order {
		if in.rev == head || slices.Contains(inUse, in.rev) {
			continue
		}
		newest := len(order) - i // 1 for the newest
		if newest > policy.RetainCount && now.Sub(in.created) > policy.RetainMinAge {
			out = append(out, in.rev)
		}
	}
	return out
}
