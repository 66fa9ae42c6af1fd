package file

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// Conversion. A log written before format 3 (format 1 or 2, or one whose
// head is a checkpoint of version 1 or 2) is converted once, by Open,
// before anything else: it is read with the reader of its format
// (legacy.go), which cuts a torn tail and refuses damage as that format's
// store did; then every event is written again as a line of format 3, with
// the links of its scope's chain computed over all of them, into a file
// beside the log, which is fsync'ed and renamed over it. The old log is
// kept, hard-linked under <path>.legacy-<its format> before the rename, so
// that a crash at any step leaves either the old log under its name (and
// Open converts it again) or the new one.
//
// A log without a checkpoint is written again in its own order. A
// checkpoint's history holds each scope's events in order but not how the
// scopes interleaved, so they are merged by timestamp (mergeHistory), under
// the one constraint the fold checks across scopes: a subtree deactivation
// lists exactly the descendants active when it was committed. Its cascade
// entries in the descendants' histories pin it after what each of them did
// before; a descendant whose timestamps put an activation before it but
// which it does not list was activated after it (their commit order ran
// against their timestamps), and is moved after it. Revisions whose bodies
// were reclaimed stay reclaimed: their revision-created lines are written
// without a document, marked reclaimedMark.

// convertSuffix names the converted log while it is written beside the old
// one; Open removes one that a crash left behind.
const convertSuffix = ".format3"

// legacyLog is a log of a format before 3, read for its conversion.
type legacyLog struct {
	path   string
	log    *slog.Logger
	st     *logstate.State
	f      *os.File
	bodies *bodyFile
	// off is the end of the last line, base where the lines after the
	// checkpoint start (0 without one), blocksEnd where its revision
	// blocks end; framed is set once the reader has met a frame start
	// (format 2), version is the checkpoint's version (0: none).
	off, base, blocksEnd int64
	framed               bool
	version              int
	// cold holds the checkpoint's history, coldEvents how many events it
	// counts.
	cold       *legacyCold
	coldEvents int
}

// isLegacy reports whether the log at path was written before format 3:
// it begins with a checkpoint header or a sync line, or its first line is
// an event without a link. An empty log, or one whose first line does not
// decode (the reader of format 3 says what it is), is not.
func isLegacy(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("file store: open %s: %w", path, err)
	}
	defer f.Close()
	l, err := newLineReader(f, 0, 0).next()
	if err != nil {
		return false, fmt.Errorf("file store: read %s: %w", path, err)
	}
	switch {
	case l.eof || l.long:
		return false, nil
	case bytes.HasPrefix(l.b, []byte(checkpointPrefix)), bytes.HasPrefix(l.b, []byte(syncPrefix)):
		return true, nil
	case !l.complete:
		return false, nil
	}
	var ev varplane.Event
	if _, _, err := eventjson.DecodeEventLazy(l.b[:len(l.b)-1], &ev, nil); err != nil {
		return false, nil
	}
	return ev.Seq == 0 && ev.Hash == "", nil
}

// readLegacy reads the log at path as the store of its format opened it:
// the checkpoint (if any) and the events after it folded into a State
// without chains, a torn tail cut from the file, damage refused, and the
// checkpoint's history read in full.
func readLegacy(ctx context.Context, path string, logger *slog.Logger) (*legacyLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s: %w", path, err)
	}
	s := &legacyLog{path: path, log: logger, st: logstate.New(), f: f}
	if s.bodies, err = openBodies(path); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err = s.openCheckpoint(); err == nil {
		err = s.replay(ctx)
	}
	if err == nil && s.cold != nil {
		s.loadCold()
		err = s.cold.err
	}
	if err != nil {
		if s.cold != nil {
			_ = s.cold.from.Close()
		}
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *legacyLog) close() {
	s.bodies.retire()
	_ = s.f.Close()
}

// kind names the log's format, for the name the old log is kept under.
func (s *legacyLog) kind() string {
	switch {
	case s.version > 0:
		return fmt.Sprintf("checkpoint%d", s.version)
	case s.framed:
		return "format2"
	}
	return "format1"
}

