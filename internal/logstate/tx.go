package logstate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/varplane/varplane"
)

// pending is what a transaction changes in one scope before Commit.
type pending struct {
	scope   varplane.Scope
	slot    *slot // nil: the scope first appears in this transaction
	w       wstate
	revs    []*varplane.RevisionRecord
	hist    []varplane.Event
	changed bool
}

// Tx is a batch of events, each validated against the fold including the
// events before it in the batch, published together by Commit. Nothing of a
// Tx is visible to readers before Commit; Discard drops it. A Tx belongs to
// the single writer of its State and is reusable after Commit or Discard.
type Tx struct {
	st   *State
	bulk bool
	// unchained: a Bulk load of a log written before chains (see
	// BulkUnchained).
	unchained bool
	// reclaiming: the revision-created event being applied is one whose
	// body was reclaimed (ApplyReclaimed).
	reclaiming bool
	n          int
	pend       map[varplane.Scope]*pending
	order      []*pending
	idem       map[string]*varplane.IdempotencyRecord
	commits    []varplane.Commit
	dirty      []*slot
	arena      [][]varplane.Event
	arenaN     int
	last       *slot // Tx.slot's cache
	// spare holds the pendings of ended transactions, emptied, for the
	// next ones: the committer's batches then stage their events in
	// memory they have used before instead of allocating it each batch.
	spare []*pending
}

// The bounds of what a Tx keeps for reuse: pendings beyond maxSpare, or
// staging more than spareHist events or spareRevs revisions, are left to
// the collector (one large batch must not stay resident).
const (
	maxSpare  = 256
	spareHist = 64
	spareRevs = 32
)

const arenaChunk = 4096

// slot is st.lookup with a one-entry cache: an event looks its scope up
// several times (check, revision lookups, apply), and a log's consecutive
// events are often of one scope. A slot, once installed, is never removed,
// so a cached one stays right; a miss is not cached.
func (tx *Tx) slot(s varplane.Scope) *slot {
	if c := tx.last; c != nil && c.scope == s {
		return c
	}
	sl := tx.st.lookup(s)
	if sl != nil {
		tx.last = sl
	}
	return sl
}

// Begin starts a transaction. Only one transaction may be open at a time
// (the single-writer rule).
func (st *State) Begin() *Tx {
	return &Tx{
		st:   st,
		pend: make(map[varplane.Scope]*pending),
		idem: make(map[string]*varplane.IdempotencyRecord),
	}
}

// Bulk starts a loading transaction that folds events straight into the
// state instead of staging them: it is much cheaper per event, and only
// correct while no reader can observe the State (before the store that owns
// it is returned to anyone). Commit publishes the snapshots of every scope
// the load touched; Discard is not possible (the state is left half-loaded
// and must be thrown away). Every event it applies must carry the next link
// of its scope's chain (see Apply).
func (st *State) Bulk() *Tx {
	return &Tx{st: st, bulk: true}
}

// BulkUnchained is Bulk for a log written before stores kept chains: its
// events carry no link (Seq 0, no Hash), and are folded without one, so
// that the chain heads stay at zero. An event that does carry a link is
// refused.
func (st *State) BulkUnchained() *Tx {
	return &Tx{st: st, bulk: true, unchained: true}
}

// Len returns the number of events in the transaction.
func (tx *Tx) Len() int { return tx.n }

// Check validates ev as the kind's commit would (Append for every kind but
// deactivated, AppendSubtree for deactivated) against the fold including the
// transaction's events, without applying it. It does not modify ev.
func (tx *Tx) Check(ev *varplane.Event, expected varplane.Generation) error {
	mode := modeAppend
	if ev.Kind == varplane.EventDeactivated {
		mode = modeSubtree
	}
	e, err := normalize(ev, expected)
	if err != nil {
		return err
	}
	if mode == modeSubtree {
		e.Cascade = tx.PlanSubtree(e.Scope)
	}
	return tx.check(&e, expected, mode)
}

// Check validates ev against the published fold without applying it, like
// Tx.Check. Writer only.
func (st *State) Check(ev *varplane.Event, expected varplane.Generation) error {
	return (&Tx{st: st}).Check(ev, expected)
}

// Append validates ev with the checks of varplane.Store.Append (a conflict
// error carrying the current generation when the scope is not at expected,
// not-found for an unknown revision, ErrRevisionExists,
// ErrDuplicateIdempotencyKey, bad-request for a malformed event or for a
// deactivation) and folds it into the transaction. It returns the event as it
// will be stored: a normalised copy (UTC timestamp without monotonic reading,
// compacted document, generation and previousGeneration filled in from
// expected when unset). ev itself is not modified. On error the transaction
// is unchanged.
func (tx *Tx) Append(ev *varplane.Event, expected varplane.Generation) (*varplane.Event, error) {
	return tx.submit(ev, expected, modeAppend)
}

// AppendSubtree validates a deactivated event for ev.Scope at expected+1 and
// folds it together with the deactivation of every active descendant, each at
// its own next generation (the returned event's Cascade). Errors as Append.
func (tx *Tx) AppendSubtree(ev *varplane.Event, expected varplane.Generation) (*varplane.Event, error) {
	return tx.submit(ev, expected, modeSubtree)
}

