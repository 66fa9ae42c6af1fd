package logstate

import (
	"container/list"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// The lifetimes of what Beats keeps, the same as the Redis store's
// (store/redis StatusTTL and ReportTTL): a status nobody refreshes vanishes
// an hour after its last write (varplane.StatusLifetime; a reader that
// counts live instances ignores it after a minute, by its writtenAt), and a
// canary report eight days after its last write.
const (
	BeatStatusTTL = varplane.StatusLifetime
	BeatReportTTL = 8 * 24 * time.Hour
)

// The bounds of Beats: it lives in the memory of the server process and is
// filled by authenticated callers, so it refuses to grow past them
// (limit-exceeded) rather than without end. At MaxBeatStatuses a new
// instance's status takes the place of the status written longest ago,
// when that one is no longer fresh (varplane.StatusFresh): an hour of
// churn (instances restarting under new ids) forgets the longest-gone
// instances first and never refuses a live one's heartbeat while any
// status held is not live. Only a table of fresh statuses refuses.
const (
	MaxBeatStatuses = 1 << 16 // unexpired statuses
	MaxBeatWindows  = 1 << 12 // windows with an unexpired report
	MaxBeatReports  = 1 << 16 // unexpired reports of one window
)

// Beats is the table of instance statuses (heartbeats) and canary reports
// of a store whose writes all go through one process (memory, and file,
// which its lock file makes single-process). It lives in that process's
// memory only: a restart forgets it, which costs nothing, since every
// instance writes its status and its cumulative report again at each
// heartbeat. Stores embed it and call InitBeats before use; its methods are
// the ones package instance (varplane.StatusWriter, ReportWriter) and
// package control (varplane.HeartbeatStore) look for. Every method is safe for
// concurrent use.
type Beats struct {
	reads *Reads
	now   func() time.Time

	mu sync.Mutex
	// statuses holds each instance's status in byWrite, the statuses in
	// the order of their last write (the oldest first): the sweep and the
	// eviction at the bound take them from the front.
	statuses    map[string]*list.Element // of *statusBeat
	byWrite     list.List
	maxStatuses int
	reports     map[string]map[string]beat // window → instance id → report
	lastSweep   time.Time
}

// beat is one stored value and when it expires.
type beat struct {
	value   []byte
	expires time.Time
}

// statusBeat is one instance's status and when it was written (by b.now);
// it expires BeatStatusTTL later.
type statusBeat struct {
	id      string
	value   []byte
	written time.Time
}

// held reports whether s has not expired at now.
func (s *statusBeat) held(now time.Time) bool { return now.Before(s.written.Add(BeatStatusTTL)) }

// InitBeats makes b answer ErrClosed once r is shut, and read the time
// from now (time.Now when nil; tests pass a fake clock).
func (b *Beats) InitBeats(r *Reads, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	b.reads, b.now = r, now
	b.statuses, b.reports = map[string]*list.Element{}, map[string]map[string]beat{}
	b.byWrite.Init()
	b.maxStatuses = MaxBeatStatuses
}

func (b *Beats) usable(ctx context.Context) error {
	if b.reads.IsShut() {
		return varplane.ErrClosed
	}
	return ctx.Err()
}

// checkBeatID refuses an empty instance id; checkWindow a window id the
// Redis store could not hold either (empty, or with a brace, which would
// break its hash tag), so every store accepts the same ids.
func checkBeatID(id string) error {
	if id == "" {
		return varplane.Errorf(varplane.CodeBadRequest, "an instance id is required")
	}
	return nil
}

func checkWindow(window string) error {
	if window == "" || strings.ContainsAny(window, "{}") {
		return varplane.Errorf(varplane.CodeBadRequest, "canary window %q: want a non-empty id without braces", window)
	}
	return nil
}

// sweep drops every expired value, at most once a minute (each write
// calls it), so that the table holds only what is alive plus a minute's
// writes. The statuses expire in the order they were written, so it takes
// them from the front of byWrite. Caller holds mu.
func (b *Beats) sweep(now time.Time) {
	if now.Sub(b.lastSweep) < time.Minute {
		return
	}
	b.lastSweep = now
	for e := b.byWrite.Front(); e != nil && !e.Value.(*statusBeat).held(now); e = b.byWrite.Front() {
		b.dropStatus(e)
	}
	for w, m := range b.reports {
		maps.DeleteFunc(m, func(_ string, v beat) bool { return !now.Before(v.expires) })
		if len(m) == 0 {
			delete(b.reports, w)
		}
	}
}

// dropStatus removes the status of e. Caller holds mu.
func (b *Beats) dropStatus(e *list.Element) {
	delete(b.statuses, e.Value.(*statusBeat).id)
	b.byWrite.Remove(e)
}

// WriteStatus writes instance id's status value (instance.Status as JSON),
// replacing its previous one; it expires BeatStatusTTL after this write.
// A new instance past MaxBeatStatuses statuses takes the place of the
// status written longest ago when that one is more than
// varplane.StatusFresh old: it counts toward nothing live (propagation,
// waits, canary windows and gates count only fresh statuses), so evicting
// it changes no live count; it only forgets an instance deletion
// protection and the fleet view would still name as seen. A younger one is
// never evicted, even though a live instance rewrites its status every 30
// s: evicting a status 40 s old would drop a live instance from those
// counts (a canary window could pass without its report). When every
// status held is fresh the write answers limit-exceeded.
func (b *Beats) WriteStatus(ctx context.Context, id string, value []byte) error {
	if err := checkBeatID(id); err != nil {
		return err
	}
	if err := b.usable(ctx); err != nil {
		return err
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	value = append([]byte(nil), value...)
	if e, ok := b.statuses[id]; ok {
		s := e.Value.(*statusBeat)
		s.value, s.written = value, now
		b.byWrite.MoveToBack(e)
		return nil
	}
	if len(b.statuses) >= b.maxStatuses {
		b.lastSweep = time.Time{}
		b.sweep(now)
	}
	if len(b.statuses) >= b.maxStatuses {
		oldest := b.byWrite.Front()
		if now.Sub(oldest.Value.(*statusBeat).written) <= varplane.StatusFresh {
			return varplane.Errorf(varplane.CodeLimitExceeded, "this store holds %d instance statuses written in the last %v, its most", b.maxStatuses, varplane.StatusFresh)
		}
		b.dropStatus(oldest)
	}
	b.statuses[id] = b.byWrite.PushBack(&statusBeat{id: id, value: value, written: now})
	return nil
}

// DeleteStatus removes instance id's status, and does nothing when it has
// none (varplane.StatusDeleter).
func (b *Beats) DeleteStatus(ctx context.Context, id string) error {
	if err := checkBeatID(id); err != nil {
		return err
	}
	if err := b.usable(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.statuses[id]; ok {
		b.dropStatus(e)
	}
	return nil
}

// ListInstance does nothing but check the store is open: here the status
// itself lists its instance, for as long as it lives.
func (b *Beats) ListInstance(ctx context.Context, id string, _ time.Time) error {
	if err := checkBeatID(id); err != nil {
		return err
	}
	return b.usable(ctx)
}

// InstanceStatuses returns every unexpired status value by instance id. It
// does not judge their age beyond expiry: a caller that counts live
// instances ignores a status whose writtenAt is more than
// varplane.StatusFresh old.
func (b *Beats) InstanceStatuses(ctx context.Context) (map[string][]byte, error) {
	if err := b.usable(ctx); err != nil {
		return nil, err
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]byte, len(b.statuses))
	for id, e := range b.statuses {
		if s := e.Value.(*statusBeat); s.held(now) {
			out[id] = slices.Clone(s.value)
		}
	}
	return out, nil
}

// WriteCanaryReport writes instance id's report of window (instance.Report
// as JSON), replacing its previous one; it expires BeatReportTTL after this
// write.
func (b *Beats) WriteCanaryReport(ctx context.Context, window, id string, value []byte) error {
	if err := checkWindow(window); err != nil {
		return err
	}
	if err := checkBeatID(id); err != nil {
		return err
	}
	if err := b.usable(ctx); err != nil {
		return err
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	m := b.reports[window]
	if m == nil {
		if len(b.reports) >= MaxBeatWindows {
			return varplane.Errorf(varplane.CodeLimitExceeded, "this store holds reports of %d canary windows, its most", MaxBeatWindows)
		}
		m = map[string]beat{}
		b.reports[window] = m
	}
	if _, ok := m[id]; !ok && len(m) >= MaxBeatReports {
		return varplane.Errorf(varplane.CodeLimitExceeded, "canary window %q holds %d reports, its most", window, MaxBeatReports)
	}
	m[id] = beat{value: append([]byte(nil), value...), expires: now.Add(BeatReportTTL)}
	return nil
}

// CanaryReports returns the unexpired report of window of every instance
// that wrote one, by the instance id it was filed under.
func (b *Beats) CanaryReports(ctx context.Context, window string) (map[string][]byte, error) {
	if err := checkWindow(window); err != nil {
		return nil, err
	}
	if err := b.usable(ctx); err != nil {
		return nil, err
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string][]byte{}
	for id, v := range b.reports[window] {
		if now.Before(v.expires) {
			out[id] = slices.Clone(v.value)
		}
	}
	return out, nil
}
