package file

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// Compaction, in format 3, only reclaims: it writes the log again without
// the documents of the revisions a reclamation pass chose, and changes
// nothing else. Every event stays, with its link (the chain does not cover
// documents: a revision's digest binds its document), so a compacted log
// verifies as the log did; the revision-created line of a reclaimed
// revision keeps its place, without its document, marked reclaimedMark, so
// that the revision stays reclaimed across restarts. Nothing compacts
// unless called: retention is the operator's choice (docs/retention.md).

// compactSuffix names the compacted log while it is being written beside
// the log; Open removes one a crash left behind.
const compactSuffix = ".compact"

// compactHook, when set (by tests, before Open), is called at each step of a
// compaction with the step's name, so that a test can kill the process
// there: "created", "written" (the lines before the snapshot are written
// and synced under the temporary name), "tail" (the commits made meanwhile
// are copied and synced), "renamed", "dir-synced", "repointed".
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
	// Events is the number of events in the log, every one of which a
	// compaction keeps.
	Events int
	// Reclaimed counts the revision bodies left out of the new log.
	Reclaimed int
	// Paused is how long commits waited for the swap.
	Paused time.Duration
}

// Compact writes the log again without the documents of the revisions in
// reclaim (by scope; never a head's, nor what the log does not store), and
// gives it the log's name; reads and commits go on meanwhile, except for
// the short swap at the end. Once Compact returns those revisions answer
// ErrReclaimed, and their events stay in the history without their
// documents. With nothing to reclaim it writes nothing. On error nothing is
// reclaimed and the log is as it was, but for a failure after the new log
// took the name (syncing its directory), after which the store refuses
// commits like after a failed write.
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
	// The history before a checkpoint is read from the log this replaces.
	if err := s.waitCold(ctx); err != nil {
		return res, err
	}
	// Every body reference must be in the fold's index to be re-pointed
	// at the new log.
	if err := s.st.LoadAll(); err != nil {
		return res, err
	}
	// The offset and what to reclaim are taken between two batches: the
	// log before that offset holds every line to rewrite, the log after it
	// exactly the commits made since.
	var (
		at   int64
		gone = map[varplane.Scope]map[varplane.Revision]bool{}
	)
	if err := s.runOnCommitter(ctx, func() error {
		at, res.Before, res.Events = s.off, s.off, int(s.lines)
		for scope, revs := range reclaim {
			var head varplane.Revision
			if h := s.st.State(scope).Head; h != nil {
				head = h.Revision
			}
			for _, r := range revs {
				ok, err := s.st.HasRevision(scope, r)
				if err != nil {
					return err
				}
				if ok && r != head {
					if gone[scope] == nil {
						gone[scope] = map[varplane.Revision]bool{}
					}
					gone[scope][r] = true
				}
			}
		}
		return nil
	}); err != nil {
		return res, err
	}
	if len(gone) == 0 {
		// Nothing to leave out: a checkpoint, so that a restart reads
		// only what follows.
		res.After = res.Before
		if s.ck.every < 0 {
			return res, nil
		}
		return res, s.checkpoint(ctx, true)
	}
	if err := s.compactReclaim(ctx, at, gone, &res); err != nil || s.ck.every < 0 {
		return res, err
	}
	if err := s.checkpoint(ctx, true); err != nil {
		s.log.Warn("file store: cannot write a checkpoint after the compaction", "path", s.path, "err", err)
	}
	return res, nil
}

// compactReclaim writes the log again without the documents of gone (the
// lines before at are rewritten, those after it copied) and swaps it in.
func (s *Store) compactReclaim(ctx context.Context, at int64, gone map[varplane.Scope]map[varplane.Revision]bool, res *CompactResult) error {
	// The checkpoints point into the log this replaces.
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	tmp := s.path + compactSuffix
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("file store: create %s: %w", tmp, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = nf.Close()
			_ = os.Remove(tmp)
		}
	}()
	hook("created")
	moved, err := s.rewrite(ctx, nf, at, gone)
	if err != nil {
		return err
	}
	if err := s.syncNew(nf, tmp); err != nil {
		return err
	}
	hook("written")
	newAt := at - moved.shift(at)
	// The new log's reader for the bodies it holds, opened before it takes
	// the log's name (the same file either way).
	nb, err := openBodies(tmp)
	if err != nil {
		return err
	}
	nb.path = s.path
	swapped := false
	defer func() {
		if !swapped {
			nb.retire()
		}
	}()
	return s.runOnCommitter(ctx, func() error {
		t0 := time.Now()
		defer func() { res.Paused = time.Since(t0) }()
		if err := activatedSince(s, gone); err != nil {
			return err
		}
		// The commits made since the offset, copied as they are.
		if n := s.off - at; n > 0 {
			if _, err := io.Copy(io.NewOffsetWriter(nf, newAt), io.NewSectionReader(s.f, at, n)); err != nil {
				return fmt.Errorf("file store: copy the log's tail into %s: %w", tmp, err)
			}
			if err := s.syncNew(nf, tmp); err != nil {
				return err
			}
		}
		hook("tail")
		// The WAL's records point into the old log: forgotten, once it is
		// durable, before the new log takes its name.
		if err := s.resetWAL(); err != nil {
			s.failed.Store(&err)
			return err
		}
		if err := os.Rename(tmp, s.path); err != nil {
			return fmt.Errorf("file store: rename %s to %s: %w", tmp, s.path, err)
		}
		keep = true
		hook("renamed")
		old := s.f
		s.off = newAt + (s.off - at)
		s.used.Store(s.off)
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
		// The old checkpoint no longer matches (Open would ignore it,
		// with a warning); the next is written from the new log.
		if err := os.Remove(s.path + checkpointSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("file store: cannot remove the checkpoint of the log before its compaction", "path", s.path, "err", err)
		}
		s.resetCheckpointer()
		for scope, revs := range gone {
			got := s.st.Reclaim(scope, slices.Collect(maps.Keys(revs)))
			s.cold.reclaim(scope, got)
			res.Reclaimed += len(got)
		}
		// The bodies now live in the new log, where every line before the
		// offset moved back by what the rewritten lines before it lost,
		// and every line after it by what all of them lost.
		oldBodies := s.bodies
		s.st.Repoint(func(r logstate.BodyRef) logstate.BodyRef {
			if r.Src == oldBodies {
				r.Src, r.Off = nb, r.Off-moved.shift(r.Off)
			}
			return r
		})
		s.bodies, swapped = nb, true
		oldBodies.retire()
		hook("repointed")
		res.After = s.off
		return nil
	})
}

