// Package replica is the in-memory side of a shared store of record (Redis,
// PostgreSQL): the table of installed heads that reads are answered from,
// the install rules that keep it from going back by mistake, and the
// invalidation and revalidation machinery that keeps it in step with the
// server. Each store supplies what differs: its snapshot (what a head looks
// like as its server holds it, and how two of them compare), its reads, and
// how it delivers commits to Watch listeners.
package replica

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// Entry is one installed scope. Snap is read lock-free; Seq counts installs
// (under the store's install lock) so that a read which raced with a newer
// install is not mistaken for a regression.
type Entry[T any] struct {
	Snap      atomic.Pointer[T]
	Seq       atomic.Uint64
	Confirmed atomic.Int64 // unix nanoseconds of the last confirmation by the server
	LagLogged atomic.Int64 // unix nanoseconds of the last lag log
}

// Base returns e; a store's entry type that embeds Entry gets it promoted,
// which is how a Table reaches the shared part of the store's entries.
func (e *Entry[T]) Base() *Entry[T] { return e }

// NewEntry returns an empty entry, for a store whose entries are Entry
// itself (Rules.New).
func NewEntry[T any]() *Entry[T] { return new(Entry[T]) }

// Holder is a store's entry type: a pointer to a struct embedding Entry[T].
type Holder[T any] interface {
	comparable
	Base() *Entry[T]
}

// Rules are what a Table needs to know of a store's snapshots.
type Rules[T any, E Holder[T]] struct {
	// New returns an empty entry.
	New func() E
	// State returns the scope state a snapshot holds.
	State func(*T) *varplane.ScopeState
	// Same reports whether two snapshots are the same head as the server
	// held it (an install of the same is only a confirmation).
	Same func(a, b *T) bool
	// Older reports whether next is older than cur by the server's version:
	// a regression (a restore, a failover), unless a newer install raced
	// with the read of next.
	Older func(next, cur *T) bool
	// Unwritten, when set, reports a snapshot of a scope the server holds
	// nothing for. Such a snapshot is installed as a new entry only while
	// fewer than MaxAbsent entries hold one: reads of a scope nobody wrote
	// (a policy scope every write consults, say) are answered from memory
	// and confirmed like any head, while reads of ever new unknown scopes
	// cannot grow the table without bound (past the bound they go to the
	// server each time).
	Unwritten func(*T) bool
	MaxAbsent int
	// Failed, when set, reports a snapshot that records a failed read (a
	// vanished head, an undecodable value): reads answer its error. A read
	// that raced with the install of a failure does not replace it, since
	// it may have read the server before what made the failure (a head read
	// just before it was deleted); the next read, begun after the failure
	// was installed, decides. An own commit (OwnSeq) always replaces it.
	Failed func(*T) bool
	// Regressed logs an install that goes back from cur to next.
	Regressed func(scope varplane.Scope, cur, next *T)
}

// Table holds the installed heads of one store. Its reads are lock-free;
// InstallLocked must be called under the store's install lock, which also
// orders the store's deliveries.
type Table[T any, E Holder[T]] struct {
	rules       Rules[T, E]
	entries     sync.Map // varplane.Scope -> E
	installs    atomic.Uint64
	regressions atomic.Uint64
	absent      atomic.Int64 // entries whose snapshot is Unwritten
	wants       atomic.Pointer[func(varplane.Scope) bool]
}

// Hold hands the choice of what the table follows to an embedding cache
// (package instance), which bounds what it holds: from then on Follows
// reports only the scopes the table holds and those wants reports, so an
// invalidation for any other scope reads and installs nothing. Without it
// the table follows every scope the server announces. A table held
// already is refused (varplane.ErrHeld); release gives it back.
func (t *Table[T, E]) Hold(wants func(varplane.Scope) bool) (release func(), err error) {
	p := &wants
	if !t.wants.CompareAndSwap(nil, p) {
		return nil, varplane.ErrHeld
	}
	return func() { t.wants.CompareAndSwap(p, nil) }, nil
}

// Follows reports whether an invalidation of scope must be read: scope is
// installed, or no cache holds the table (Hold), or the cache wants it.
func (t *Table[T, E]) Follows(scope varplane.Scope) bool {
	w := t.wants.Load()
	if w == nil {
		return true
	}
	if _, ok := t.entries.Load(scope); ok {
		return true
	}
	return (*w)(scope)
}

