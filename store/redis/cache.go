package redis

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// snapshot is one installed head as Redis held it: the state reads answer
// with, plus the version, generation and revision the conditional read
// compares.
type snapshot struct {
	state *varplane.ScopeState
	v     string // head hash version; "" when Redis has no head hash
	g     string
	r     string
	rec   *varplane.RevisionRecord // the head's record, nil without a head
	// err, when set, is what reads of the scope answer: Redis holds a value
	// for it that cannot be decoded. state is then the last good state,
	// kept only to tell whether a readable head later changes it.
	err error
}

// confirmArg is what the conditional read compares with the head's field c.
// A snapshot without a head hash (or a failed one) never matches.
func (s *snapshot) confirmArg() string {
	if s.v == "" {
		return ""
	}
	return s.v + " " + s.g + " " + s.r
}

// entry is one installed scope. snap is read lock-free; seq counts installs
// (under Store.mu) so that a read which raced with a newer install is not
// mistaken for a regression.
type entry struct {
	snap      atomic.Pointer[snapshot]
	seq       atomic.Uint64
	confirmed atomic.Int64 // unix nanoseconds of the last confirmation by Redis
	lagLogged atomic.Int64 // unix nanoseconds of the last lag log
}

func (s *Store) entry(scope varplane.Scope) *entry {
	if e, ok := s.entries.Load(scope); ok {
		return e.(*entry)
	}
	return nil
}

// install puts snap in place for scope unless it is stale, and reports the
// change a Watch listener should see (nil when the installed generation did
// not change). readSeq is the entry's install count when the read that
// produced snap started (0 for a scope that was not installed), so that a
// read older than a concurrent install is dropped instead of being taken for
// a failover regression. The caller holds s.mu.
func (s *Store) installLocked(scope varplane.Scope, snap *snapshot, readSeq uint64, cold bool) (*varplane.ScopeChange, *snapshot) {
	now := time.Now().UnixNano()
	var e *entry
	if v, ok := s.entries.Load(scope); ok {
		e = v.(*entry)
	} else {
		e = &entry{}
		e.confirmed.Store(now)
		e.snap.Store(snap)
		e.seq.Store(1)
		s.entries.Store(scope, e)
		s.stats.installs.Add(1)
		if snap.state.Generation == 0 || cold {
			return nil, snap
		}
		return &varplane.ScopeChange{Scope: scope, Generation: snap.state.Generation, Head: snap.state.Head}, snap
	}
	cur := e.snap.Load()
	if cur.v == snap.v && cur.g == snap.g && cur.r == snap.r {
		e.confirmed.Store(now)
		return nil, cur
	}
	if versionLess(snap.v, cur.v) {
		if e.seq.Load() != readSeq {
			return nil, cur // a newer install raced with this read
		}
		s.stats.regressions.Add(1)
		s.log.Error("redis store: head regressed; installing what Redis holds (a failover may have lost a commit: publish it again)",
			"scope", string(scope), "fromGeneration", cur.g, "fromRevision", cur.r, "toGeneration", snap.g, "toRevision", snap.r,
			"fromVersion", cur.v, "toVersion", snap.v)
	}
	e.snap.Store(snap)
	e.seq.Add(1)
	e.confirmed.Store(now)
	s.stats.installs.Add(1)
	if cur.state.Generation == snap.state.Generation {
		return nil, snap
	}
	return &varplane.ScopeChange{Scope: scope, Generation: snap.state.Generation, Head: snap.state.Head}, snap
}

// versionLess compares two decimal head versions ("" is below every version).
func versionLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// installAndDeliver installs every snapshot of one commit and delivers the
// resulting Commit (if any head changed) to the listeners, in order.
func (s *Store) installAndDeliver(kind varplane.EventKind, scope varplane.Scope, snaps []installReq) {
	s.mu.Lock()
	var changes []varplane.ScopeChange
	for _, r := range snaps {
		if ch, _ := s.installLocked(r.scope, r.snap, r.seq, r.cold); ch != nil {
			changes = append(changes, *ch)
		}
	}
	if len(changes) == 0 || kind == varplane.EventRejected || kind == varplane.EventRevisionCreated {
		s.mu.Unlock()
		return
	}
	// Name the commit by what it did to its first scope: a message about an
	// activation may be answered by a head that a later deactivation
	// already cleared.
	kind = varplane.EventDeactivated
	if changes[0].Head != nil {
		kind = varplane.EventActivated
	}
	if changes[0].Scope != scope {
		scope = changes[0].Scope
	}
	t := s.nextTick
	s.nextTick++
	s.mu.Unlock()
	s.stats.watchCommits.Add(1)
	s.deliver(t, &varplane.Commit{Kind: kind, Scope: scope, Changes: changes})
}

type installReq struct {
	scope varplane.Scope
	snap  *snapshot
	seq   uint64
	cold  bool // a first read, not a commit: a new entry is not delivered
}

