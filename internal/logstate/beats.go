package logstate

import (
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
// two minutes after its last write (a reader ignores it after one, by its
// writtenAt), and a canary report eight days after its last write.
const (
	BeatStatusTTL = 2 * time.Minute
	BeatReportTTL = 8 * 24 * time.Hour
)

// The bounds of Beats: it lives in the memory of the server process and is
// filled by authenticated callers, so it refuses to grow past them
// (limit-exceeded) rather than without end.
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
// the ones package instance (StatusStore, ReportStore) and package control
// (HeartbeatStore, ReportReader) look for. Every method is safe for
// concurrent use.
type Beats struct {
	reads *Reads
	now   func() time.Time

	mu        sync.Mutex
	statuses  map[string]beat
	reports   map[string]map[string]beat // window → instance id → report
	lastSweep time.Time
}

// beat is one stored value and when it expires.
type beat struct {
	value   []byte
	expires time.Time
}

// InitBeats makes b answer ErrClosed once r is shut, and read the time
// from now (time.Now when nil; tests pass a fake clock).
func (b *Beats) InitBeats(r *Reads, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	b.reads, b.now = r, now
	b.statuses, b.reports = map[string]beat{}, map[string]map[string]beat{}
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
// writes. Caller holds mu.
func (b *Beats) sweep(now time.Time) {
	if now.Sub(b.lastSweep) < time.Minute {
		return
	}
	b.lastSweep = now
	maps.DeleteFunc(b.statuses, func(_ string, v beat) bool { return !now.Before(v.expires) })
	for w, m := range b.reports {
		maps.DeleteFunc(m, func(_ string, v beat) bool { return !now.Before(v.expires) })
		if len(m) == 0 {
			delete(b.reports, w)
		}
	}
}

// WriteStatus writes instance id's status value (instance.Status as JSON),
// replacing its previous one; it expires BeatStatusTTL after this write.
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
	if _, ok := b.statuses[id]; !ok && len(b.statuses) >= MaxBeatStatuses {
		b.lastSweep = time.Time{}
		b.sweep(now)
		if len(b.statuses) >= MaxBeatStatuses {
			return varplane.Errorf(varplane.CodeLimitExceeded, "this store holds %d instance statuses, its most", MaxBeatStatuses)
		}
	}
	b.statuses[id] = beat{value: append([]byte(nil), value...), expires: now.Add(BeatStatusTTL)}
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
// does not judge their age beyond expiry: the caller ignores a status whose
// writtenAt is more than a minute old.
func (b *Beats) InstanceStatuses(ctx context.Context) (map[string][]byte, error) {
	if err := b.usable(ctx); err != nil {
		return nil, err
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]byte, len(b.statuses))
	for id, v := range b.statuses {
		if now.Before(v.expires) {
			out[id] = slices.Clone(v.value)
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