// NewTable returns an empty table.
func NewTable[T any, E Holder[T]](rules Rules[T, E]) *Table[T, E] {
	return &Table[T, E]{rules: rules}
}

// Entry returns scope's entry, or the zero E (nil) when it is not installed.
func (t *Table[T, E]) Entry(scope varplane.Scope) E {
	if v, ok := t.entries.Load(scope); ok {
		return v.(E)
	}
	var zero E
	return zero
}

// Delete drops scope's entry; the next read of scope goes to the server.
// The caller holds the install lock, so that no install races with it.
func (t *Table[T, E]) Delete(scope varplane.Scope) {
	if v, ok := t.entries.LoadAndDelete(scope); ok && t.unwritten(v.(E).Base().Snap.Load()) {
		t.absent.Add(-1)
	}
}

// ForgetAbsent drops scope's entry when it holds a scope the server had
// nothing for: after a commit to scope whose outcome is unknown (a lost
// reply, a broken connection), an absent entry could answer "absent" for a
// scope that now has a head, so the next read goes to the server. A head
// entry stays: the commit's notification or the next pass corrects it. The
// caller holds the install lock.
func (t *Table[T, E]) ForgetAbsent(scope varplane.Scope) {
	var zero E
	if e := t.Entry(scope); e != zero && t.unwritten(e.Base().Snap.Load()) {
		t.Delete(scope)
	}
}

func (t *Table[T, E]) unwritten(snap *T) bool {
	return t.rules.Unwritten != nil && t.rules.Unwritten(snap)
}

// Absent returns the number of entries that hold a scope the server has
// nothing for.
func (t *Table[T, E]) Absent() int { return int(t.absent.Load()) }

// ReadSeq returns the install count of scope before a read starts (0 when
// it is not installed), for the Req of what that read returns.
func (t *Table[T, E]) ReadSeq(scope varplane.Scope) uint64 {
	var zero E
	if e := t.Entry(scope); e != zero {
		return e.Base().Seq.Load()
	}
	return 0
}

// ConfirmIf records that the server confirmed scope's installed head now,
// if scope is installed and its snapshot satisfies holds, and reports
// whether it did.
func (t *Table[T, E]) ConfirmIf(scope varplane.Scope, holds func(*T) bool) bool {
	var zero E
	e := t.Entry(scope)
	if e == zero || !holds(e.Base().Snap.Load()) {
		return false
	}
	e.Base().Confirmed.Store(time.Now().UnixNano())
	return true
}

// Req is one snapshot to install.
type Req[T any] struct {
	Scope varplane.Scope
	Snap  *T
	Seq   uint64 // the entry's install count when the read started (ReadSeq)
	Cold  bool   // a first read, not a commit: a new entry is not delivered
}

// OwnSeq marks the snapshot of an own commit as Req.Seq: it is exact as of
// the commit, so an installed head with a higher version is newer, never a
// regression.
const OwnSeq = ^uint64(0)

// InstallLocked puts r.Snap in place for r.Scope unless it is stale, and
// returns the change a Watch listener should see (nil when the installed
// generation did not change) and the snapshot reads now answer with. A
// snapshot older than the installed one is installed (the server's state
// wins: a restore or failover went back) and reported to Rules.Regressed,
// unless a newer install raced with its read. The caller holds the install
// lock.
func (t *Table[T, E]) InstallLocked(r Req[T]) (*varplane.ScopeChange, *T) {
	now := time.Now().UnixNano()
	snap := r.Snap
	st := t.rules.State(snap)
	v, ok := t.entries.Load(r.Scope)
	if !ok {
		if t.unwritten(snap) {
			if t.absent.Load() >= int64(t.rules.MaxAbsent) {
				return nil, snap // not remembered: the next read asks again
			}
			t.absent.Add(1)
		}
		e := t.rules.New()
		b := e.Base()
		b.Confirmed.Store(now)
		b.Snap.Store(snap)
		b.Seq.Store(1)
		t.entries.Store(r.Scope, e)
		t.installs.Add(1)
		if st.Generation == 0 || r.Cold {
			return nil, snap
		}
		return &varplane.ScopeChange{Scope: r.Scope, Generation: st.Generation, Head: st.Head}, snap
	}
	b := v.(E).Base()
	cur := b.Snap.Load()
	if t.rules.Same(cur, snap) {
		b.Confirmed.Store(now)
		return nil, cur
	}
	if r.Seq != OwnSeq && b.Seq.Load() != r.Seq && t.rules.Failed != nil && t.rules.Failed(cur) {
		return nil, cur // a read older than the failure must not clear it
	}
	if t.rules.Older(snap, cur) {
		if b.Seq.Load() != r.Seq {
			return nil, cur // a newer install raced with this read
		}
		t.regressions.Add(1)
		t.rules.Regressed(r.Scope, cur, snap)
	}
	t.absent.Add(t.absentDelta(cur, snap))
	b.Snap.Store(snap)
	b.Seq.Add(1)
	b.Confirmed.Store(now)
	t.installs.Add(1)
	if t.rules.State(cur).Generation == st.Generation {
		return nil, snap
	}
	return &varplane.ScopeChange{Scope: r.Scope, Generation: st.Generation, Head: st.Head}, snap
}