// readSeq returns the install count of scope before a read starts.
func (s *Store) readSeq(scope varplane.Scope) uint64 {
	if e := s.entry(scope); e != nil {
		return e.seq.Load()
	}
	return 0
}

// Lag returns, for every installed scope, the time since Redis last confirmed
// its head (by an install, an invalidation read or a revalidation pass).
func (s *Store) Lag() map[varplane.Scope]time.Duration {
	now := time.Now().UnixNano()
	out := map[varplane.Scope]time.Duration{}
	s.entries.Range(func(k, v any) bool {
		out[k.(varplane.Scope)] = time.Duration(now - v.(*entry).confirmed.Load())
		return true
	})
	return out
}

// counters are the store's monotonic counters, exported through Stats.
type counters struct {
	commits, commitConflicts, commitErrors         atomic.Uint64
	invalidations, invalidationReads, invalDropped atomic.Uint64
	passes, confirms, confirmChanged, confirmErrs  atomic.Uint64
	coldLoads, readErrors, decodeErrors            atomic.Uint64
	regressions, installs, watchCommits            atomic.Uint64
	subscriptions, evictionChecks                  atomic.Uint64
	lastPassNanos                                  atomic.Int64
}

// Stats is a point-in-time copy of the store's counters and gauges, for a
// metrics exporter. Counters only grow while the store is open.
type Stats struct {
	Commits             uint64 // mutations acknowledged by Redis
	CommitConflicts     uint64 // generation mismatches
	CommitErrors        uint64 // mutations that failed for any other reason
	Invalidations       uint64 // invalidation messages received
	InvalidationReads   uint64 // heads read from Redis because of a message
	InvalidationDropped uint64 // messages dropped on a full queue (revalidation catches them)
	RevalidationPasses  uint64
	Confirmations       uint64 // conditional reads that found the head unchanged
	ConfirmChanged      uint64 // conditional reads that found a different head
	ConfirmErrors       uint64 // conditional reads that failed
	ColdLoads           uint64 // scopes read from Redis on first use
	ReadErrors          uint64 // reads of Redis that failed
	DecodeErrors        uint64 // values that could not be decoded (left in Redis)
	Regressions         uint64 // heads that went back after a failover
	Installs            uint64
	WatchCommits        uint64 // commits delivered to Watch listeners
	Subscriptions       uint64 // successful (re)subscriptions to the channel
	EvictionChecks      uint64
	Installed           int           // scopes held in memory
	MaxLag              time.Duration // largest lag over installed scopes
	LastPassDuration    time.Duration
}

// Stats returns the current counters and gauges.
func (s *Store) Stats() Stats {
	c := &s.stats
	st := Stats{
		Commits: c.commits.Load(), CommitConflicts: c.commitConflicts.Load(), CommitErrors: c.commitErrors.Load(),
		Invalidations: c.invalidations.Load(), InvalidationReads: c.invalidationReads.Load(), InvalidationDropped: c.invalDropped.Load(),
		RevalidationPasses: c.passes.Load(), Confirmations: c.confirms.Load(), ConfirmChanged: c.confirmChanged.Load(), ConfirmErrors: c.confirmErrs.Load(),
		ColdLoads: c.coldLoads.Load(), ReadErrors: c.readErrors.Load(), DecodeErrors: c.decodeErrors.Load(),
		Regressions: c.regressions.Load(), Installs: c.installs.Load(), WatchCommits: c.watchCommits.Load(),
		Subscriptions: c.subscriptions.Load(), EvictionChecks: c.evictionChecks.Load(),
		LastPassDuration: time.Duration(c.lastPassNanos.Load()),
	}
	for _, l := range s.Lag() {
		st.Installed++
		if l > st.MaxLag {
			st.MaxLag = l
		}
	}
	return st
}

// installedScopes returns the installed scopes, sorted.
func (s *Store) installedScopes() []varplane.Scope {
	var out []varplane.Scope
	s.entries.Range(func(k, _ any) bool {
		out = append(out, k.(varplane.Scope))
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// refresh reads scope's head from Redis (never a local copy) and installs
// it, delivering a Commit of kind when the generation changed.
func (s *Store) refresh(ctx context.Context, kind varplane.EventKind, scopes ...varplane.Scope) error {
	reqs := make([]installReq, 0, len(scopes))
	for _, sc := range scopes {
		seq := s.readSeq(sc)
		var hint *varplane.RevisionRecord
		if e := s.entry(sc); e != nil {
			hint = e.snap.Load().rec
		}
		snap, err := s.load(ctx, sc, hint)
		if err != nil {
			if e := s.entry(sc); e != nil && varplane.ErrorCode(err) == varplane.CodeDocumentFailed {
				s.installFailed(sc, e.snap.Load(), seq, err)
			}
			return err
		}
		reqs = append(reqs, installReq{scope: sc, snap: snap, seq: seq})
	}
	s.installAndDeliver(kind, scopes[0], reqs)
	return nil
}
