package file

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// reclaimedMark ends, in a checkpoint's history, the line of a
// revision-created event whose body was reclaimed (a field decoders skip).
const reclaimedMark = `,"reclaimed":true}`

// compactSuffix names the compacted log while it is being written beside
// the log; Open removes one a crash left behind.
const compactSuffix = ".compact"

// compactHook, when set (by tests, before Open), is called at each step of a
// compaction with the step's name, so that a test can kill the process
// there: "created", "history", "state", "synced" (the checkpoint is whole
// and durable under its temporary name), "tail" (the commits made meanwhile
// are copied and synced), "renamed", "dir-synced".
var compactHook func(step string)

func hook(step string) {
	if compactHook != nil {
		compactHook(step)
	}
}

// CompactResult reports one compaction.
type CompactResult struct {
	// Before and After are the log's sizes in bytes.
	Before, After int64
	// Events is the number of events the checkpoint's history holds.
	Events int
	// Reclaimed counts the revision bodies left out of the new log.
	Reclaimed int
	// Paused is how long commits waited for the swap.
	Paused time.Duration
}

// Compact rewrites the log as a checkpoint (see checkpoint.go) followed by
// the commits made while it ran, and gives it the log's name; reads and
// commits go on meanwhile, except for the short swap at the end. The bodies
// of the revisions in reclaim (by scope; never a head's) are left out: once
// Compact returns they answer ErrReclaimed, and their events stay in the
// history without their documents. On error nothing is reclaimed and the
// log is as it was, but for a failure after the new log took the name
// (syncing its directory), after which the store refuses commits like after
// a failed write.
//
// Crash safety: the new log is written beside the old one, under a
// temporary name, and fsync'ed whole, the commits made meanwhile included,
// before rename(2) gives it the log's name in one atomic step, after which
// the directory is fsync'ed. A crash before the rename leaves the old log
// (and a temporary file Open removes); after it, the new one, whole.
func (s *Store) Compact(ctx context.Context, reclaim map[varplane.Scope][]varplane.Revision) (CompactResult, error) {
	var res CompactResult
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	if c := s.cold; c != nil {
		select {
		case <-c.ready:
		case <-ctx.Done():
			return res, ctx.Err()
		}
		if c.err != nil {
			return res, fmt.Errorf("file store: compact %s: %w", s.path, c.err)
		}
	}
	// The snapshot and its offset are taken between two batches, so that the
	// log after that offset holds exactly the commits the snapshot misses.
	var (
		scopes []logstate.ScopeImage
		idem   []*varplane.IdempotencyRecord
		at     int64
	)
	if err := s.runOnCommitter(ctx, func() (err error) {
		// A scope that loses revisions has its revision block loaded, so
		// that the bodies to leave out are among the records.
		scopes, idem, err = s.st.Snapshot(func(sc varplane.Scope) bool { return len(reclaim[sc]) > 0 })
		at = s.off
		res.Before = s.off
		return err
	}); err != nil {
		return res, err
	}
	tmp := s.path + compactSuffix
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return res, fmt.Errorf("file store: create %s: %w", tmp, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = nf.Close()
			_ = os.Remove(tmp)
		}
	}()
	hook("created")
	tail, blocks, err := s.writeCheckpoint(ctx, nf, scopes, idem, reclaim, &res)
	if err != nil {
		return res, err
	}
	if _, err := nf.WriteAt(frameStart, tail); err != nil {
		return res, fmt.Errorf("file store: write %s: %w", tmp, err)
	}
	if err := s.syncNew(nf, tmp); err != nil {
		return res, err
	}
	hook("synced")
	// The new log's reader for the bodies it holds, opened before it takes
	// the log's name (the same file either way).
	nb, err := openBodies(tmp)
	if err != nil {
		return res, err
	}
	nb.path = s.path
	swapped := false
	defer func() {
		if !swapped {
			nb.retire()
		}
	}()
	err = s.runOnCommitter(ctx, func() error {
		t0 := time.Now()
		defer func() { res.Paused = time.Since(t0) }()
		if err := activatedSince(s, scopes, reclaim); err != nil {
			return err
		}
		// The commits made since the snapshot, whole batches all, after the
		// frame start of the new log's tail (frame.go).
		if n := s.off - at; n > 0 {
			if _, err := io.Copy(io.NewOffsetWriter(nf, tail+int64(len(frameStart))), io.NewSectionReader(s.f, at, n)); err != nil {
				return fmt.Errorf("file store: copy the log's tail into %s: %w", tmp, err)
			}
			if err := s.syncNew(nf, tmp); err != nil {
				return err
			}
		}
		hook("tail")
		if err := os.Rename(tmp, s.path); err != nil {
			return fmt.Errorf("file store: rename %s to %s: %w", tmp, s.path, err)
		}
		keep = true
		hook("renamed")
		old := s.f
		s.off = tail + int64(len(frameStart)) + (s.off - at)
		s.size, s.zeroed = s.off, s.off // the new file allocates and zeroes afresh
		s.used.Store(s.off)
		s.base = tail
		s.f = nf
		fd := int(nf.Fd())
		if s.noSync {
			s.syncf = func() error { return nil }
		} else {
			s.syncf = func() error { return unix.Fdatasync(fd) }
		}
		_ = old.Close()
		if err := syncDir(filepath.Dir(s.path)); err != nil {
			// Until the directory is durable a crash may bring the old
			// log back without what is committed from now on: refuse
			// commits, as after a failed write.
			s.failed.Store(&err)
			return err
		}
		hook("dir-synced")
		for scope, revs := range reclaim {
			gone := s.st.Reclaim(scope, revs)
			s.cold.reclaim(scope, gone)
			res.Reclaimed += len(gone)
		}
		// The bodies now live in the new log: re-point the fold at it,
		// which also drops from memory every body the checkpoint wrote
		// into a block, then retire the old log's reader (a read that
		// raced this finds it retired and looks its revision up again).
		for i := range scopes {
			var b logstate.RevisionBlock
			if bl := blocks[i]; bl != nil {
				b = &fileBlock{src: nb, scope: scopes[i].Scope, blockLine: *bl}
			}
			s.st.Rebase(&scopes[i], b)
		}
		oldBodies := s.bodies
		s.bodies, swapped = nb, true
		oldBodies.retire()
		hook("rebased")
		res.After = s.off
		return nil
	})
	return res, err
}