func (tx *Tx) submit(ev *varplane.Event, expected varplane.Generation, mode int) (*varplane.Event, error) {
	e, err := normalize(ev, expected)
	if err != nil {
		return nil, err
	}
	if mode == modeSubtree && ev.Kind == varplane.EventDeactivated && e.Scope.Valid() {
		e.Cascade = tx.PlanSubtree(e.Scope)
	}
	if err := tx.check(&e, expected, mode); err != nil {
		return nil, err
	}
	tx.apply(&e)
	return &e, nil
}

// Apply validates ev as a logged event (the expected generation is the one
// before ev.Generation; a deactivated event's Cascade must list exactly the
// active descendants, each at its next generation; ev.Seq and ev.Hash must
// be the next link of its scope's chain, a *varplane.ChainError otherwise)
// and folds it. It is the replay path: ev is taken as stored, without normalisation, and is not
// retained (a copy is). A document is taken to be valid JSON, as the log
// decoder checks its grammar while delimiting it; Apply does not parse it
// again.
func (tx *Tx) Apply(ev *varplane.Event) error {
	var expected varplane.Generation
	if ev.Kind == varplane.EventActivated || ev.Kind == varplane.EventDeactivated {
		if ev.Generation == 0 {
			return badRequest("%s event for scope %q has no generation", ev.Kind, ev.Scope)
		}
		expected = ev.Generation - 1
	}
	if err := tx.check(ev, expected, modeReplay); err != nil {
		return err
	}
	e := *ev
	if len(e.Cascade) > 0 {
		e.Cascade = slices.Clone(e.Cascade)
	}
	tx.apply(&e)
	return nil
}

// ApplyWithRef is Apply for a revision-created event of a Bulk load whose
// document is also in the log, at body: the fold keeps ev.Document only
// while the revision may still be the scope's head when the load ends (it
// is the scope's latest revision, or its head), and then leaves it on disk,
// to be read back when a read asks for it. ev.Document may share memory
// with other documents of the load: CommitBulk gives each head it keeps a
// copy of its own. A load with such events must end with CommitBulk.
func (tx *Tx) ApplyWithRef(ev *varplane.Event, body BodyRef) error {
	if !tx.bulk || ev.Kind != varplane.EventRevisionCreated || body.Src == nil || body.Len <= 0 {
		return badRequest("a %s event for scope %q with its document on disk", ev.Kind, ev.Scope)
	}
	if err := tx.check(ev, 0, modeReplay); err != nil {
		return err
	}
	e := *ev
	sl := tx.apply(&e)
	prev := sl.latest
	sl.latest = bulkDoc{rev: sl.revs[e.Revision].Revision, ref: body, idx: tx.arenaN - 1, set: true}
	tx.release(sl, prev)
	return nil
}

// ApplyReclaimed is Apply for a logged revision-created event whose body
// retention reclaimed: a compacted log keeps the event, without its
// document. The revision is recorded as reclaimed (RevisionOrGone answers
// ErrReclaimed) rather than stored, and the event joins the history without
// a document. Bulk loads only.
func (tx *Tx) ApplyReclaimed(ev *varplane.Event) error {
	if !tx.bulk || ev.Kind != varplane.EventRevisionCreated || len(ev.Document) != 0 {
		return badRequest("a %s event for scope %q as a reclaimed revision", ev.Kind, ev.Scope)
	}
	if err := tx.check(ev, 0, modeReclaimed); err != nil {
		return err
	}
	e := *ev
	tx.reclaiming = true
	tx.apply(&e)
	tx.reclaiming = false
	return nil
}

// bulkDoc is a revision a Bulk load keeps in memory for now (see
// ApplyWithRef): where its document is in the log, and the load's arena
// index of its revision-created event.
type bulkDoc struct {
	rev varplane.Revision
	ref BodyRef
	idx int
	set bool
}

// release leaves d's document on disk unless d is still the scope's latest
// revision or its head. Bulk loads only.
func (tx *Tx) release(sl *slot, d bulkDoc) {
	if !d.set || (sl.latest.set && sl.latest.rev == d.rev) || (sl.headDoc.set && sl.headDoc.rev == d.rev) {
		return
	}
	rec := sl.revs[d.rev]
	if rec == nil || rec.Document == nil {
		return
	}
	rec.Document = nil // no reader sees the fold during a bulk load
	tx.arena[d.idx/arenaChunk][d.idx%arenaChunk].Document = OnDisk
	if sl.refs == nil {
		sl.refs = make(map[varplane.Revision]BodyRef)
	}
	sl.refs[d.rev] = d.ref
}

// bulkHead records, in a Bulk load, that sl's head is now rev (none when
// empty), releasing the previous head's document.
func (tx *Tx) bulkHead(sl *slot, rev varplane.Revision) {
	prev := sl.headDoc
	sl.headDoc = bulkDoc{}
	if rev != "" {
		if sl.latest.set && sl.latest.rev == rev {
			sl.headDoc = sl.latest
		} else {
			sl.headDoc = bulkDoc{rev: rev, set: true, idx: -1} // read at CommitBulk if on disk
		}
	}
	if prev.idx >= 0 {
		tx.release(sl, prev)
	}
}

