package postgres

import (
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/replica"
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

// maxAbsent bounds the installed scopes without a row (replica.Rules).
const maxAbsent = 4096

// entry is one installed scope.
type entry = replica.Entry[snapshot]

// newTable returns the table of installed heads: versions are the heads
// row's; a scope without a row is installed as such (up to maxAbsent of
// them), so that reading it again (the control plane reads its policy
// scope on every write) costs no query, and a notification or a pass
// installs its first commit as for any other head.
func (s *Store) newTable() *replica.Table[snapshot, *entry] {
	return replica.NewTable(replica.Rules[snapshot, *entry]{
		New:       replica.NewEntry[snapshot],
		State:     func(sn *snapshot) *varplane.ScopeState { return sn.state },
		Same:      (*snapshot).same,
		Older:     func(next, cur *snapshot) bool { return next.version <= cur.version },
		Unwritten: func(sn *snapshot) bool { return sn.version == noRow },
		MaxAbsent: maxAbsent,
		Regressed: func(scope varplane.Scope, cur, next *snapshot) {
			s.log.Error("postgres store: head went back; installing what the database holds (a restore from backup or a failover may have lost a commit: publish it again)",
				"scope", string(scope), "fromGeneration", cur.state.Generation, "toGeneration", next.state.Generation,
				"fromVersion", cur.version, "toVersion", next.version)
		},
	})
}

func (s *Store) entry(scope varplane.Scope) *entry { return s.entries.Entry(scope) }

// ownSeq marks the snapshot of an own commit (replica.OwnSeq).
const ownSeq = replica.OwnSeq

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

// installLocked installs r (replica.Table.InstallLocked). The caller holds
// s.mu.
func (s *Store) installLocked(r installReq) (*varplane.ScopeChange, *snapshot) {
	return s.entries.InstallLocked(replica.Req[snapshot]{Scope: r.scope, Snap: r.snap, Seq: r.seq, Cold: r.cold})
}

// installAndDeliver installs every snapshot of one commit and delivers the
// resulting Commit (if any head changed) to the listeners, under s.mu so
// that deliveries keep install order.
func (s *Store) installAndDeliver(reqs []installReq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changes []varplane.ScopeChange
	var missed []varplane.Commit
	for _, r := range reqs {
		from := varplane.Generation(0)
		e := s.entry(r.scope)
		if e != nil {
			from = e.Snap.Load().state.Generation
		}
		ch, _ := s.installLocked(r)
		if ch == nil {
			continue
		}
		if e != nil && len(r.gap) > 0 && from == r.gapFrom {
			for _, g := range r.gap {
				ch := []varplane.ScopeChange{g}
				missed = append(missed, varplane.Commit{Kind: replica.CommitKind(ch), Scope: g.Scope, Changes: ch})
			}
		}
		changes = append(changes, *ch)
	}
	if len(missed) > 0 {
		s.stats.watchCommits.Add(uint64(len(missed)))
		s.watchers.Notify(missed)
	}
	// A create or a rejection changes no head, but the read back after
	// one may install a head committed meanwhile: that change is
	// delivered like any other, or nothing would (its own notification,
	// or the next pass, finds it installed already).
	if len(changes) == 0 {
		return
	}
	kind := replica.CommitKind(changes)
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
func (s *Store) readSeq(scope varplane.Scope) uint64 { return s.entries.ReadSeq(scope) }

// Lag returns, for every installed scope, the time since the database last
// confirmed its head (by an install, a notification or a revalidation
// pass).
func (s *Store) Lag() map[varplane.Scope]time.Duration { return s.entries.Lag() }

// installedScopes returns the installed scopes, sorted.
func (s *Store) installedScopes() []varplane.Scope { return s.entries.Scopes() }

// counters are the store's monotonic counters, exported through Stats.
type counters struct {
	commits, commitConflicts, commitErrors         atomic.Uint64
	notifications, notificationReads, notDrop      atomic.Uint64
	logFollows                                     atomic.Uint64
	passes, confirms, confirmChanged, confirmErr   atomic.Uint64
	coldLoads, readErrors, decodeErrors            atomic.Uint64
	watchCommits                                   atomic.Uint64
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
	NotificationReads    uint64 // scopes read because of a notification
	LogFollows           uint64 // of those, activations read from the log as the next commit of the installed head
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
	Installed            int           // scopes held in memory, but those remembered as having no row
	Absent               int           // scopes remembered as having no row (at most maxAbsent)
	MaxLag               time.Duration // largest lag over installed scopes
	LastPassDuration     time.Duration
}

// Stats returns the current counters and gauges.
func (s *Store) Stats() Stats {
	c := &s.stats
	st := Stats{
		Commits: c.commits.Load(), CommitConflicts: c.commitConflicts.Load(), CommitErrors: c.commitErrors.Load(),
		Notifications: c.notifications.Load(), NotificationReads: c.notificationReads.Load(), LogFollows: c.logFollows.Load(), NotificationsDropped: c.notDrop.Load(),
		RevalidationPasses: c.passes.Load(), Confirmations: c.confirms.Load(), ConfirmChanged: c.confirmChanged.Load(), ConfirmErrors: c.confirmErr.Load(),
		ColdLoads: c.coldLoads.Load(), ReadErrors: c.readErrors.Load(), DecodeErrors: c.decodeErrors.Load(),
		Regressions: s.entries.Regressions(), Installs: s.entries.Installs(), WatchCommits: c.watchCommits.Load(),
		Listens: c.listens.Load(), Notified: c.notified.Load(), NotifyDropped: c.notifyDropped.Load(), NotifyErrors: c.notifyErrors.Load(),
		Batches: c.batches.Load(), BatchedCalls: c.batchedCalls.Load(), BatchRetries: c.batchRetries.Load(),
		LastPassDuration: time.Duration(c.lastPassNanos.Load()),
	}
	st.Installed, st.MaxLag = s.entries.Summary()
	st.Absent = s.entries.Absent()
	st.Installed -= st.Absent
	return st
}