func (s *Store) syncNew(f *os.File, name string) error {
	if s.noSync {
		return nil
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("file store: sync %s: %w", name, err)
	}
	return nil
}

// writeCheckpoint writes the header, history, revision blocks and state
// sections of a compacted log to f and returns where its tail starts and
// each scope's block (nil: none).
func (s *Store) writeCheckpoint(ctx context.Context, f *os.File, scopes []logstate.ScopeImage, idem []*varplane.IdempotencyRecord,
	reclaim map[varplane.Scope][]varplane.Revision, res *CompactResult) (int64, []*blockLine, error) {
	w := bufio.NewWriterSize(f, 1<<20)
	var (
		off  int64
		line []byte
		err  error
		crc  uint32
	)
	put := func(b []byte) {
		if err == nil {
			_, err = w.Write(b)
			off += int64(len(b))
			crc = crc32.Update(crc, blockCRC, b)
		}
	}
	put(headerLine(0, 0))
	var before map[varplane.Scope][]varplane.Event
	if s.cold != nil {
		s.cold.mu.RLock()
		before = maps.Clone(s.cold.hist)
		s.cold.mu.RUnlock()
	}
	headOf := func(img *logstate.ScopeImage) varplane.Revision {
		if img.Head == nil {
			return ""
		}
		return img.Head.Revision
	}
	for i := range scopes {
		if i%64 == 0 && ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		img := &scopes[i]
		head := headOf(img)
		for _, part := range [2][]varplane.Event{before[img.Scope], img.History} {
			for j := range part {
				ev := part[j]
				// A revision-created event whose body is reclaimed (before,
				// or by this compaction) is marked, so that Open leaves its
				// document out even if the revision is created again.
				mark := ev.Kind == varplane.EventRevisionCreated && (ev.Document == nil ||
					(slices.Contains(reclaim[img.Scope], ev.Revision) && ev.Revision != head))
				ev.Document = nil
				line = eventjson.AppendEvent(line[:0], &ev)
				if mark {
					line = append(line[:len(line)-1], reclaimedMark...)
				}
				line = append(line, '\n')
				put(line)
				res.Events++
			}
		}
	}
	hook("history")
	revLine := func(rec *varplane.RevisionRecord, doc []byte) {
		ev := varplane.Event{Kind: varplane.EventRevisionCreated, Scope: rec.Scope, Revision: rec.Revision, Document: doc,
			SchemaID: rec.SchemaID, SchemaVersion: rec.SchemaVersion, Actor: rec.Actor, Timestamp: rec.CreatedAt}
		line = append(eventjson.AppendEvent(line[:0], &ev), '\n')
		put(line)
	}
	body := func(img *logstate.ScopeImage, k int) ([]byte, error) {
		if doc := img.Revisions[k].Document; doc != nil {
			return doc, nil
		}
		if k >= len(img.Bodies) || img.Bodies[k].Src == nil {
			return nil, fmt.Errorf("file store: compact %s: revision %s of scope %q has no document", s.path, img.Revisions[k].Revision, img.Scope)
		}
		return img.Bodies[k].Src.ReadBody(img.Bodies[k].Off, img.Bodies[k].Len)
	}
	// The revision blocks: every retained revision but the head, per scope.
	blocksAt := off
	blocks := make([]*blockLine, len(scopes))
	gone := make([]map[varplane.Revision]bool, len(scopes))
	for i := range scopes {
		if i%64 == 0 && ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		img := &scopes[i]
		head := headOf(img)
		gone[i] = map[varplane.Revision]bool{}
		for _, r := range reclaim[img.Scope] {
			if r != head {
				gone[i][r] = true
			}
		}
		at, n := off, 0
		crc = 0
		if fb, ok := img.Block.(*fileBlock); ok {
			// Not loaded since the last compaction: copied as it is,
			// once its checksum holds.
			raw, rerr := fb.src.ReadBody(fb.At, int(fb.End-fb.At))
			if rerr == nil && crc32.Checksum(raw, blockCRC) != fb.CRC {
				rerr = fb.damaged(fb.At, "checksum")
			}
			if rerr != nil {
				return 0, nil, fmt.Errorf("file store: compact %s: %w", s.path, rerr)
			}
			put(raw)
			n += fb.N
		} else if img.Block != nil {
			return 0, nil, fmt.Errorf("file store: compact %s: scope %q has a revision block of another store", s.path, img.Scope)
		}
		for k, rec := range img.Revisions {
			if rec.Revision == head || gone[i][rec.Revision] {
				continue
			}
			doc, berr := body(img, k)
			if berr != nil {
				return 0, nil, berr
			}
			revLine(rec, doc)
			n++
		}
		// What retention reclaimed in the scope, before or now: in the
		// block, which Open does not read.
		var gl goneLine
		gl.Reclaimed = slices.Clone(img.Reclaimed)
		for _, rec := range img.Revisions {
			if gone[i][rec.Revision] {
				gl.Reclaimed = append(gl.Reclaimed, rec.Revision)
			}
		}
		if len(gl.Reclaimed) > 0 {
			slices.Sort(gl.Reclaimed)
			gl.Reclaimed = slices.Compact(gl.Reclaimed)
			putJSON(put, gl)
		}
		if off > at {
			blocks[i] = &blockLine{At: at, End: off, N: n, CRC: crc}
		}
	}
	state := off
	var end endLine
	end.End.Blocks = blocksAt
	for i := range scopes {
		img := &scopes[i]
		head := headOf(img)
		var sl scopeLine
		for k, rec := range img.Revisions {
			switch {
			case gone[i][rec.Revision]:
			case rec.Revision == head:
				doc, berr := body(img, k)
				if berr != nil {
					return 0, nil, berr
				}
				revLine(rec, doc)
				sl.ScopeState.Revisions++
			}
		}
		sl.ScopeState.Scope, sl.ScopeState.Generation = img.Scope, img.Generation
		sl.ScopeState.Head, sl.ScopeState.Rejected = img.Head, img.Rejected
		sl.ScopeState.Block = blocks[i]
		putJSON(put, sl)
		end.End.Revisions += sl.ScopeState.Revisions
		if blocks[i] != nil {
			end.End.Revisions += blocks[i].N
		}
	}
	for _, r := range idem {
		var l idemLine
		l.Idem.Key, l.Idem.RequestHash, l.Idem.Generation, l.Idem.Event = r.Key, r.RequestHash, r.Generation, r.Event
		l.Idem.Event.Document = nil // the record needs the event's identity, not its body
		putJSON(put, l)
	}
	end.End.Scopes, end.End.Idem, end.End.History = len(scopes), len(idem), res.Events
	putJSON(put, end)
	hook("state")
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		_, err = f.WriteAt(headerLine(state, off), 0)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("file store: write %s%s: %w", s.path, compactSuffix, err)
	}
	return off, blocks, nil
}