// Apply folds one logged event and publishes it at once; see Tx.Apply.
// Writer only.
func (st *State) Apply(ev *varplane.Event) ([]varplane.Commit, error) {
	tx := st.Begin()
	if err := tx.Apply(ev); err != nil {
		return nil, err
	}
	return tx.Commit(), nil
}

// PlanSubtree returns the cascade of a deactivation of parent: every
// descendant that has an active head, each at its own generation+1, sorted by
// scope.
func (tx *Tx) PlanSubtree(parent varplane.Scope) []varplane.CascadeEntry {
	var out []varplane.CascadeEntry
	for _, d := range tx.st.desc[parent] {
		if w, _ := tx.view(d); w.headIdx > 0 {
			out = append(out, varplane.CascadeEntry{Scope: d, Generation: w.gen + 1})
		}
	}
	if !tx.bulk {
		for _, p := range tx.order {
			if p.slot == nil && p.w.headIdx > 0 && p.scope.IsDescendantOf(parent) {
				out = append(out, varplane.CascadeEntry{Scope: p.scope, Generation: p.w.gen + 1})
			}
		}
	}
	slices.SortFunc(out, func(a, b varplane.CascadeEntry) int { return cmp.Compare(a.Scope, b.Scope) })
	return out
}

// Commit publishes the transaction's events and returns the commits that
// changed a head, in order, for the store's watchers. The Tx is then empty
// and reusable.
func (tx *Tx) Commit() []varplane.Commit {
	st := tx.st
	if tx.bulk {
		if err := tx.CommitBulk(); err != nil {
			// Only a load with bodies on disk (ApplyWithRef) can fail here, and
			// it must use CommitBulk.
			panic("logstate: bulk Commit: " + err.Error())
		}
		return nil
	}
	var fresh []*slot
	// The transaction's snapshots are published together: a read of
	// several scopes (States) sees all of them or none.
	st.view.Lock()
	defer st.view.Unlock()
	for _, p := range tx.order {
		sl := p.slot
		if sl == nil {
			sl = newSlot(p.scope)
			fresh = append(fresh, sl)
		}
		if len(p.revs) > 0 || len(p.hist) > 0 {
			sl.mu.Lock()
			for _, r := range p.revs {
				sl.revs[r.Revision] = r
				delete(sl.refs, r.Revision)
			}
			sl.hist = appendHist(sl.hist, p.hist)
			sl.mu.Unlock()
		}
		if p.changed || p.slot == nil {
			sl.w = p.w
			publish(sl)
		}
	}
	st.installSlots(fresh)
	for _, sl := range fresh {
		st.addScope(sl.scope)
	}
	if len(tx.idem) > 0 {
		st.idemMu.Lock()
		for k, r := range tx.idem {
			st.idem[k] = r
		}
		st.idemMu.Unlock()
	}
	commits := tx.commits
	tx.Discard()
	return commits
}

