package logstate

import (
	"context"
	"math"
	"slices"

	"github.com/varplane/varplane"
)

// This file is the fold's side of retention: taking revision bodies out of
// the fold (reclamation), and writing the fold out to and reading it back
// from a checkpoint (the file store's compaction and restart).

// restoredIdx marks, in a restored scope's writer state, a head or a last
// rejection that came from a checkpoint and so has no index in the fold's
// own history; publish never reads the history for it, because the head or
// rejected event is set with it.
const restoredIdx = math.MaxInt

// ScopeImage is one scope as a checkpoint holds it: its generation, its head
// (as the activation that installed it), its last rejection, its retained
// revision records and, when taken by Snapshot, the fold's own history of it.
type ScopeImage struct {
	Scope      varplane.Scope
	Generation varplane.Generation
	// Head is the activation that installed the head (kind, scope,
	// revision, generation, actor, reason, timestamp), nil when none.
	Head *varplane.Event
	// Rejected is the last rejected event, nil when none.
	Rejected *varplane.Event
	// Chain is the scope's chain head.
	Chain varplane.ChainHead
	// Revisions are the scope's revision records in memory; a record
	// without its document has its place in Bodies (same index).
	Revisions []*varplane.RevisionRecord
	Bodies    []BodyRef
	// Block holds the scope's other revisions, still on disk (Restore: to
	// load on first use; Snapshot: a block not loaded since, which a
	// compaction may copy as it is).
	Block RevisionBlock
	// Reclaimed lists the revisions retention took out, sorted.
	Reclaimed []varplane.Revision
	// History is the fold's own history of the scope (Snapshot only).
	History []varplane.Event
}

