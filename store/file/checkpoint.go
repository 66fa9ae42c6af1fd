package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// A compacted log (see Compact) begins with a checkpoint (version 2):
//
//	header   one line: {"checkpoint":2,"state":S,"tail":T}, fixed width
//	history  every event up to the checkpoint, grouped by scope in log
//	         order, revision-created events without their documents
//	blocks   from byte B (named by the end line): per scope, its retained
//	         revisions but the head (revision-created lines with their
//	         documents) and a {"reclaimed":[…]} line (bodies.go)
//	state    from byte S: each scope's head revision line, then a
//	         {"scopeState":…} line naming its block (at, end, count,
//	         CRC-32C); the idempotency records ({"idem":…}); a
//	         {"checkpointEnd":…} line
//	tail     from byte T: ordinary event lines, as in a log without a
//	         checkpoint, appended by commits after the compaction
//
// Version 1 had no blocks: every retained revision was in the state
// section, and each scope line listed its reclaimed revisions; Open reads
// it still.
//
// Open reads the header, the state section and the tail, so restart time
// grows with the number of scopes, their heads and the tail; a scope's block
// is decoded the first time its revision index is needed, and the history
// section, which grows with all history, is read after Open on a goroutine
// of its own (History and Replay wait for it). The whole checkpoint was
// fsync'ed before the compacted log took the log's name, so any damage in
// it is damage: in the header or the state section Open fails naming it;
// in a block, what needs the block fails naming it (its CRC catches what
// the JSON grammar does not); the torn-tail rule applies to the tail alone.

const checkpointPrefix = `{"checkpoint":`

// checkpointVersion is the version Compact writes: 2 has the revision
// blocks (a version-1 checkpoint held every body in its state section, and
// a reader of version 1 would ignore the blocks, so it must refuse 2).
// Open reads both.
const checkpointVersion = 2

// headerLine returns the fixed-width first line of a compacted log.
func headerLine(state, tail int64) []byte {
	return fmt.Appendf(nil, `{"checkpoint":%d,"state":%-20d,"tail":%-20d}`+"\n", checkpointVersion, state, tail)
}

var headerLen = int64(len(headerLine(0, 0)))

type checkpointHeader struct {
	Checkpoint int   `json:"checkpoint"`
	State      int64 `json:"state"`
	Tail       int64 `json:"tail"`
}

type scopeLine struct {
	ScopeState struct {
		Scope      varplane.Scope      `json:"scope"`
		Generation varplane.Generation `json:"generation"`
		Head       *varplane.Event     `json:"head,omitempty"`
		Rejected   *varplane.Event     `json:"rejected,omitempty"`
		Revisions  int                 `json:"revisions"`
		Reclaimed  []varplane.Revision `json:"reclaimed,omitempty"`
		// Block: the scope's other revisions (version 2; bodies.go).
		Block *blockLine `json:"block,omitempty"`
	} `json:"scopeState"`
}

type idemLine struct {
	Idem struct {
		Key         string              `json:"key"`
		RequestHash string              `json:"requestHash,omitempty"`
		Generation  varplane.Generation `json:"generation"`
		Event       varplane.Event      `json:"event"`
	} `json:"idem"`
}

type endLine struct {
	End struct {
		Scopes    int `json:"scopes"`
		Revisions int `json:"revisions"`
		Idem      int `json:"idem"`
		History   int `json:"history"`
		// Blocks is where the revision blocks start, which is where the
		// history section ends (version 2; 0 in version 1, whose history
		// runs to the state section).
		Blocks int64 `json:"blocks,omitempty"`
	} `json:"checkpointEnd"`
}

// cold is the history section of the checkpoint the store was opened from:
// the events before it, by scope, loaded after Open returns.
type cold struct {
	ready chan struct{}
	stop  chan struct{}
	err   error
	mu    sync.RWMutex // guards hist against the swap that reclaims (compact.go)
	hist  map[varplane.Scope][]varplane.Event
	from  *os.File
	start int64
	end   int64
	once  sync.Once
}