// CommitBulk ends a Bulk load: it publishes the snapshots of every scope
// the load touched, reading from disk the document of each final head that
// the load left there (ApplyWithRef). An error leaves the fold unusable.
func (tx *Tx) CommitBulk() error {
	// The scopes are independent and nothing reads the fold yet: finish
	// them on every CPU (this step follows the whole log's decoding, so
	// nothing else runs beside it).
	parts := min(runtime.GOMAXPROCS(0), len(tx.dirty))
	if tx.arenaN < 1<<15 {
		parts = 1 // not worth a goroutine
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for k := range parts {
		wg.Add(1)
		go func(dirty []*slot) {
			defer wg.Done()
			for _, sl := range dirty {
				if err := tx.finishBulk(sl); err != nil {
					errs[k] = err
					return
				}
			}
		}(tx.dirty[len(tx.dirty)*k/parts : len(tx.dirty)*(k+1)/parts])
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	tx.dirty, tx.arena, tx.arenaN = nil, nil, 0
	tx.n = 0
	return nil
}

// finishBulk gives sl its loaded events, exactly sized, and publishes it.
func (tx *Tx) finishBulk(sl *slot) error {
	latest := sl.latest
	sl.latest = bulkDoc{}
	tx.release(sl, latest)
	if h := sl.headDoc; h.set && h.idx >= 0 {
		// The head's document came with the load (ApplyWithRef), which
		// may share its memory with others: give it its own.
		if rec := sl.revs[h.rev]; rec != nil && rec.Document != nil {
			rec.Document = bytes.Clone(rec.Document)
			tx.arena[h.idx/arenaChunk][h.idx%arenaChunk].Document = rec.Document
		}
	}
	sl.headDoc = bulkDoc{}
	if len(sl.bulk) > 0 {
		h := make([]varplane.Event, len(sl.hist), len(sl.hist)+len(sl.bulk))
		copy(h, sl.hist)
		for _, i := range sl.bulk {
			h = append(h, tx.arena[i/arenaChunk][i%arenaChunk])
		}
		sl.hist, sl.bulk = h, nil
	}
	sl.dirty = false
	if err := headResident(sl); err != nil {
		return err
	}
	publish(sl)
	return nil
}

// headResident makes the document of sl's head (after a bulk load) part of
// the fold. Writer only.
func headResident(sl *slot) error {
	if sl.w.headIdx == 0 || sl.w.head != nil {
		return nil
	}
	ev := &sl.hist[sl.w.headIdx-1]
	rec := sl.revs[ev.Revision]
	if rec == nil {
		return badRequest("the head of scope %q, revision %s, was reclaimed", sl.scope, ev.Revision)
	}
	if rec.Document != nil {
		return nil
	}
	_, err := sl.resident(rec)
	return err
}

// Discard drops the transaction's events; the Tx is then empty and reusable.
// A Bulk transaction cannot be discarded: its events are already folded.
func (tx *Tx) Discard() {
	if tx.bulk {
		return
	}
	clear(tx.pend)
	for _, p := range tx.order {
		tx.recycle(p)
	}
	clear(tx.order)
	tx.order = tx.order[:0]
	clear(tx.idem)
	tx.commits = nil
	tx.n = 0
}

// view returns the writer state of s including the transaction.
func (tx *Tx) view(s varplane.Scope) (wstate, bool) {
	if p := tx.pend[s]; p != nil {
		return p.w, true
	}
	if sl := tx.slot(s); sl != nil {
		return sl.w, true
	}
	return wstate{}, false
}

// revE is rev after loading the scope's revision block, if it has one.
func (tx *Tx) revE(s varplane.Scope, r varplane.Revision) (*varplane.RevisionRecord, error) {
	if sl := tx.slot(s); sl != nil && (!tx.bulk || sl.block != nil) {
		// (A bulk load is the only writer and has no readers: it may look
		// at block without the lock.)
		if err := sl.ensure(); err != nil {
			return nil, err
		}
	}
	return tx.rev(s, r), nil
}

// rev returns the record r of s as the transaction sees it (possibly
// without its document: see bodies.go); the scope's block must be loaded
// (revE).
func (tx *Tx) rev(s varplane.Scope, r varplane.Revision) *varplane.RevisionRecord {
	if p := tx.pend[s]; p != nil {
		for _, rec := range p.revs {
			if rec.Revision == r {
				return rec
			}
		}
	}
	sl := tx.slot(s)
	if sl == nil {
		return nil
	}
	if tx.bulk {
		return sl.revs[r]
	}
	sl.mu.RLock()
	rec := sl.revs[r]
	sl.mu.RUnlock()
	return rec
}

func (tx *Tx) idemRec(k string) bool {
	if _, ok := tx.idem[k]; ok {
		return true
	}
	if tx.bulk {
		_, ok := tx.st.idem[k]
		return ok
	}
	_, ok := tx.st.Idempotency(k)
	return ok
}

// target is the mutable side of one scope in a transaction.
type target struct {
	p  *pending
	sl *slot
	tx *Tx // set in bulk mode, for the arena
}

func (tx *Tx) target(s varplane.Scope) target {
	if tx.bulk {
		sl := tx.slot(s)
		if sl == nil {
			sl = newSlot(s)
			tx.st.insertInPlace(sl)
			tx.st.addScope(s)
		}
		if !sl.dirty {
			sl.dirty = true
			tx.dirty = append(tx.dirty, sl)
		}
		return target{sl: sl, tx: tx}
	}
	p := tx.pend[s]
	if p == nil {
		p = tx.newPending(s)
		if sl := tx.slot(s); sl != nil {
			p.slot, p.scope, p.w = sl, sl.scope, sl.w
		}
		tx.pend[s] = p
		tx.order = append(tx.order, p)
	}
	return target{p: p}
}

func (t target) scope() varplane.Scope {
	if t.p != nil {
		return t.p.scope
	}
	return t.sl.scope
}

// w returns the writer state to change and marks the scope changed.
func (t target) w() *wstate {
	if t.p != nil {
		t.p.changed = true
		return &t.p.w
	}
	return &t.sl.w
}

func (t target) gen() varplane.Generation {
	if t.p != nil {
		return t.p.w.gen
	}
	return t.sl.w.gen
}

// newPending returns an empty pending for s, a spare one when there is.
func (tx *Tx) newPending(s varplane.Scope) *pending {
	n := len(tx.spare)
	if n == 0 {
		return &pending{scope: s}
	}
	p := tx.spare[n-1]
	tx.spare[n-1] = nil
	tx.spare = tx.spare[:n-1]
	p.scope = s
	return p
}

// recycle empties p (dropping what it referenced) and keeps it for
// newPending, unless the spares are full or p grew past their bounds.
func (tx *Tx) recycle(p *pending) {
	if len(tx.spare) >= maxSpare || cap(p.hist) > spareHist || cap(p.revs) > spareRevs {
		return
	}
	clear(p.hist)
	clear(p.revs)
	*p = pending{hist: p.hist[:0], revs: p.revs[:0]}
	tx.spare = append(tx.spare, p)
}

// appendHist appends add to a scope's history. The history only grows,
// and its readers hold views clipped to their length, so when it needs
// room it doubles instead of growing by the quarter append gives a large
// slice: a scope taking a stream of commits then copies each event about
// once in all instead of about four times, and allocates half as much.
// Past histMaxDouble events it grows by a quarter again, so that a very
// long history does not hold as much again in spare room.
func appendHist(hist, add []varplane.Event) []varplane.Event {
	if n := len(hist) + len(add); n > cap(hist) && len(hist) < histMaxDouble {
		grown := make([]varplane.Event, len(hist), max(n, 2*cap(hist), 16))
		copy(grown, hist)
		hist = grown
	}
	return append(hist, add...)
}

// histMaxDouble is the history length past which appendHist lets append
// grow it (by about a quarter) instead of doubling it.
const histMaxDouble = 1 << 18

// addHist appends ev to the scope's history and returns 1 + its index.
func (t target) addHist(ev varplane.Event) int {
	if t.p != nil {
		t.p.hist = append(t.p.hist, ev)
		n := len(t.p.hist)
		if t.p.slot != nil {
			n += len(t.p.slot.hist)
		}
		return n
	}
	tx := t.tx
	if tx.arenaN%arenaChunk == 0 {
		tx.arena = append(tx.arena, make([]varplane.Event, 0, arenaChunk))
	}
	last := &tx.arena[len(tx.arena)-1]
	*last = append(*last, ev)
	t.sl.bulk = append(t.sl.bulk, tx.arenaN)
	tx.arenaN++
	return len(t.sl.hist) + len(t.sl.bulk)
}

func (t target) addRev(rec *varplane.RevisionRecord) {
	if t.p != nil {
		t.p.revs = append(t.p.revs, rec)
		return
	}
	t.sl.revs[rec.Revision] = rec
}

// apply folds a checked event into the transaction; in a Bulk load it
// returns the scope's slot. A revision-created event whose document is
// OnDisk creates a record without one.
func (tx *Tx) apply(e *varplane.Event) *slot {
	tx.n++
	t := tx.target(e.Scope)
	e.Scope = t.scope() // share one string per scope across its history
	if !tx.unchained {
		// The event's link: set here, in the step that commits it, whatever
		// the caller put there; on replay, taken as logged (check verified
		// it). Cascade entries synthesised below take none.
		w := t.w()
		if tx.bulk {
			w.chain = varplane.ChainHead{Seq: e.Seq, Hash: e.Hash}
		} else {
			w.chain = w.chain.Next(e)
		}
	}
	switch e.Kind {
	case varplane.EventRevisionCreated:
		if tx.reclaiming {
			if t.sl.gone == nil {
				t.sl.gone = make(map[varplane.Revision]bool)
			}
			t.sl.gone[e.Revision] = true
			t.addHist(*e)
			break
		}
		doc := e.Document
		if IsOnDisk(doc) {
			doc = nil
		}
		rec := &varplane.RevisionRecord{
			Scope:         e.Scope,
			Revision:      e.Revision,
			Document:      doc,
			SchemaID:      e.SchemaID,
			SchemaVersion: e.SchemaVersion,
			Actor:         e.Actor,
			CreatedAt:     e.Timestamp,
		}
		t.addRev(rec)
		t.addHist(*e)
	case varplane.EventActivated:
		if rec := tx.rev(e.Scope, e.Revision); rec != nil {
			e.Revision = rec.Revision
		}
		idx := t.addHist(*e)
		w := t.w()
		w.gen, w.headIdx, w.head = e.Generation, idx, nil
		if tx.bulk {
			tx.bulkHead(t.sl, e.Revision)
		}
		if !tx.bulk {
			w.head = varplane.NewHead(e, tx.rev(e.Scope, e.Revision))
			tx.commits = append(tx.commits, varplane.Commit{
				Kind:    e.Kind,
				Scope:   e.Scope,
				Changes: []varplane.ScopeChange{{Scope: e.Scope, Generation: e.Generation, Head: w.head}},
			})
		}
	case varplane.EventDeactivated:
		t.addHist(*e)
		w := t.w()
		w.gen, w.headIdx, w.head = e.Generation, 0, nil
		if tx.bulk {
			tx.bulkHead(t.sl, "")
		}
		var changes []varplane.ScopeChange
		if !tx.bulk {
			changes = make([]varplane.ScopeChange, 0, 1+len(e.Cascade))
			changes = append(changes, varplane.ScopeChange{Scope: e.Scope, Generation: e.Generation})
		}
		for _, c := range e.Cascade {
			tc := tx.target(c.Scope)
			entry := CascadeEntry(e, c)
			entry.Scope = tc.scope()
			tc.addHist(entry)
			cw := tc.w()
			cw.gen, cw.headIdx, cw.head = c.Generation, 0, nil
			if tx.bulk {
				tx.bulkHead(tc.sl, "")
			}
			if !tx.bulk {
				changes = append(changes, varplane.ScopeChange{Scope: tc.scope(), Generation: c.Generation})
			}
		}
		if !tx.bulk {
			tx.commits = append(tx.commits, varplane.Commit{Kind: e.Kind, Scope: e.Scope, Changes: changes})
		}
	case varplane.EventRejected:
		idx := t.addHist(*e)
		w := t.w()
		w.rejIdx, w.rejected = idx, nil
	}
	if e.IdempotencyKey != "" {
		rec := IdempotencyRecord(e, t.gen())
		if tx.bulk {
			tx.st.idem[rec.Key] = rec
		} else {
			tx.idem[rec.Key] = rec
		}
	}
	return t.sl
}

// CascadeEntry returns the deactivated entry that parent, a subtree
// deactivation, puts in the history of c.Scope, one of the descendants it
// lists: no link of its own (parent's covers it), reason
// CascadeReason(parent.Scope).
func CascadeEntry(parent *varplane.Event, c varplane.CascadeEntry) varplane.Event {
	prev := c.Generation - 1
	return varplane.Event{
		Kind:               varplane.EventDeactivated,
		Scope:              c.Scope,
		Generation:         c.Generation,
		PreviousGeneration: &prev,
		Actor:              parent.Actor,
		OnBehalfOf:         parent.OnBehalfOf,
		Reason:             varplane.CascadeReason(parent.Scope),
		Timestamp:          parent.Timestamp,
		Unauthenticated:    parent.Unauthenticated,
	}
}

// IdempotencyRecord returns the record of ev's idempotency key, gen being
// its scope's generation right after ev.
func IdempotencyRecord(ev *varplane.Event, gen varplane.Generation) *varplane.IdempotencyRecord {
	rec := &varplane.IdempotencyRecord{Key: ev.IdempotencyKey, RequestHash: ev.RequestHash, Event: *ev, Generation: gen}
	// The record needs the event's identity, not its body: holding the
	// document here would keep a reclaimed body in memory.
	rec.Event.Document = nil
	return rec
}

const (
	modeAppend = iota
	modeSubtree
	modeReplay
	// modeReclaimed replays a revision-created event whose body was
	// reclaimed (ApplyReclaimed): modeReplay without a document.
	modeReclaimed
	// modePublish checks an activation whose revision the same publish
	// creates: everything of modeAppend but the revision's existence.
	modePublish
)

// check validates e against the fold including the transaction.
func (tx *Tx) check(e *varplane.Event, expected varplane.Generation, mode int) error {
	// On replay, a scope already in the fold was validated when it first
	// appeared, and an activation's revision is looked up below: skipping
	// those checks is most of what replay saves on validation.
	_, known := tx.view(e.Scope)
	replay := mode == modeReplay || mode == modeReclaimed
	// Every event reaching here has a valid document: normalize compacted
	// it (json.Compact refuses invalid JSON), or the log decoder delimited
	// it; so wellFormed need not parse it again.
	if mode == modeReclaimed {
		cp := *e
		cp.Document = json.RawMessage("null") // stands for the body it had
		e = &cp
	}
	if err := wellFormed(e, replay && known, true); err != nil {
		return err
	}
	if replay {
		if err := tx.checkLink(e); err != nil {
			return err
		}
	}
	switch {
	case mode == modeAppend && e.Kind == varplane.EventDeactivated:
		return badRequest("a deactivation of %q must be committed as a subtree deactivation", e.Scope)
	case mode == modeSubtree && e.Kind != varplane.EventDeactivated:
		return badRequest("a subtree deactivation of %q needs a deactivated event, not %s", e.Scope, e.Kind)
	}
	if k := e.IdempotencyKey; k != "" && tx.idemRec(k) {
		return fmt.Errorf("scope %q: idempotency key %q: %w", e.Scope, k, varplane.ErrDuplicateIdempotencyKey)
	}
	switch e.Kind {
	case varplane.EventRevisionCreated:
		rec, err := tx.revE(e.Scope, e.Revision)
		if err != nil {
			return err
		}
		if rec != nil {
			return fmt.Errorf("scope %q: revision %s: %w", e.Scope, e.Revision, varplane.ErrRevisionExists)
		}
	case varplane.EventActivated, varplane.EventDeactivated:
		w, _ := tx.view(e.Scope)
		if w.gen != expected {
			return varplane.ConflictError(e.Scope, expected, w.gen)
		}
		if e.Generation != expected+1 {
			return badRequest("%s event for scope %q carries generation %d, want %d", e.Kind, e.Scope, e.Generation, expected+1)
		}
		if e.PreviousGeneration != nil && *e.PreviousGeneration != expected {
			return badRequest("%s event for scope %q carries previousGeneration %d, want %d", e.Kind, e.Scope, *e.PreviousGeneration, expected)
		}
		if e.Kind == varplane.EventActivated {
			if mode == modePublish {
				break
			}
			rec, err := tx.revE(e.Scope, e.Revision)
			if err != nil {
				return err
			}
			if rec == nil {
				// On replay, an activation may name a revision whose body
				// was reclaimed later (a compacted log marks its
				// revision-created event); only a final head must have one
				// (CommitBulk checks it).
				if replay && tx.bulk && tx.gone(e.Scope, e.Revision) {
					break
				}
				return tx.st.missing(e.Scope, e.Revision) // not found, or reclaimed (retain.go)
			}
			if rec.Document == nil && !tx.bulk {
				// The head is served from memory: bring its document in
				// before the activation is applied (a bulk load does it
				// for the final heads only, at CommitBulk).
				if _, err := tx.slot(e.Scope).resident(rec); err != nil {
					return err
				}
			}
			break
		}
		got := e.Cascade
		if !slices.IsSortedFunc(got, func(a, b varplane.CascadeEntry) int { return cmp.Compare(a.Scope, b.Scope) }) {
			got = slices.Clone(got)
			slices.SortFunc(got, func(a, b varplane.CascadeEntry) int { return cmp.Compare(a.Scope, b.Scope) })
		}
		if want := tx.PlanSubtree(e.Scope); !slices.Equal(got, want) {
			return badRequest("deactivation of %q lists cascade %v, but the active descendants are %v", e.Scope, got, want)
		}
	}
	return nil
}

// checkLink checks that a logged event is the next link of its scope's
// chain (in a log without chains: that it carries no link).
func (tx *Tx) checkLink(e *varplane.Event) error {
	if tx.unchained {
		if e.Seq != 0 || e.Hash != "" {
			return badRequest("event of scope %q carries a chain link (seq %d) in a log written without chains", e.Scope, e.Seq)
		}
		return nil
	}
	w, _ := tx.view(e.Scope)
	next := w.chain.Seq + 1
	switch {
	case e.Seq == 0 && e.Hash == "":
		return &varplane.ChainError{Scope: e.Scope, Seq: next, Index: tx.histLen(e.Scope), Problem: "the event carries no link"}
	case e.Seq > next:
		return &varplane.ChainError{Scope: e.Scope, Seq: next, Index: tx.histLen(e.Scope), Problem: fmt.Sprintf("missing: the next event has seq %d", e.Seq)}
	case e.Seq < next:
		return &varplane.ChainError{Scope: e.Scope, Seq: next, Index: tx.histLen(e.Scope), Problem: fmt.Sprintf("seq %d repeats or goes back", e.Seq)}
	case e.Hash != varplane.ChainHash(w.chain.Hash, e.Seq, e):
		return &varplane.ChainError{Scope: e.Scope, Seq: next, Index: tx.histLen(e.Scope),
			Problem: "the hash does not match the event and the link before it (the event or an earlier one was changed)"}
	}
	return nil
}

// histLen is the length of s's history including the transaction.
func (tx *Tx) histLen(s varplane.Scope) int {
	n := 0
	if p := tx.pend[s]; p != nil {
		n += len(p.hist)
	}
	if sl := tx.slot(s); sl != nil {
		n += len(sl.hist) + len(sl.bulk)
	}
	return n
}

// gone reports, in a Bulk load, whether revision r of s was reclaimed.
func (tx *Tx) gone(s varplane.Scope, r varplane.Revision) bool {
	sl := tx.slot(s)
	return sl != nil && sl.gone[r]
}

// WellFormed reports, as a bad-request *varplane.Error, what makes ev
// malformed whatever the state: an invalid scope or kind, a revision that is
// not a digest, a missing or invalid document on revision-created, fields
// that do not belong to the kind, invalid UTF-8, a timestamp JSON cannot
// encode. It does not check the event against any state.
func WellFormed(ev *varplane.Event) error { return wellFormed(ev, false, false) }

// wellFormed is WellFormed; known skips the checks that a scope already in
// the fold has passed (its syntax) or that the fold checks anyway (an
// activated revision must exist). decoded skips re-validating the JSON of a
// document: on replay the log decoder has already checked its grammar while
// delimiting it, and that second pass was a third of restart time for logs
// of 1 KiB documents.
func wellFormed(ev *varplane.Event, known, decoded bool) error {
	if !known && !ev.Scope.Valid() {
		return badRequest("event scope %q is not a valid scope", ev.Scope)
	}
	if !ev.Kind.Valid() {
		return badRequest("event kind %q is not one of revision-created, activated, deactivated, rejected", ev.Kind)
	}
	for _, f := range [...]struct{ name, v string }{
		{"actor", ev.Actor}, {"onBehalfOf", ev.OnBehalfOf}, {"reason", ev.Reason}, {"schemaId", ev.SchemaID}, {"schemaVersion", ev.SchemaVersion},
		{"idempotencyKey", ev.IdempotencyKey}, {"requestHash", ev.RequestHash}, {"rejectionReason", ev.RejectionReason},
	} {
		if !utf8.ValidString(f.v) {
			return badRequest("event %s is not valid UTF-8", f.name)
		}
	}
	if y := ev.Timestamp.Year(); y < 0 || y > 9999 {
		return badRequest("event timestamp year %d is outside [0, 9999]", y)
	}
	hasGen := ev.Generation != 0 || ev.PreviousGeneration != nil
	if err := varplane.CheckRollbackMark(ev); err != nil {
		return err
	}
	switch ev.Kind {
	case varplane.EventRevisionCreated:
		if _, err := varplane.ParseRevision(string(ev.Revision)); err != nil {
			return badRequest("revision-created event: %s", varplane.ErrorMessage(err))
		}
		if len(ev.Document) == 0 || (!decoded && !json.Valid(ev.Document)) {
			return badRequest("revision-created event for scope %q has no valid JSON document", ev.Scope)
		}
		if hasGen || len(ev.Cascade) > 0 {
			return badRequest("revision-created event for scope %q carries a generation or cascade", ev.Scope)
		}
	case varplane.EventActivated:
		if known {
			// The revision must exist in the scope, so it is well-formed.
		} else if _, err := varplane.ParseRevision(string(ev.Revision)); err != nil {
			return badRequest("activated event: %s", varplane.ErrorMessage(err))
		}
		if len(ev.Document) > 0 || len(ev.Cascade) > 0 {
			return badRequest("activated event for scope %q carries a document or cascade", ev.Scope)
		}
	case varplane.EventDeactivated:
		if ev.Revision != "" || len(ev.Document) > 0 {
			return badRequest("deactivated event for scope %q carries a revision or document", ev.Scope)
		}
		for _, c := range ev.Cascade {
			if !c.Scope.IsDescendantOf(ev.Scope) || !c.Scope.Valid() || c.Generation == 0 {
				return badRequest("deactivated event for scope %q lists cascade entry %q at generation %d", ev.Scope, c.Scope, c.Generation)
			}
		}
	case varplane.EventRejected:
		if hasGen || len(ev.Document) > 0 || len(ev.Cascade) > 0 {
			return badRequest("rejected event for scope %q carries a generation, document or cascade", ev.Scope)
		}
		if ev.Revision != "" {
			if _, err := varplane.ParseRevision(string(ev.Revision)); err != nil {
				return badRequest("rejected event: %s", varplane.ErrorMessage(err))
			}
		}
	}
	return nil
}

// documentLimits hold a live commit's document to what every store reads
// back: MaxDepthCeiling levels (the log line's envelope aside) and valid
// UTF-8; sizes are the engine's to bound.
var documentLimits = varplane.Limits{
	MaxBodyBytes:   math.MaxInt64,
	MaxDepth:       varplane.MaxDepthCeiling,
	MaxStringBytes: math.MaxInt,
	MaxNumberBytes: math.MaxInt,
	MaxMembers:     math.MaxInt,
}

// normalize returns the copy of ev a live commit stores: a UTC timestamp
// without monotonic reading (what the log round-trips), a compacted document
// the caller cannot mutate, and generation fields filled in from expected.
func normalize(ev *varplane.Event, expected varplane.Generation) (varplane.Event, error) {
	return normalizeChecked(ev, expected, varplane.CheckedDocument{})
}

// normalizeChecked is normalize that takes checked's word for ev.Document
// when checked holds it and was checked within the stores' depth ceiling:
// the document is then copied but not scanned again.
func normalizeChecked(ev *varplane.Event, expected varplane.Generation, checked varplane.CheckedDocument) (varplane.Event, error) {
	e := *ev
	e.Seq, e.Hash = 0, "" // the commit links it
	e.Timestamp = ev.Timestamp.Round(0).UTC()
	if len(ev.Document) > 0 && checked.Holds(ev.Document) && checked.MaxDepth() <= documentLimits.MaxDepth {
		e.Document = bytes.Clone(ev.Document)
	} else if len(ev.Document) > 0 {
		// The store checks the document itself rather than trust that the
		// engine did: the Store contract has other callers, and a line the
		// reader could not parse back would lose the log's tail on the next
		// start. One pass checks and compacts; a document the engine
		// compacted comes back as it is, and is copied once.
		doc, err := documentLimits.CheckAndCompact(ev.Document, 0)
		if err != nil {
			return e, badRequest("event document for scope %q is not valid JSON within the stores' ceilings: %s", ev.Scope, varplane.ErrorMessage(err))
		}
		if len(doc) == len(ev.Document) { // compact already: doc is ev.Document itself
			doc = bytes.Clone(doc)
		}
		e.Document = doc
	}
	if ev.Kind == varplane.EventActivated || ev.Kind == varplane.EventDeactivated {
		if e.Generation == 0 {
			e.Generation = expected + 1
		}
		if ev.PreviousGeneration == nil {
			e.PreviousGeneration = varplane.GenerationPtr(expected)
		}
	}
	if ev.PreviousGeneration != nil {
		e.PreviousGeneration = varplane.GenerationPtr(*ev.PreviousGeneration)
	}
	e.Cascade = slices.Clone(ev.Cascade)
	return e, nil
}

func badRequest(format string, args ...any) *varplane.Error {
	return varplane.Errorf(varplane.CodeBadRequest, format, args...)
}

func quote(s varplane.Scope) string { return strconv.Quote(string(s)) }

func itoa(g varplane.Generation) string { return strconv.FormatUint(uint64(g), 10) }
