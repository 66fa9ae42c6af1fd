package postgres

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// snapshot is one installed head as the database held it: the state reads
// answer with, the row version revalidation compares, and the head's
// revision record.
type snapshot struct {
	state   *varplane.ScopeState
	version int64                    // heads.version; noRow when the scope has no row
	rec     *varplane.RevisionRecord // the head's record, nil without a head
}

// same reports whether b is the head a holds: the same row version,
// generation and revision. (A version alone could repeat after a restore
// from backup followed by new commits.)
func (a *snapshot) same(b *snapshot) bool {
	return a.version == b.version && a.state.Generation == b.state.Generation && headRev(a) == headRev(b)
}

func headRev(s *snapshot) varplane.Revision {
	if s.state.Head == nil {
		return ""
	}
	return s.state.Head.Revision
}

// noRow is the version of a scope the heads table has no row for.
const noRow = -1

// entry is one installed scope. snap is read lock-free; seq counts installs
// (under Store.mu) so that a read which raced with a newer install is not
// mistaken for a regression.
type entry struct {
	snap      atomic.Pointer[snapshot]
	seq       atomic.Uint64
	confirmed atomic.Int64 // unix nanoseconds of the last confirmation by the database
	lagLogged atomic.Int64 // unix nanoseconds of the last lag log
}

func (s *Store) entry(scope varplane.Scope) *entry {
	if e, ok := s.entries.Load(scope); ok {
		return e.(*entry)
	}
	return nil
}

// ownSeq marks the snapshot of an own commit: it is exact as of the commit,
// so an installed head with a higher version is newer, never a regression.
const ownSeq = ^uint64(0)

// installReq is one snapshot to install.
type installReq struct {
	scope varplane.Scope
	snap  *snapshot
	seq   uint64 // the entry's install count when the read started
	cold  bool   // a first read, not a commit: a new entry is not delivered
	// gap are the changes between the installed generation gapFrom and
	// snap's, delivered before snap's own when the install still starts
	// from gapFrom (see fillGaps).
	gap     []varplane.ScopeChange
	gapFrom varplane.Generation
}

// installLocked puts snap in place for scope unless it is stale, and
// reports the change a Watch listener should see (nil when the generation
// did not change). The caller holds s.mu.
func (s *Store) installLocked(r installReq) (*varplane.ScopeChange, *snapshot) {
	now := time.Now().UnixNano()
	snap := r.snap
	v, ok := s.entries.Load(r.scope)
	if !ok {
		if snap.version == noRow {
			return nil, snap // nothing to install for a scope never written
		}
		e := &entry{}
		e.confirmed.Store(now)
		e.snap.Store(snap)
		e.seq.Store(1)
		s.entries.Store(r.scope, e)
		s.stats.installs.Add(1)
		if snap.state.Generation == 0 || r.cold {
			return nil, snap
		}
		return &varplane.ScopeChange{Scope: r.scope, Generation: snap.state.Generation, Head: snap.state.Head}, snap
	}
	e := v.(*entry)
	cur := e.snap.Load()
	if cur.same(snap) {
		e.confirmed.Store(now)
		return nil, cur
	}
	if snap.version <= cur.version {
		if e.seq.Load() != r.seq {
			return nil, cur // a newer install raced with this read
		}
		s.stats.regressions.Add(1)
		s.log.Error("postgres store: head went back; installing what the database holds (a restore from backup or a failover may have lost a commit: publish it again)",
			"scope", string(r.scope), "fromGeneration", cur.state.Generation, "toGeneration", snap.state.Generation,
			"fromVersion", cur.version, "toVersion", snap.version)
	}
	e.snap.Store(snap)
	e.seq.Add(1)
	e.confirmed.Store(now)
	s.stats.installs.Add(1)
	if cur.state.Generation == snap.state.Generation {
		return nil, snap
	}
	return &varplane.ScopeChange{Scope: r.scope, Generation: snap.state.Generation, Head: snap.state.Head}, snap
}

// installAndDeliver installs every snapshot of one commit and delivers the
// resulting Commit (if any head changed) to the listeners, under s.mu so
// that deliveries keep install order.
func (s *Store) installAndDeliver(kind varplane.EventKind, reqs []installReq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changes []varplane.ScopeChange
	var missed []varplane.Commit
	for _, r := range reqs {
		from := varplane.Generation(0)
		e := s.entry(r.scope)
		if e != nil {
			from = e.snap.Load().state.Generation
		}
		ch, _ := s.installLocked(r)
		if ch == nil {
			continue
		}
		if e != nil && len(r.gap) > 0 && from == r.gapFrom {
			for _, g := range r.gap {
				k := varplane.EventDeactivated
				if g.Head != nil {
					k = varplane.EventActivated
				}
				missed = append(missed, varplane.Commit{Kind: k, Scope: g.Scope, Changes: []varplane.ScopeChange{g}})
			}
		}
		changes = append(changes, *ch)
	}
	if len(missed) > 0 {
		s.stats.watchCommits.Add(uint64(len(missed)))
		s.watchers.Notify(missed)
	}
	if len(changes) == 0 || kind == varplane.EventRejected || kind == varplane.EventRevisionCreated {
		return
	}
	// Name the commit by what it did to its first scope: a notification of
	// an activation may be answered by a head that a later deactivation
	// already cleared.
	kind = varplane.EventDeactivated
	if changes[0].Head != nil {
		kind = varplane.EventActivated
	}
	s.stats.watchCommits.Add(1)
	s.watchers.Notify([]varplane.Commit{{Kind: kind, Scope: changes[0].Scope, Changes: changes}})
}