// shifts records, for the lines a compaction wrote shorter, where each
// ended in the old log and how many bytes the log had lost by then.
type shifts struct {
	end  []int64
	lost []int64
}

// shift returns how far back the byte at old offset off moved.
func (m *shifts) shift(off int64) int64 {
	i := sort.Search(len(m.end), func(i int) bool { return m.end[i] > off })
	if i == 0 {
		return 0
	}
	return m.lost[i-1]
}

// rewrite writes the log's lines before offset at into f, the
// revision-created lines of the revisions in gone without their
// documents, and reports how the lines moved.
func (s *Store) rewrite(ctx context.Context, f *os.File, at int64, gone map[varplane.Scope]map[varplane.Revision]bool) (*shifts, error) {
	w := bufio.NewWriterSize(f, 1<<20)
	lr := newLineReader(io.NewSectionReader(s.f, 0, at), 0, 0)
	var (
		m    shifts
		lost int64
		buf  []byte
	)
	for {
		l, err := lr.next()
		if err != nil {
			return nil, fmt.Errorf("file store: read %s: %w", s.path, err)
		}
		if l.eof {
			break
		}
		if !l.complete || l.long {
			return nil, fmt.Errorf("file store: compact %s: the line at byte offset %d is not whole", s.path, l.off)
		}
		if l.lineNo%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		out := l.b
		if isCreatedLine(l.b) {
			var ev varplane.Event
			if _, n, err := eventjson.DecodeEventLazy(l.b[:len(l.b)-1], &ev, nil); err != nil {
				return nil, fmt.Errorf("file store: compact %s: line %d: %w", s.path, l.lineNo, err)
			} else if n > 0 && gone[ev.Scope][ev.Revision] {
				ev.Document = nil
				buf = appendLine(buf[:0], &ev, reclaimedMark)
				out = buf
				lost += int64(len(l.b) - len(buf))
				m.end, m.lost = append(m.end, l.off+l.n), append(m.lost, lost)
			}
		}
		if _, err := w.Write(out); err != nil {
			return nil, fmt.Errorf("file store: write %s%s: %w", s.path, compactSuffix, err)
		}
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("file store: write %s%s: %w", s.path, compactSuffix, err)
	}
	return &m, nil
}

// isCreatedLine reports whether a log line is a revision-created event's
// (every line begins with its kind).
func isCreatedLine(b []byte) bool {
	const p = `{"kind":"revision-created",`
	return len(b) > len(p) && string(b[:len(p)]) == p
}

// createdLineScope returns the scope of a revision-created line as this
// store writes it (the scope the member after the kind, a string without
// escapes), without decoding the line, which holds the document: the
// checkpointer only needs the scope of each such line since the last
// checkpoint. ok is false for any other shape; the caller then decodes.
func createdLineScope(b []byte) (varplane.Scope, bool) {
	const p = `{"kind":"revision-created","scope":"`
	if len(b) <= len(p) || string(b[:len(p)]) != p {
		return "", false
	}
	rest := b[len(p):]
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return "", false
	}
	return varplane.Scope(rest[:end]), true
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

// LogSize returns the size of the log in bytes, for the log-size metric.
func (s *Store) LogSize() (int64, error) {
	return s.used.Load(), nil
}

// activatedSince refuses a compaction when a commit made since its offset
// made a revision it leaves out the head: a head is served from its body,
// which the new log would not hold. (An activation of it that a later one
// replaced is history, which replay reads without the body.) The next pass
// chooses again. On the committer.
func activatedSince(s *Store, gone map[varplane.Scope]map[varplane.Revision]bool) error {
	for scope, revs := range gone {
		if h := s.st.State(scope).Head; h != nil && revs[h.Revision] {
			return fmt.Errorf("file store: compact %s: revision %s of scope %q was activated meanwhile; not reclaimed", s.path, h.Revision, scope)
		}
	}
	return nil
}