// convertLegacy converts the log at path, of a format before 3, into
// format 3 (see above).
func convertLegacy(ctx context.Context, path string, logger *slog.Logger) error {
	s, err := readLegacy(ctx, path, logger)
	if err != nil {
		return err
	}
	defer s.close()
	tmp := path + convertSuffix
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("file store: create %s: %w", tmp, err)
	}
	done := false
	defer func() {
		if !done {
			_ = nf.Close()
			_ = os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(nf, 1<<20)
	w := NewLogWriter(bw)
	if s.cold != nil {
		order, err := mergeHistory(s.cold.hist)
		if err != nil {
			return fmt.Errorf("file store: convert %s: %w", path, err)
		}
		for i := range order {
			ev, mark := order[i], ""
			if ev.Kind == varplane.EventRevisionCreated {
				if !logstate.IsOnDisk(ev.Document) {
					mark = reclaimedMark
				} else {
					rec, err := s.st.RevisionOrGone(ev.Scope, ev.Revision)
					if err != nil {
						return fmt.Errorf("file store: convert %s: the document of revision %s of scope %q: %w", path, ev.Revision, ev.Scope, err)
					}
					ev.Document = rec.Document
				}
			}
			if err := w.write(&ev, mark); err != nil {
				return fmt.Errorf("file store: write %s: %w", tmp, err)
			}
		}
	}
	if err := s.eachLine(func(ev varplane.Event, mark string) error { return w.write(&ev, mark) }); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("file store: write %s: %w", tmp, err)
	}
	if err := nf.Sync(); err != nil {
		return fmt.Errorf("file store: sync %s: %w", tmp, err)
	}
	if err := nf.Close(); err != nil {
		return fmt.Errorf("file store: close %s: %w", tmp, err)
	}
	kept := path + ".legacy-" + s.kind()
	if err := os.Remove(kept); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("file store: remove %s: %w", kept, err)
	}
	if err := os.Link(path, kept); err != nil {
		return fmt.Errorf("file store: keep the old log as %s: %w", kept, err)
	}
	dir := filepath.Dir(path)
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("file store: rename %s to %s: %w", tmp, path, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		return err
	}
	logger.Info("file store: converted the log to format 3 (one event a line, each linked into its scope's chain); the old log is kept beside it",
		"path", path, "format", s.kind(), "events", w.n, "kept", kept)
	return nil
}

// eachLine calls fn with every event line from the checkpoint's end (the
// log's start without one) to the end of the last line, in order, with its
// document and its mark (publishMark or "").
func (s *legacyLog) eachLine(fn func(varplane.Event, string) error) error {
	lr := newLineReader(io.NewSectionReader(s.f, s.base, s.off-s.base), s.base, 0)
	for {
		l, err := lr.next()
		if err != nil {
			return fmt.Errorf("file store: read %s: %w", s.path, err)
		}
		if l.eof {
			return nil
		}
		if !l.complete || l.long {
			return fmt.Errorf("file store: %s: the line at byte offset %d changed while it was converted", s.path, l.off)
		}
		if _, _, shaped, _ := parseSyncLine(l.b); shaped {
			continue
		}
		var ev varplane.Event
		if err := eventjson.DecodeEvent(l.b[:len(l.b)-1], &ev); err != nil {
			return fmt.Errorf("file store: %s line at byte offset %d: %w", s.path, l.off, err)
		}
		mark := ""
		if bytes.HasSuffix(l.b, publishEnd) {
			mark = publishMark
		}
		if err := fn(ev, mark); err != nil {
			return fmt.Errorf("file store: write the converted log of %s: %w", s.path, err)
		}
	}
}

