package redis

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/replica"
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

// absent reports a snapshot of a scope Redis holds nothing for (no head
// hash and no generation floor), as a read found it: not a failed read, which
// is never absent.
func (s *snapshot) absent() bool { return s.v == "" && s.err == nil }

// same reports whether two snapshots are the same head as Redis held it. A
// failed snapshot is never the same as a readable one, so an absent read
// after a failure installs (and a head after an absent read is a change).
func (s *snapshot) same(o *snapshot) bool {
	return s.v == o.v && s.g == o.g && s.r == o.r && (s.err == nil) == (o.err == nil)
}

// confirmArg is what the conditional read compares with the head's field c.
// A snapshot without a head hash (or a failed one) never matches.
func (s *snapshot) confirmArg() string {
	if s.v == "" {
		return ""
	}
	return s.v + " " + s.g + " " + s.r
}

// entry is one installed scope (see replica.Entry). confirmed names its
// confirmation time for this package's readers.
type entry struct {
	replica.Entry[snapshot]
	confirmed *atomic.Int64
}

func newEntry() *entry {
	e := &entry{}
	e.confirmed = &e.Confirmed
	return e
}

// maxAbsent bounds the scopes remembered as absent (replica.Rules).
const maxAbsent = 4096

// newTable returns the table of installed heads: a snapshot is the head
// hash's version, generation and revision as Redis held them. A scope Redis
// holds nothing for is installed as absent (up to maxAbsent of them), so
// that reading it again (the control plane reads its policy scope on every
// write) costs no command, and so that an invalidation or a revalidation
// pass, which confirm it like any head, install its first commit.
func (s *Store) newTable() *replica.Table[snapshot, *entry] {
	return replica.NewTable(replica.Rules[snapshot, *entry]{
		New:       newEntry,
		State:     func(sn *snapshot) *varplane.ScopeState { return sn.state },
		Same:      (*snapshot).same,
		Older:     func(next, cur *snapshot) bool { return versionLess(next.v, cur.v) },
		Unwritten: (*snapshot).absent,
		MaxAbsent: maxAbsent,
		Failed:    func(sn *snapshot) bool { return sn.err != nil },
		Regressed: func(scope varplane.Scope, cur, next *snapshot) {
			s.log.Error("redis store: head regressed; installing what Redis holds (a failover may have lost a commit: publish it again)",
				"scope", string(scope), "fromGeneration", cur.g, "fromRevision", cur.r, "toGeneration", next.g, "toRevision", next.r,
				"fromVersion", cur.v, "toVersion", next.v)
		},
	})
}

func (s *Store) entry(scope varplane.Scope) *entry { return s.entries.Entry(scope) }

// forgetAbsent drops scope's entry if it remembers the scope as absent, so
// the next read asks Redis. A commit to scope whose outcome this replica
// does not know (its reply was lost, or could not be read back) may have
// given it a head, and an absent entry must not answer for it until the
// commit's invalidation arrives.
func (s *Store) forgetAbsent(scope varplane.Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries.ForgetAbsent(scope)
}

// installLocked puts snap in place for scope unless it is stale
// (replica.Table.InstallLocked); readSeq is the entry's install count when
// the read that produced snap started. The caller holds s.mu.
func (s *Store) installLocked(scope varplane.Scope, snap *snapshot, readSeq uint64, cold bool) (*varplane.ScopeChange, *snapshot) {
	return s.entries.InstallLocked(replica.Req[snapshot]{Scope: scope, Snap: snap, Seq: readSeq, Cold: cold})
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
func (s *Store) installAndDeliver(snaps []installReq) {
	s.mu.Lock()
	var changes []varplane.ScopeChange
	for _, r := range snaps {
		if ch, _ := s.installLocked(r.scope, r.snap, r.seq, r.cold); ch != nil {
			changes = append(changes, *ch)
		}
	}
	// A create or a rejection changes no head, but the read back after
	// one may install a head committed meanwhile: that change is
	// delivered like any other, or nothing would (its own invalidation,
	// or the next pass, finds it installed already).
	if len(changes) == 0 {
		s.mu.Unlock()
		return
	}
	kind := replica.CommitKind(changes)
	scope := changes[0].Scope
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
func (s *Store) readSeq(scope varplane.Scope) uint64 { return s.entries.ReadSeq(scope) }

// Lag returns, for every installed scope, the time since Redis last confirmed
// its head (by an install, an invalidation read or a revalidation pass).
func (s *Store) Lag() map[varplane.Scope]time.Duration { return s.entries.Lag() }

// counters are the store's monotonic counters, exported through Stats.
type counters struct {
	commits, commitConflicts, commitErrors         atomic.Uint64
	invalidations, invalidationReads, invalDropped atomic.Uint64
	passes, confirms, confirmChanged, confirmErrs  atomic.Uint64
	coldLoads, readErrors, decodeErrors            atomic.Uint64
	watchCommits                                   atomic.Uint64
	subscriptions, evictionChecks                  atomic.Uint64
	chainRetries                                   atomic.Uint64
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
	ChainRetries        uint64        // commit scripts run again because the scope's chain head had moved (chain.go)
	Installed           int           // heads held in memory (scopes remembered as absent are not counted)
	Absent              int           // scopes remembered as having nothing in Redis (at most maxAbsent)
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
		Regressions: s.entries.Regressions(), Installs: s.entries.Installs(), WatchCommits: c.watchCommits.Load(),
		Subscriptions: c.subscriptions.Load(), EvictionChecks: c.evictionChecks.Load(), ChainRetries: c.chainRetries.Load(),
		LastPassDuration: time.Duration(c.lastPassNanos.Load()),
	}
	st.Installed, st.MaxLag = s.entries.Summary()
	st.Absent = s.entries.Absent()
	st.Installed -= st.Absent
	return st
}

// installedScopes returns the installed scopes, sorted.
func (s *Store) installedScopes() []varplane.Scope { return s.entries.Scopes() }

// refresh reads scope's head from Redis (never a local copy) and installs
// it, delivering a Commit when the generation changed.
func (s *Store) refresh(ctx context.Context, scopes ...varplane.Scope) error {
	reqs := make([]installReq, 0, len(scopes))
	for _, sc := range scopes {
		seq := s.readSeq(sc)
		var hint *varplane.RevisionRecord
		if e := s.entry(sc); e != nil {
			hint = e.Snap.Load().rec
		}
		snap, err := s.load(ctx, sc, hint)
		if err != nil {
			if e := s.entry(sc); e != nil && varplane.ErrorCode(err) == varplane.CodeDocumentFailed {
				s.installFailed(sc, e.Snap.Load(), seq, err)
			}
			return err
		}
		reqs = append(reqs, installReq{scope: sc, snap: snap, seq: seq})
	}
	s.installAndDeliver(reqs)
	return nil
}