// Snapshot returns every scope of the fold and every idempotency record as
// they are now. Writer only (it must not race a commit); what it returns
// shares the fold's immutable records and history and may be read from any
// goroutine afterwards. The scopes for which load is true have their
// revision blocks loaded first (a compaction that reclaims in them must
// see their records); the others keep theirs in ScopeImage.Block.
func (st *State) Snapshot(load func(varplane.Scope) bool) ([]ScopeImage, []*varplane.IdempotencyRecord, error) {
	scopes := st.Scopes()
	out := make([]ScopeImage, 0, len(scopes))
	for _, s := range scopes {
		sl := st.lookup(s)
		if load != nil && load(s) {
			if err := sl.ensure(); err != nil {
				return nil, nil, err
			}
		}
		ss := sl.state.Load()
		img := ScopeImage{Scope: sl.scope, Generation: ss.Generation, Rejected: ss.LastRejected, Chain: ss.Chain}
		if h := ss.Head; h != nil {
			img.Head = &varplane.Event{Kind: varplane.EventActivated, Scope: h.Scope, Revision: h.Revision,
				Generation: h.Generation, Actor: h.Actor, Reason: h.Reason, Timestamp: h.EffectiveAt}
		}
		sl.mu.RLock()
		img.Revisions = make([]*varplane.RevisionRecord, 0, len(sl.revs))
		for _, r := range sl.revs {
			img.Revisions = append(img.Revisions, r)
		}
		img.Block = sl.block
		img.History = sl.hist[:len(sl.hist):len(sl.hist)]
		for r := range sl.gone {
			img.Reclaimed = append(img.Reclaimed, r)
		}
		// Under the same lock: a reader loading the block adds records
		// and their places (the block is in img meanwhile).
		slices.SortFunc(img.Revisions, func(a, b *varplane.RevisionRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
		if len(sl.refs) > 0 {
			img.Bodies = make([]BodyRef, len(img.Revisions))
			for i, r := range img.Revisions {
				img.Bodies[i] = sl.refs[r.Revision]
			}
		}
		sl.mu.RUnlock()
		slices.Sort(img.Reclaimed)
		out = append(out, img)
	}
	st.idemMu.RLock()
	idem := make([]*varplane.IdempotencyRecord, 0, len(st.idem))
	for _, r := range st.idem {
		idem = append(idem, r)
	}
	st.idemMu.RUnlock()
	slices.SortFunc(idem, func(a, b *varplane.IdempotencyRecord) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out, idem, nil
}

// Restore loads a checkpoint into an empty fold: like Bulk, only correct
// while no reader can observe the State. Events folded afterwards (a Bulk
// load of the log's tail, commits) follow from it. A head's revision must be
// among its scope's revisions.
func (st *State) Restore(scopes []ScopeImage, idem []*varplane.IdempotencyRecord) error {
	for i := range scopes {
		img := &scopes[i]
		if !img.Scope.Valid() {
			return badRequest("checkpoint scope %q is not a valid scope", img.Scope)
		}
		if st.lookup(img.Scope) != nil {
			return badRequest("checkpoint lists scope %q twice", img.Scope)
		}
		sl := newSlot(img.Scope)
		for i, r := range img.Revisions {
			r.Scope = sl.scope
			sl.revs[r.Revision] = r
			if r.Document == nil {
				if i >= len(img.Bodies) || img.Bodies[i].Src == nil {
					return badRequest("checkpoint revision %s of scope %q has no document", r.Revision, img.Scope)
				}
				if sl.refs == nil {
					sl.refs = map[varplane.Revision]BodyRef{}
				}
				sl.refs[r.Revision] = img.Bodies[i]
			}
		}
		sl.block = img.Block
		for _, r := range img.Reclaimed {
			if sl.gone == nil {
				sl.gone = map[varplane.Revision]bool{}
			}
			sl.gone[r] = true
		}
		sl.w.gen, sl.w.chain = img.Generation, img.Chain
		if img.Head != nil {
			rec := sl.revs[img.Head.Revision]
			if rec == nil || rec.Document == nil {
				return badRequest("checkpoint head %s of scope %q is not among its revisions", img.Head.Revision, img.Scope)
			}
			sl.w.headIdx, sl.w.head = restoredIdx, varplane.NewHead(img.Head, rec)
		}
		if img.Rejected != nil {
			cp := *img.Rejected
			sl.w.rejIdx, sl.w.rejected = restoredIdx, &cp
		}
		st.insertInPlace(sl)
		st.addScope(sl.scope)
		publish(sl)
	}
	for _, r := range idem {
		st.idem[r.Key] = r
	}
	return nil
}

// AddIdempotency adds records to the idempotency map: those of a log's
// events that a Restore did not carry, read after it. Writer only.
func (st *State) AddIdempotency(recs []*varplane.IdempotencyRecord) {
	st.idemMu.Lock()
	defer st.idemMu.Unlock()
	for _, r := range recs {
		st.idem[r.Key] = r
	}
}

// Reclaim takes the records of revs out of scope s, never the head's: the
// body is gone, while the events that name the revision stay in the history
// (their documents dropped), and a read of it is told it was reclaimed
// (RevisionOrGone), also after a checkpoint (ScopeImage.Reclaimed). It returns the revisions it took out. Writer only.
func (st *State) Reclaim(s varplane.Scope, revs []varplane.Revision) []varplane.Revision {
	sl := st.lookup(s)
	if sl == nil || len(revs) == 0 {
		return nil
	}
	var head varplane.Revision
	if h := sl.state.Load().Head; h != nil {
		head = h.Revision
	}
	var out []varplane.Revision
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if err := sl.ensureLocked(); err != nil {
		return nil // nothing reclaimed; the next pass tries again
	}
	gone := make(map[varplane.Revision]bool, len(revs))
	for _, r := range revs {
		if r == head || sl.revs[r] == nil {
			continue
		}
		delete(sl.revs, r)
		delete(sl.refs, r)
		if sl.gone == nil {
			sl.gone = map[varplane.Revision]bool{}
		}
		sl.gone[r] = true
		gone[r] = true
		out = append(out, r)
	}
	if len(out) > 0 {
		// Readers share the history slice: replace it by a copy without the
		// reclaimed documents rather than change it in place.
		h := slices.Clone(sl.hist)
		for i := range h {
			if h[i].Kind == varplane.EventRevisionCreated && gone[h[i].Revision] {
				h[i].Document = nil
			}
		}
		sl.hist = h
	}
	return out
}

// RevisionOrGone returns the record rev of scope s, ErrReclaimed (as a
// *varplane.Error naming it) when retention took it out, and a not-found
// error otherwise.
func (st *State) RevisionOrGone(s varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if sl := st.lookup(s); sl != nil {
		rec, ok, err := sl.revision(rev)
		if err != nil {
			return nil, err
		}
		if ok {
			return rec, nil
		}
	}
	return nil, st.missing(s, rev)
}

// missing is the error for a revision of s the fold does not hold.
func (st *State) missing(s varplane.Scope, rev varplane.Revision) error {
	if sl := st.lookup(s); sl != nil {
		gone, err := sl.goneLoaded(rev) // the block lists what was reclaimed
		if err != nil {
			return err
		}
		if gone {
			return &varplane.Error{Code: varplane.CodeRevisionReclaimed,
				Message: "revision " + string(rev) + " of scope " + quote(s) + " was reclaimed by retention"}
		}
	}
	return varplane.Errorf(varplane.CodeNotFound, "revision %s not found in scope %q", rev, s)
}

// FoldAt returns the state of scope s right after the event of hist (its
// whole history) that allocated generation gen, looking revisions up with
// rev; generation 0 is the never-activated state. A generation whose head
// was reclaimed answers rev's error (ErrReclaimed); one never reached a
// not-found error.
func FoldAt(ctx context.Context, s varplane.Scope, hist []varplane.Event, gen varplane.Generation, rev func(varplane.Revision) (*varplane.RevisionRecord, error)) (*varplane.ScopeState, error) {
	if gen == 0 {
		return &varplane.ScopeState{Scope: s}, nil
	}
	out := &varplane.ScopeState{Scope: s}
	var rejected, head *varplane.Event
	for i := range hist {
		if i%4096 == 4095 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ev := &hist[i]
		switch ev.Kind {
		case varplane.EventActivated:
			out.Generation, head = ev.Generation, ev
		case varplane.EventDeactivated:
			out.Generation, head = ev.Generation, nil
		case varplane.EventRejected:
			rejected = ev
		}
		if out.Generation == gen {
			if head != nil {
				rec, err := rev(head.Revision)
				if err != nil {
					return nil, err
				}
				out.Head = varplane.NewHead(head, rec)
			}
			if rejected != nil {
				cp := *rejected
				out.LastRejected = &cp
			}
			return out, nil
		}
	}
	return nil, &varplane.Error{Code: varplane.CodeNotFound, Message: "scope " + quote(s) + " never reached generation " + itoa(gen)}
}
