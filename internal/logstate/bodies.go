package logstate

import (
	"errors"
	"fmt"
	"slices"

	"github.com/varplane/varplane"
)

// This file lets a store keep revision documents on disk instead of in the
// fold. The file store's log and checkpoint already hold every body; keeping
// them all in memory made restart cost grow with history (every body of a
// keep-all checkpoint was read, decoded and held). The fold holds in memory
// the bodies of heads and of revisions committed since the last compaction;
// the others are either lazy (a record without its document plus a BodyRef)
// or not loaded at all (a scope's RevisionBlock, decoded on first use).

// onDiskByte backs OnDisk, so that the marker is told from any document by
// its address.
var onDiskByte [1]byte

// OnDisk stands, in a revision-created event of the fold's history, for a
// document the fold keeps on disk (FillDocuments reads it), as opposed to
// nil, a document retention reclaimed. It is empty: never hand it out.
var OnDisk = onDiskByte[:0:1]

// IsOnDisk reports whether doc is the OnDisk marker.
func IsOnDisk(doc []byte) bool {
	return len(doc) == 0 && cap(doc) == 1 && &doc[:1][0] == &onDiskByte[0]
}

// BodySource reads documents from one file. It is retired (ReadBody answers
// ErrStaleBody) when the file it reads is replaced, after every reference
// into it was re-pointed; a reader that gets ErrStaleBody looks the revision
// up again.
type BodySource interface {
	ReadBody(off int64, n int) ([]byte, error)
}

// ErrStaleBody is returned by a retired BodySource.
var ErrStaleBody = errors.New("logstate: body source retired")

// BodyRef locates one document: n bytes at off in Src.
type BodyRef struct {
	Src BodySource
	Off int64
	Len int
}

func (r BodyRef) read() ([]byte, error) { return r.Src.ReadBody(r.Off, r.Len) }

// RevisionBlock is a scope's revisions left on disk by a checkpoint, loaded
// the first time anything needs the scope's revision index (a read of an old
// revision, a commit that creates or activates a revision, a reclamation or
// a compaction). Load returns the records without their documents, where
// each document is, and the revisions of the scope retention reclaimed.
type RevisionBlock interface {
	Load() ([]*varplane.RevisionRecord, []BodyRef, []varplane.Revision, error)
}

// unavailable wraps a failure to read a body or a block for the caller.
func unavailable(s varplane.Scope, err error) error {
	return varplane.Unavailable(fmt.Errorf("scope %q: read revisions from disk: %w", s, err))
}

// ensure loads sl's block, if any, into its revision index. Safe from any
// goroutine: it takes sl.mu.
func (sl *slot) ensure() error {
	sl.mu.RLock()
	b := sl.block
	sl.mu.RUnlock()
	if b == nil {
		return nil
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.ensureLocked()
}

// ensureLocked is ensure with sl.mu held for writing. A record already in
// the index (a resident head) wins over the block's copy.
func (sl *slot) ensureLocked() error {
	b := sl.block
	if b == nil {
		return nil
	}
	recs, refs, gone, err := b.Load()
	if err != nil {
		return unavailable(sl.scope, err)
	}
	for _, r := range gone {
		if sl.gone == nil {
			sl.gone = make(map[varplane.Revision]bool, len(gone))
		}
		sl.gone[r] = true
	}
	for i, r := range recs {
		if _, ok := sl.revs[r.Revision]; ok {
			continue
		}
		r.Scope = sl.scope
		sl.revs[r.Revision] = r
		if sl.refs == nil {
			sl.refs = make(map[varplane.Revision]BodyRef, len(recs))
		}
		sl.refs[r.Revision] = refs[i]
	}
	sl.block = nil
	return nil
}

// lookupLoaded looks rev up in sl's revision index, loading the block
// first. The lookup and the check that no block is pending are made under
// one read lock: a compaction may re-point the scope at a new block (taking
// the records out of the index) between a load and a lookup made apart.
func (sl *slot) lookupLoaded(rev varplane.Revision) (rec *varplane.RevisionRecord, ref BodyRef, ok, lazy bool, err error) {
	for {
		sl.mu.RLock()
		if sl.block == nil {
			rec, ok = sl.revs[rev]
			ref, lazy = sl.refs[rev]
			sl.mu.RUnlock()
			return rec, ref, ok, lazy, nil
		}
		sl.mu.RUnlock()
		if err := sl.ensure(); err != nil {
			return nil, BodyRef{}, false, false, err
		}
	}
}

// goneLoaded reports whether retention reclaimed rev of sl, loading the
// block (which lists them) first; as lookupLoaded.
func (sl *slot) goneLoaded(rev varplane.Revision) (bool, error) {
	for {
		sl.mu.RLock()
		if sl.block == nil {
			gone := sl.gone[rev]
			sl.mu.RUnlock()
			return gone, nil
		}
		sl.mu.RUnlock()
		if err := sl.ensure(); err != nil {
			return false, err
		}
	}
}

// maxStale bounds how often a read re-resolves a body whose source was
// retired under it (one compaction retires one source; more in a row means
// something else is wrong).
const maxStale = 8

// revision returns the record rev of sl with its document, reading it from
// disk when it is lazy (the copy returned is the caller's; the fold keeps
// the record without it). ok is false when sl does not hold rev.
func (sl *slot) revision(rev varplane.Revision) (rec *varplane.RevisionRecord, ok bool, err error) {
	for range maxStale {
		var ref BodyRef
		var lazy bool
		rec, ref, ok, lazy, err = sl.lookupLoaded(rev)
		if err != nil {
			return nil, false, err
		}
		if !ok || !lazy {
			return rec, ok, nil
		}
		doc, err := ref.read()
		if errors.Is(err, ErrStaleBody) {
			continue // a compaction moved it: look it up again
		}
		if err != nil {
			return nil, false, unavailable(sl.scope, err)
		}
		cp := *rec
		cp.Document = doc
		return &cp, true, nil
	}
	return nil, false, unavailable(sl.scope, ErrStaleBody)
}

// resident makes rec's document part of the fold (a revision becoming the
// head is served without I/O). Writer only, sl.mu not held.
func (sl *slot) resident(rec *varplane.RevisionRecord) (*varplane.RevisionRecord, error) {
	if rec.Document != nil {
		return rec, nil
	}
	full, ok, err := sl.revision(rec.Revision)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, unavailable(sl.scope, fmt.Errorf("revision %s vanished", rec.Revision))
	}
	sl.mu.Lock()
	sl.revs[full.Revision] = full
	delete(sl.refs, full.Revision)
	sl.mu.Unlock()
	return full, nil
}