// openCheckpoint reads the checkpoint at the head of the log, when there is
// one, into the fold and sets s.base to the start of the tail. It removes a
// compacted log that a crash left beside the log before it took the name.
func (s *Store) openCheckpoint() error {
	if err := os.Remove(s.path + compactSuffix); err == nil {
		s.log.Warn("file store: removed an unfinished compaction", "path", s.path+compactSuffix)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("file store: remove unfinished compaction %s%s: %w", s.path, compactSuffix, err)
	}
	head := make([]byte, headerLen)
	n, err := s.f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("file store: read %s: %w", s.path, err)
	}
	if !bytes.HasPrefix(head[:n], []byte(checkpointPrefix)) {
		return nil // a log without a checkpoint: replayed from its start
	}
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("file store: stat %s: %w", s.path, err)
	}
	var h checkpointHeader
	if int64(n) < headerLen || head[n-1] != '\n' || json.Unmarshal(head[:n-1], &h) != nil ||
		(h.Checkpoint != 1 && h.Checkpoint != 2) || h.State < headerLen || h.Tail < h.State || h.Tail > fi.Size() {
		return fmt.Errorf("file store: %s: the checkpoint header (line 1, byte offset 0) is damaged", s.path)
	}
	state := make([]byte, h.Tail-h.State)
	if _, err := s.f.ReadAt(state, h.State); err != nil {
		return fmt.Errorf("file store: %s: read the checkpoint state at byte offset %d: %w", s.path, h.State, err)
	}
	s.blocksEnd = h.State
	scopes, idem, end, err := s.decodeState(state, h.State)
	if err != nil {
		return err
	}
	histEnd := h.State
	if h.Checkpoint >= 2 {
		histEnd = end.End.Blocks
		if histEnd < headerLen || histEnd > h.State {
			return fmt.Errorf("file store: %s: the checkpoint end line puts the revision blocks at byte offset %d, outside [%d, %d]", s.path, histEnd, headerLen, h.State)
		}
		for i := range scopes {
			if b, ok := scopes[i].Block.(*fileBlock); ok && b.At < histEnd {
				return fmt.Errorf("file store: %s: the checkpoint's revisions of scope %q start at byte offset %d, inside the history section", s.path, scopes[i].Scope, b.At)
			}
		}
	}
	if err := s.st.Restore(scopes, idem); err != nil {
		return fmt.Errorf("file store: %s: the checkpoint state does not hold together: %w", s.path, err)
	}
	from, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("file store: open %s: %w", s.path, err)
	}
	s.cold = &cold{ready: make(chan struct{}), stop: make(chan struct{}), from: from, start: headerLen, end: histEnd,
		hist: make(map[varplane.Scope][]varplane.Event, len(scopes))}
	s.coldEvents = end.End.History
	s.base = h.Tail
	return nil
}

// stateParallelMin is the state section size from which decodeState splits
// its work (tests lower it).
var stateParallelMin = 8 << 20

// statePart is what one part of the state section decodes to.
type statePart struct {
	scopes []logstate.ScopeImage
	idem   []*varplane.IdempotencyRecord
	nrevs  int
	end    *endLine
	err    error
}

// decodeState decodes the state section b, which starts at byte offset at,
// in as many parts as there are CPUs: the section is cut right after
// scope lines, where a part can start on its own. The documents share b.
func (s *Store) decodeState(b []byte, at int64) ([]logstate.ScopeImage, []*varplane.IdempotencyRecord, *endLine, error) {
	n := runtime.GOMAXPROCS(0)
	if len(b) < stateParallelMin {
		n = 1
	}
	var cuts []int
	for k := 1; k < n; k++ {
		from := max(len(b)*k/n, 0)
		if len(cuts) > 0 {
			from = max(from, cuts[len(cuts)-1])
		}
		i := bytes.Index(b[from:], []byte("\n"+`{"scopeState":`))
		if i < 0 {
			break
		}
		e := bytes.IndexByte(b[from+i+1:], '\n')
		if e < 0 {
			break
		}
		cuts = append(cuts, from+i+1+e+1)
	}
	cuts = append(cuts, len(b))
	parts := make([]statePart, len(cuts))
	var wg sync.WaitGroup
	start := 0
	for k, end := range cuts {
		wg.Add(1)
		go func(k, start, end int) {
			defer wg.Done()
			parts[k] = s.decodeStatePart(b[start:end], at+int64(start))
		}(k, start, end)
		start = end
	}
	wg.Wait()
	var (
		scopes []logstate.ScopeImage
		idem   []*varplane.IdempotencyRecord
		nrevs  int
	)
	for k, p := range parts {
		if p.err != nil {
			return nil, nil, nil, p.err
		}
		if p.end != nil && k != len(parts)-1 {
			return nil, nil, nil, fmt.Errorf("file store: %s: the checkpoint state goes on after its end line", s.path)
		}
		scopes = append(scopes, p.scopes...)
		idem = append(idem, p.idem...)
		nrevs += p.nrevs
	}
	end := parts[len(parts)-1].end
	if end == nil {
		return nil, nil, nil, fmt.Errorf("file store: %s: the checkpoint state ends before its end line (byte offset %d)", s.path, at+int64(len(b)))
	}
	if end.End.Scopes != len(scopes) || end.End.Revisions != nrevs || end.End.Idem != len(idem) {
		return nil, nil, nil, fmt.Errorf("file store: %s: the checkpoint end line counts %d scopes, %d revisions, %d idempotency records; the state holds %d, %d, %d",
			s.path, end.End.Scopes, end.End.Revisions, end.End.Idem, len(scopes), nrevs, len(idem))
	}
	return scopes, idem, end, nil
}