// installCold installs the first read of scope and returns what reads
// should answer (the installed snapshot if a commit won the race).
func (s *Store) installCold(scope varplane.Scope, snap *snapshot) *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, cur := s.installLocked(installReq{scope: scope, snap: snap, cold: true})
	return cur
}

// readSeq returns the install count of scope before a read starts.
func (s *Store) readSeq(scope varplane.Scope) uint64 {
	if e := s.entry(scope); e != nil {
		return e.seq.Load()
	}
	return 0
}

// Lag returns, for every installed scope, the time since the database last
// confirmed its head (by an install, a notification or a revalidation
// pass).
func (s *Store) Lag() map[varplane.Scope]time.Duration {
	now := time.Now().UnixNano()
	out := map[varplane.Scope]time.Duration{}
	s.entries.Range(func(k, v any) bool {
		out[k.(varplane.Scope)] = time.Duration(now - v.(*entry).confirmed.Load())
		return true
	})
	return out
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

// counters are the store's monotonic counters, exported through Stats.
type counters struct {
	commits, commitConflicts, commitErrors         atomic.Uint64
	notifications, notificationReads, notDrop      atomic.Uint64
	passes, confirms, confirmChanged, confirmErr   atomic.Uint64
	coldLoads, readErrors, decodeErrors            atomic.Uint64
	regressions, installs, watchCommits            atomic.Uint64
	listens, notified, notifyDropped, notifyErrors atomic.Uint64
	batches, batchedCalls, batchRetries            atomic.Uint64
	lastPassNanos                                  atomic.Int64
}

// Stats is a point-in-time copy of the store's counters and gauges, for a
// metrics exporter. Counters only grow while the store is open.
type Stats struct {
	Commits              uint64 // mutations the database committed
	CommitConflicts      uint64 // generation mismatches
	CommitErrors         uint64 // mutations that failed for any other reason
	Notifications        uint64 // notifications received
	NotificationReads    uint64 // heads read because of a notification
	NotificationsDropped uint64 // notifications dropped on a full queue (revalidation catches them)
	RevalidationPasses   uint64
	Confirmations        uint64 // installed heads a pass found unchanged
	ConfirmChanged       uint64 // installed heads a pass found changed
	ConfirmErrors        uint64 // pass queries that failed
	ColdLoads            uint64 // scopes read on first use
	ReadErrors           uint64 // reads that failed
	DecodeErrors         uint64 // stored values that could not be decoded
	Regressions          uint64 // heads that went back (restore, failover)
	Installs             uint64
	WatchCommits         uint64        // commits delivered to Watch listeners
	Listens              uint64        // successful (re)LISTENs on the channel
	Notified             uint64        // invalidations of own commits sent
	NotifyDropped        uint64        // invalidations dropped on a full queue
	NotifyErrors         uint64        // invalidations whose sending failed
	Batches              uint64        // transactions that grouped several commits
	BatchedCalls         uint64        // commits run in those transactions
	BatchRetries         uint64        // batches the server refused, whose commits ran again one by one
	Installed            int           // scopes held in memory
	MaxLag               time.Duration // largest lag over installed scopes
	LastPassDuration     time.Duration
}

// Stats returns the current counters and gauges.
func (s *Store) Stats() Stats {
	c := &s.stats
	st := Stats{
		Commits: c.commits.Load(), CommitConflicts: c.commitConflicts.Load(), CommitErrors: c.commitErrors.Load(),
		Notifications: c.notifications.Load(), NotificationReads: c.notificationReads.Load(), NotificationsDropped: c.notDrop.Load(),
		RevalidationPasses: c.passes.Load(), Confirmations: c.confirms.Load(), ConfirmChanged: c.confirmChanged.Load(), ConfirmErrors: c.confirmErr.Load(),
		ColdLoads: c.coldLoads.Load(), ReadErrors: c.readErrors.Load(), DecodeErrors: c.decodeErrors.Load(),
		Regressions: c.regressions.Load(), Installs: c.installs.Load(), WatchCommits: c.watchCommits.Load(),
		Listens: c.listens.Load(), Notified: c.notified.Load(), NotifyDropped: c.notifyDropped.Load(), NotifyErrors: c.notifyErrors.Load(),
		Batches: c.batches.Load(), BatchedCalls: c.batchedCalls.Load(), BatchRetries: c.batchRetries.Load(),
		LastPassDuration: time.Duration(c.lastPassNanos.Load()),
	}
	for _, l := range s.Lag() {
		st.Installed++
		st.MaxLag = max(st.MaxLag, l)
	}
	return st
}
