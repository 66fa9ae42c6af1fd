// Package logstate is the in-memory fold of the varplane event log, shared by
// the stores that keep everything in memory (store/memory, store/file).
//
// Concurrency contract: one writer, many readers. Reads (Load, State,
// Revision, History, Idempotency, Scopes, StateAt) are safe from any goroutine
// at any time. Load and State take no lock and allocate nothing for a scope
// that exists: each scope lives in a slot reached through one of a fixed set
// of shards, each an atomic pointer to a copy-on-write map, and the slot holds
// an atomic pointer to an immutable *varplane.ScopeState. Everything that
// changes the fold (Check, Begin and the Tx methods, Apply, Bulk) must be
// called by a single writer at a time; the stores hold a mutex or run a single
// committer goroutine for that. A transaction's events become visible only
// when its Commit returns, so a store can make them durable first.
//
// Values returned by reads are shared immutable snapshots: do not mutate them.
package logstate

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/varplane/varplane"
)

const numShards = 256

type shardMap = map[varplane.Scope]*slot

// wstate is the writer's view of a scope: what the next published snapshot
// is built from.
type wstate struct {
	gen varplane.Generation
	// headIdx is 1 + the history index of the activation that installed the
	// head, 0 when the scope has no head.
	headIdx int
	// head is the built head for headIdx; nil while a bulk load has not built
	// it yet.
	head *varplane.Head
	// rejIdx is 1 + the history index of the last rejected event, 0 if none.
	rejIdx int
	// rejected is the published copy of the event at rejIdx.
	rejected *varplane.Event
	// chain is the scope's chain head: the link of its last chained event.
	chain varplane.ChainHead
}

// slot holds everything the fold knows of one scope.
type slot struct {
	scope varplane.Scope
	state atomic.Pointer[varplane.ScopeState]

	// w is owned by the writer.
	w wstate

	// mu guards revs and hist against readers; only the writer changes them.
	mu   sync.RWMutex
	revs map[varplane.Revision]*varplane.RevisionRecord
	hist []varplane.Event
	// gone lists the revisions retention reclaimed (retain.go).
	gone map[varplane.Revision]bool
	// refs locates the documents of the records of revs held without
	// them (lazy records); block holds revisions still on disk, loaded
	// into revs on first use (bodies.go).
	refs  map[varplane.Revision]BodyRef
	block RevisionBlock

	// bulk indexes, during a Bulk load, the events of this scope that wait
	// in the load's arena (appended to hist, exactly sized, at Commit).
	bulk  []int
	dirty bool
	// latest and headDoc are, during a Bulk load, the revisions whose
	// documents it keeps in memory for now (tx.go, ApplyWithRef).
	latest, headDoc bulkDoc
}

// State is the fold of one event log. The zero value is not usable: call New.
type State struct {
	seed   maphash.Seed
	shards [numShards]atomic.Pointer[shardMap]

	// desc maps a scope prefix to every known scope strictly below it; it is
	// owned by the writer and used to plan subtree deactivations.
	desc map[varplane.Scope][]varplane.Scope

	scopesMu sync.Mutex
	scopes   []varplane.Scope
	sorted   bool

	idemMu sync.RWMutex
	idem   map[string]*varplane.IdempotencyRecord

	// view is held (read) by States while it reads several scopes, and
	// (write) by Tx.Commit while it publishes a transaction's snapshots,
	// so that a read of several scopes is one moment of the log. A read of
	// one scope (Load, State) takes no lock.
	view sync.RWMutex
}

// New returns an empty fold.
func New() *State {
	return &State{
		seed: maphash.MakeSeed(),
		desc: make(map[varplane.Scope][]varplane.Scope),
		idem: make(map[string]*varplane.IdempotencyRecord),
	}
}

func (st *State) shard(s varplane.Scope) *atomic.Pointer[shardMap] {
	return &st.shards[maphash.String(st.seed, string(s))%numShards]
}

func (st *State) lookup(s varplane.Scope) *slot {
	m := st.shard(s).Load()
	if m == nil {
		return nil
	}
	return (*m)[s]
}

// Load returns the current snapshot of scope s, or nil when s has never
// appeared in the log. It takes no lock and does not allocate.
func (st *State) Load(s varplane.Scope) *varplane.ScopeState {
	sl := st.lookup(s)
	if sl == nil {
		return nil
	}
	return sl.state.Load()
}

// State returns the current snapshot of scope s; a scope never written has a
// zero state (generation 0, no head).
func (st *State) State(s varplane.Scope) *varplane.ScopeState {
	if ss := st.Load(s); ss != nil {
		return ss
	}
	return &varplane.ScopeState{Scope: s}
}