// ReplaceLocked stores snap as scope's snapshot if scope's entry has not
// been installed again since seq (a failed read's placeholder must not
// replace a newer head). The caller holds the install lock.
func (t *Table[T, E]) ReplaceLocked(scope varplane.Scope, seq uint64, snap *T) bool {
	var zero E
	e := t.Entry(scope)
	if e == zero || e.Base().Seq.Load() != seq {
		return false
	}
	t.absent.Add(t.absentDelta(e.Base().Snap.Load(), snap))
	e.Base().Snap.Store(snap)
	e.Base().Seq.Add(1)
	return true
}

// absentDelta is the change of the absent count when next replaces cur.
func (t *Table[T, E]) absentDelta(cur, next *T) int64 {
	switch was, is := t.unwritten(cur), t.unwritten(next); {
	case was && !is:
		return -1
	case is && !was:
		return 1
	}
	return 0
}

// CommitKind names a commit by what it did to its first scope: a
// notification of an activation may be answered by a head that a later
// deactivation already cleared.
func CommitKind(changes []varplane.ScopeChange) varplane.EventKind {
	if changes[0].Head != nil {
		return varplane.EventActivated
	}
	return varplane.EventDeactivated
}

// Lag returns, for every installed scope, the time since the server last
// confirmed its head.
func (t *Table[T, E]) Lag() map[varplane.Scope]time.Duration {
	now := time.Now().UnixNano()
	out := map[varplane.Scope]time.Duration{}
	t.entries.Range(func(k, v any) bool {
		out[k.(varplane.Scope)] = time.Duration(now - v.(E).Base().Confirmed.Load())
		return true
	})
	return out
}

// Summary returns the number of installed scopes and their largest lag.
func (t *Table[T, E]) Summary() (installed int, maxLag time.Duration) {
	now := time.Now().UnixNano()
	t.entries.Range(func(_, v any) bool {
		installed++
		maxLag = max(maxLag, time.Duration(now-v.(E).Base().Confirmed.Load()))
		return true
	})
	return installed, maxLag
}

// Scopes returns the installed scopes, sorted.
func (t *Table[T, E]) Scopes() []varplane.Scope {
	var out []varplane.Scope
	t.entries.Range(func(k, _ any) bool {
		out = append(out, k.(varplane.Scope))
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Installs counts the snapshots installed (new entries and changes).
func (t *Table[T, E]) Installs() uint64 { return t.installs.Load() }

// Regressions counts the installs that went back (Rules.Older).
func (t *Table[T, E]) Regressions() uint64 { return t.regressions.Load() }

// LogLags calls logf for every installed head the server has not
// confirmed for warn or longer (escalate: for escalate or longer), at most
// once a minute per scope.
func (t *Table[T, E]) LogLags(warn, escalate time.Duration, logf func(scope varplane.Scope, snap *T, lag time.Duration, escalated bool)) {
	now := time.Now().UnixNano()
	t.entries.Range(func(k, v any) bool {
		b := v.(E).Base()
		lag := time.Duration(now - b.Confirmed.Load())
		if lag < warn || time.Duration(now-b.LagLogged.Load()) < time.Minute {
			return true
		}
		b.LagLogged.Store(now)
		logf(k.(varplane.Scope), b.Snap.Load(), lag, lag >= escalate)
		return true
	})
}