func putJSON(put func([]byte), v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("file store: checkpoint line: %v", err)) // plain structs of strings, numbers and events
	}
	put(append(b, '\n'))
}

// runOnCommitter runs fn on the committer goroutine between two batches, so
// that it sees the fold and the log at rest and may swap the log file.
func (s *Store) runOnCommitter(ctx context.Context, fn func() error) error {
	return s.send(ctx, &request{run: fn})
}

// runStep runs a maintenance request queued by runOnCommitter.
func (s *Store) runStep(r *request) {
	r.err = r.run()
	close(r.done)
}

// LogSize returns the size of the log in bytes up to its last line (the
// space allocated ahead of it not counted), for the log-size metric.
func (s *Store) LogSize() (int64, error) {
	return s.used.Load(), nil
}

// activatedSince refuses a compaction when a commit made since its snapshot
// activated a revision it leaves out: the tail would name a body the
// checkpoint does not hold. The next pass chooses again.
func activatedSince(s *Store, scopes []logstate.ScopeImage, reclaim map[varplane.Scope][]varplane.Revision) error {
	if len(reclaim) == 0 {
		return nil
	}
	seen := make(map[varplane.Scope]int, len(scopes))
	for i := range scopes {
		seen[scopes[i].Scope] = len(scopes[i].History)
	}
	for scope, revs := range reclaim {
		hist := s.st.History(scope)
		for _, ev := range hist[min(seen[scope], len(hist)):] {
			if ev.Kind == varplane.EventActivated && slices.Contains(revs, ev.Revision) {
				return fmt.Errorf("file store: compact %s: revision %s of scope %q was activated meanwhile; not reclaimed", s.path, ev.Revision, scope)
			}
		}
	}
	return nil
}