// States returns the current snapshots of scopes as of one moment: no
// commit is published between the first and the last (each a zero state
// for a scope never written). A scope named twice is the same snapshot.
func (st *State) States(scopes []varplane.Scope) []*varplane.ScopeState {
	out := make([]*varplane.ScopeState, len(scopes))
	st.view.RLock()
	defer st.view.RUnlock()
	for i, s := range scopes {
		out[i] = st.State(s)
	}
	return out
}

// Revision returns the stored revision rev of scope s with its document
// (read from disk when the fold keeps it there; false also when that read
// fails: RevisionOrGone tells why).
func (st *State) Revision(s varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, bool) {
	sl := st.lookup(s)
	if sl == nil {
		return nil, false
	}
	rec, ok, err := sl.revision(rev)
	return rec, ok && err == nil
}

// History returns the events of scope s in log order, including the
// deactivations that subtree deactivations of its ancestors synthesized for
// it. The slice is shared (its capacity is clipped, so appending copies).
func (st *State) History(s varplane.Scope) []varplane.Event {
	sl := st.lookup(s)
	if sl == nil {
		return []varplane.Event{}
	}
	sl.mu.RLock()
	h := sl.hist[:len(sl.hist):len(sl.hist)]
	sl.mu.RUnlock()
	return h
}

// Idempotency returns the record of key.
func (st *State) Idempotency(key string) (*varplane.IdempotencyRecord, bool) {
	st.idemMu.RLock()
	rec, ok := st.idem[key]
	st.idemMu.RUnlock()
	return rec, ok
}

// Scopes returns every scope that has appeared in the log, sorted. The slice
// is the caller's.
func (st *State) Scopes() []varplane.Scope {
	st.scopesMu.Lock()
	defer st.scopesMu.Unlock()
	if !st.sorted {
		slices.Sort(st.scopes)
		st.sorted = true
	}
	return slices.Clone(st.scopes)
}

// StateAt returns the state of scope s right after the event that allocated
// generation gen, by folding the prefix of its history. Generation 0 is the
// never-activated zero state. It returns a not-found error when s has never
// appeared in the log or never reached gen.
func (st *State) StateAt(ctx context.Context, s varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	sl := st.lookup(s)
	if sl == nil {
		return nil, &varplane.Error{Code: varplane.CodeNotFound, Message: "scope " + quote(s) + " has no events"}
	}
	hist := st.History(s)
	return FoldAt(ctx, s, hist, gen, func(r varplane.Revision) (*varplane.RevisionRecord, error) {
		return st.RevisionOrGone(s, r)
	})
}

// addScope registers a scope that appears for the first time. Writer only.
func (st *State) addScope(s varplane.Scope) {
	for p, ok := s.Parent(); ok; p, ok = p.Parent() {
		st.desc[p] = append(st.desc[p], s)
	}
	st.scopesMu.Lock()
	st.scopes = append(st.scopes, s)
	st.sorted = false
	st.scopesMu.Unlock()
}

func newSlot(s varplane.Scope) *slot {
	return &slot{scope: s, revs: make(map[varplane.Revision]*varplane.RevisionRecord, 1)}
}

// installSlots publishes new slots, copying each affected shard map once.
func (st *State) installSlots(slots []*slot) {
	if len(slots) == 0 {
		return
	}
	byShard := make(map[*atomic.Pointer[shardMap]][]*slot)
	for _, sl := range slots {
		sh := st.shard(sl.scope)
		byShard[sh] = append(byShard[sh], sl)
	}
	for sh, add := range byShard {
		old := sh.Load()
		var n shardMap
		if old == nil {
			n = make(shardMap, len(add))
		} else {
			n = make(shardMap, len(*old)+len(add))
			for k, v := range *old {
				n[k] = v
			}
		}
		for _, sl := range add {
			n[sl.scope] = sl
		}
		sh.Store(&n)
	}
}

// insertInPlace adds a slot without copying its shard; only valid while no
// reader can see the fold (bulk loading).
func (st *State) insertInPlace(sl *slot) {
	sh := st.shard(sl.scope)
	m := sh.Load()
	if m == nil {
		n := make(shardMap)
		m = &n
		sh.Store(m)
	}
	(*m)[sl.scope] = sl
}

// publish builds and stores the snapshot of sl from its writer state.
func publish(sl *slot) {
	w := &sl.w
	if w.headIdx > 0 && w.head == nil {
		ev := &sl.hist[w.headIdx-1]
		w.head = varplane.NewHead(ev, sl.revs[ev.Revision])
	}
	if w.headIdx == 0 {
		w.head = nil
	}
	if w.rejIdx > 0 && w.rejected == nil {
		cp := sl.hist[w.rejIdx-1]
		w.rejected = &cp
	}
	sl.state.Store(&varplane.ScopeState{Scope: sl.scope, Generation: w.gen, Head: w.head, LastRejected: w.rejected, Chain: w.chain})
}