// decodeStatePart decodes one part of the state section (see decodeState).
func (s *Store) decodeStatePart(b []byte, at int64) (out statePart) {
	var (
		revs []*varplane.RevisionRecord
		in   = eventjson.NewInterner()
		off  = at
	)
	damaged := func(why string, err error) statePart {
		if err != nil {
			why += ": " + err.Error()
		}
		return statePart{err: fmt.Errorf("file store: %s: the checkpoint state line at byte offset %d is damaged: %s", s.path, off, why)}
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return damaged("no trailing newline", nil)
		}
		line := b[:i]
		if out.end != nil {
			return damaged("a line after the checkpoint's end", nil)
		}
		switch {
		case bytes.HasPrefix(line, []byte(`{"kind":`)):
			var ev varplane.Event
			// A copy: a document that shared the section's buffer would
			// keep all of it in memory for as long as any head lives.
			if err := eventjson.DecodeEventWith(line, &ev, in); err != nil {
				return damaged("revision", err)
			}
			if ev.Kind != varplane.EventRevisionCreated || len(ev.Document) == 0 {
				return damaged("want a revision with its document", nil)
			}
			revs = append(revs, &varplane.RevisionRecord{Scope: ev.Scope, Revision: ev.Revision, Document: ev.Document,
				SchemaID: ev.SchemaID, SchemaVersion: ev.SchemaVersion, Actor: ev.Actor, CreatedAt: ev.Timestamp})
		case bytes.HasPrefix(line, []byte(`{"scopeState":`)):
			var l scopeLine
			if err := json.Unmarshal(line, &l); err != nil {
				return damaged("scope", err)
			}
			ss := l.ScopeState
			if ss.Revisions != len(revs) {
				return damaged(fmt.Sprintf("scope %q lists %d revisions, %d precede it", ss.Scope, ss.Revisions, len(revs)), nil)
			}
			for _, r := range revs {
				if r.Scope != ss.Scope {
					return damaged(fmt.Sprintf("revision of scope %q before the state of %q", r.Scope, ss.Scope), nil)
				}
			}
			img := logstate.ScopeImage{Scope: ss.Scope, Generation: ss.Generation, Head: ss.Head, Rejected: ss.Rejected, Revisions: revs, Reclaimed: ss.Reclaimed}
			out.nrevs += len(revs)
			if bl := ss.Block; bl != nil {
				if bl.At < headerLen || bl.End < bl.At || bl.End > s.blocksEnd || bl.N < 0 || bl.End-bl.At > math.MaxInt32 {
					return damaged("scope "+strconv.Quote(string(ss.Scope)), errNoBlock)
				}
				img.Block = &fileBlock{src: s.bodies, scope: ss.Scope, blockLine: *bl}
				out.nrevs += bl.N
			}
			out.scopes = append(out.scopes, img)
			revs = nil
		case bytes.HasPrefix(line, []byte(`{"idem":`)):
			var l idemLine
			if err := json.Unmarshal(line, &l); err != nil {
				return damaged("idempotency record", err)
			}
			out.idem = append(out.idem, &varplane.IdempotencyRecord{Key: l.Idem.Key, RequestHash: l.Idem.RequestHash, Event: l.Idem.Event, Generation: l.Idem.Generation})
		case bytes.HasPrefix(line, []byte(`{"checkpointEnd":`)):
			out.end = &endLine{}
			if err := json.Unmarshal(line, out.end); err != nil {
				return damaged("end", err)
			}
		default:
			return damaged("unknown line", nil)
		}
		b = b[i+1:]
		off += int64(i + 1)
	}
	if len(revs) > 0 {
		return damaged("revisions without their scope line", nil)
	}
	return out
}