// mergeHistory orders the events of a checkpoint's history, given by scope
// in each scope's order (cascade entries included), into one log that the
// fold accepts (see the top of this file). Cascade entries are left out:
// the fold synthesises them again from their parent's event.
func mergeHistory(hist map[varplane.Scope][]varplane.Event) ([]varplane.Event, error) {
	type at struct {
		scope varplane.Scope
		gen   varplane.Generation
	}
	parentOf := map[at]varplane.Scope{} // a listed descendant at its generation → the parent
	scopes := make([]varplane.Scope, 0, len(hist))
	total := 0
	for scope, evs := range hist {
		scopes = append(scopes, scope)
		total += len(evs)
		for i := range evs {
			if evs[i].Kind == varplane.EventDeactivated {
				for _, c := range evs[i].Cascade {
					parentOf[at{c.Scope, c.Generation}] = scope
				}
			}
		}
	}
	slices.Sort(scopes)
	entryOf := func(ev *varplane.Event) (varplane.Scope, bool) {
		if ev.Kind != varplane.EventDeactivated || len(ev.Cascade) > 0 {
			return "", false
		}
		p, ok := parentOf[at{ev.Scope, ev.Generation}]
		return p, ok && ev.Reason == varplane.CascadeReason(p)
	}
	var (
		out     = make([]varplane.Event, 0, total)
		pos     = make(map[varplane.Scope]int, len(scopes))
		active  = map[varplane.Scope]bool{}
		actPos  = map[varplane.Scope]int{} // where the scope's last activation is in out
		blocked = map[varplane.Scope]bool{}
		q       = &mergeQueue{}
	)
	push := func(s varplane.Scope) {
		if pos[s] < len(hist[s]) {
			heap.Push(q, mergeItem{s, &hist[s][pos[s]]})
		}
	}
	// ready reports whether every descendant the deactivation d lists is
	// at its cascade entry for it.
	ready := func(d *varplane.Event) bool {
		for _, c := range d.Cascade {
			h := hist[c.Scope]
			if pos[c.Scope] >= len(h) || h[pos[c.Scope]].Generation != c.Generation {
				return false
			}
			if p, ok := entryOf(&h[pos[c.Scope]]); !ok || p != d.Scope {
				return false
			}
		}
		return true
	}
	for _, s := range scopes {
		push(s)
	}
	for q.Len() > 0 {
		it := heap.Pop(q).(mergeItem)
		ev := it.ev
		if p, ok := entryOf(ev); ok {
			// Emitted with its parent's event; the parent may have been
			// waiting for it.
			if blocked[p] && ready(&hist[p][pos[p]]) {
				blocked[p] = false
				push(p)
			}
			continue
		}
		if ev.Kind == varplane.EventDeactivated && len(ev.Cascade) > 0 && !ready(ev) {
			blocked[it.scope] = true
			continue
		}
		if ev.Kind == varplane.EventDeactivated {
			// A descendant active here that the event does not list was
			// activated after it: its events since that activation go
			// after it.
			listed := map[varplane.Scope]bool{}
			for _, c := range ev.Cascade {
				listed[c.Scope] = true
			}
			var late []varplane.Event
			for _, d := range scopes {
				if !active[d] || listed[d] || !d.IsDescendantOf(ev.Scope) {
					continue
				}
				i, kept := actPos[d], out[:actPos[d]]
				for _, e := range out[i:] {
					if e.Scope == d {
						late = append(late, e)
					} else {
						kept = append(kept, e)
					}
				}
				out = kept
				for s, p := range actPos {
					if p >= i {
						actPos[s] = -1
					}
				}
				for j := i; j < len(out); j++ {
					if out[j].Kind == varplane.EventActivated {
						actPos[out[j].Scope] = j
					}
				}
			}
			out = append(out, *ev)
			active[ev.Scope] = false
			for _, e := range late {
				if e.Kind == varplane.EventActivated {
					actPos[e.Scope] = len(out)
				}
				out = append(out, e)
			}
			for _, c := range ev.Cascade {
				active[c.Scope] = false
				pos[c.Scope]++
				push(c.Scope)
			}
		} else {
			if ev.Kind == varplane.EventActivated {
				active[it.scope], actPos[it.scope] = true, len(out)
			}
			out = append(out, *ev)
		}
		pos[it.scope]++
		push(it.scope)
	}
	for _, s := range scopes {
		if pos[s] != len(hist[s]) {
			return nil, fmt.Errorf("the checkpoint's history of scope %q cannot be ordered after its event %d (%s)", s, pos[s]+1, hist[s][pos[s]].Kind)
		}
	}
	return out, nil
}

// mergeItem is the next event of one scope's history.
type mergeItem struct {
	scope varplane.Scope
	ev    *varplane.Event
}

// mergeQueue orders scopes by the timestamp of their next event (then by
// scope, for a stable result).
type mergeQueue []mergeItem

func (q mergeQueue) Len() int { return len(q) }
func (q mergeQueue) Less(i, j int) bool {
	if c := q[i].ev.Timestamp.Compare(q[j].ev.Timestamp); c != 0 {
		return c < 0
	}
	return cmp.Compare(q[i].scope, q[j].scope) < 0
}
func (q mergeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *mergeQueue) Push(x any)   { *q = append(*q, x.(mergeItem)) }
func (q *mergeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