// Resident returns the record rev of scope s when the fold holds it in
// memory with its document (a head's always is), without reading anything
// from disk; nil otherwise.
func (st *State) Resident(s varplane.Scope, rev varplane.Revision) *varplane.RevisionRecord {
	sl := st.lookup(s)
	if sl == nil {
		return nil
	}
	sl.mu.RLock()
	defer sl.mu.RUnlock()
	if rec := sl.revs[rev]; rec != nil && rec.Document != nil {
		return rec
	}
	return nil
}

// HasRevision reports whether scope s holds revision rev, without reading
// its document.
func (st *State) HasRevision(s varplane.Scope, rev varplane.Revision) (bool, error) {
	sl := st.lookup(s)
	if sl == nil {
		return false, nil
	}
	_, _, ok, _, err := sl.lookupLoaded(rev)
	return ok, err
}

// FillDocuments returns hist (events of scope s) with the document of every
// revision-created event marked OnDisk read from disk; hist itself is not
// modified (a copy is made when something is filled). A reclaimed
// revision's event stays without its document.
func (st *State) FillDocuments(s varplane.Scope, hist []varplane.Event) ([]varplane.Event, error) {
	sl := st.lookup(s)
	if sl == nil {
		return hist, nil
	}
	copied := false
	for i := range hist {
		ev := &hist[i]
		if !IsOnDisk(ev.Document) {
			continue
		}
		rec, ok, err := sl.revision(ev.Revision)
		if err != nil {
			return nil, err
		}
		if !copied {
			hist = append(make([]varplane.Event, 0, len(hist)), hist...)
			copied = true
		}
		hist[i].Document = nil // reclaimed meanwhile
		if ok {
			hist[i].Document = rec.Document
		}
	}
	return hist, nil
}

// HistoryDocuments is History with every document the fold holds (see
// FillDocuments).
func (st *State) HistoryDocuments(s varplane.Scope) ([]varplane.Event, error) {
	return st.FillDocuments(s, st.History(s))
}

// BodyStats counts the revision documents the fold holds in memory (heads
// included) and their bytes; revisions left on disk are not counted. It
// walks every scope: for metrics and tests, not for a hot path.
type BodyStats struct {
	Resident      int
	ResidentBytes int64
	// OnDisk counts the loaded revisions whose documents are read on use;
	// Unloaded the scopes whose revision index is still on disk.
	OnDisk, Unloaded int
}

// Bodies returns the fold's BodyStats.
func (st *State) Bodies() BodyStats {
	var out BodyStats
	for _, s := range st.Scopes() {
		sl := st.lookup(s)
		sl.mu.RLock()
		for _, r := range sl.revs {
			if r.Document != nil {
				out.Resident++
				out.ResidentBytes += int64(len(r.Document))
			}
		}
		out.OnDisk += len(sl.refs)
		if sl.block != nil {
			out.Unloaded++
		}
		sl.mu.RUnlock()
	}
	return out
}

// LoadAll loads every scope's revision block into its index, so that
// every reference to a body on disk is in the fold's maps (Repoint).
func (st *State) LoadAll() error {
	for _, s := range st.Scopes() {
		if err := st.lookup(s).ensure(); err != nil {
			return err
		}
	}
	return nil
}

// Repoint replaces every reference to a body on disk by fn's answer for
// it, after a compaction moved the bodies into another file. Every block
// must be loaded (LoadAll). Writer only.
func (st *State) Repoint(fn func(BodyRef) BodyRef) {
	for _, s := range st.Scopes() {
		sl := st.lookup(s)
		sl.mu.Lock()
		for r, ref := range sl.refs {
			sl.refs[r] = fn(ref)
		}
		sl.mu.Unlock()
	}
}

// StripOnDisk returns hist without the OnDisk markers (nil documents in
// their place; a copy when there are any), for callers that want the
// events' metadata only.
func StripOnDisk(hist []varplane.Event) []varplane.Event {
	var out []varplane.Event
	for i := range hist {
		if IsOnDisk(hist[i].Document) {
			if out == nil {
				out = slices.Clone(hist)
			}
			out[i].Document = nil
		}
	}
	if out == nil {
		return hist
	}
	return out
}