// loadCold reads the history section on its own goroutine.
func (s *Store) loadCold() {
	c := s.cold
	defer close(c.ready)
	defer c.from.Close()
	r := bufio.NewReaderSize(io.NewSectionReader(c.from, c.start, c.end-c.start), 1<<20)
	in := eventjson.NewInterner()
	off, n := c.start, 0
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			break
		}
		if err != nil {
			c.err = fmt.Errorf("file store: %s: read the checkpoint history at byte offset %d: %w", s.path, off, err)
			break
		}
		var ev varplane.Event
		if derr := eventjson.DecodeEventWith(line[:len(line)-1], &ev, in); derr != nil || !ev.Kind.Valid() {
			c.err = fmt.Errorf("file store: %s: the checkpoint history line at byte offset %d is damaged: %v", s.path, off, derr)
			break
		}
		if ev.Kind == varplane.EventRevisionCreated && !bytes.HasSuffix(line, reclaimedLine) {
			// The body is in the checkpoint, unless it was reclaimed:
			// History reads it from there (logstate.State.FillDocuments).
			ev.Document = logstate.OnDisk
		}
		c.hist[ev.Scope] = append(c.hist[ev.Scope], ev)
		off += int64(len(line))
		if n++; n%4096 == 0 {
			select {
			case <-c.stop:
				c.err = varplane.ErrClosed
				return
			default:
			}
		}
	}
	if c.err == nil && n != s.coldEvents {
		c.err = fmt.Errorf("file store: %s: the checkpoint history holds %d events, its end line counts %d", s.path, n, s.coldEvents)
	}
	if c.err != nil {
		s.log.Error("file store: the checkpoint's history cannot be read; History and Replay fail", "path", s.path, "err", c.err)
	}
}

var reclaimedLine = []byte(reclaimedMark + "\n")

// stopCold stops the history loader, if any, without waiting for it.
func (s *Store) stopCold() {
	if s.cold != nil {
		s.cold.once.Do(func() { close(s.cold.stop) })
	}
}

// fullHistory returns every event of scope: the checkpoint's history, once
// loaded, then the fold's.
func (s *Store) fullHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	h, err := s.fullHistoryMeta(ctx, scope)
	if err != nil {
		return nil, err
	}
	return s.st.FillDocuments(scope, h)
}

// fullHistoryMeta is fullHistory with the documents of the revisions the fold
// keeps on disk left out.
func (s *Store) fullHistoryMeta(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	own := s.st.History(scope)
	c := s.cold
	if c == nil {
		return own, nil
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.err != nil {
		return nil, &varplane.Error{Code: varplane.CodeInternal, Message: "the log's history cannot be read", Err: c.err}
	}
	c.mu.RLock()
	before := c.hist[scope]
	c.mu.RUnlock()
	if len(before) == 0 {
		return own, nil
	}
	if len(own) == 0 {
		return before[:len(before):len(before)], nil
	}
	return append(append(make([]varplane.Event, 0, len(before)+len(own)), before...), own...), nil
}

// History returns every event of scope in log order (see
// varplane.Store.History); a revision-created event whose body retention
// reclaimed carries no document. Documents not held in memory are read
// from the log.
func (s *Store) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	return s.fullHistory(ctx, scope)
}

// EventHistory is History without reading documents from the log: a
// revision-created event carries its document only when the store holds
// it in memory. For callers that need the events' metadata alone (the
// retention pass), so that they do not read every body of the scope.
func (s *Store) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	h, err := s.fullHistoryMeta(ctx, scope)
	if err != nil {
		return nil, err
	}
	return logstate.StripOnDisk(h), nil
}

// Revision returns the stored revision rev of scope; ErrReclaimed when
// retention took its body out; a not-found error when it was never created.
func (s *Store) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	return s.st.RevisionOrGone(scope, rev)
}

func (s *Store) replayAt(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	hist, err := s.fullHistoryMeta(ctx, scope) // FoldAt reads the head's record itself
	if err != nil {
		return nil, err
	}
	if len(hist) == 0 && s.st.Load(scope) == nil {
		return nil, varplane.Errorf(varplane.CodeNotFound, "scope %q has no events", scope)
	}
	return logstate.FoldAt(ctx, scope, hist, gen, func(r varplane.Revision) (*varplane.RevisionRecord, error) {
		return s.st.RevisionOrGone(scope, r)
	})
}

// reclaim drops the documents of revs from the checkpoint's history of
// scope, as logstate.State.Reclaim does in the fold's. Readers share the
// slices, so the scope's gets a copy.
func (c *cold) reclaim(scope varplane.Scope, revs []varplane.Revision) {
	if c == nil || len(revs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hist[scope]
	if len(h) == 0 {
		return
	}
	h = slices.Clone(h)
	for i := range h {
		if h[i].Kind == varplane.EventRevisionCreated && slices.Contains(revs, h[i].Revision) {
			h[i].Document = nil
		}
	}
	c.hist[scope] = h
}
