package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// The reader of the logs written before log format 3, kept to convert them
// (convert.go): format 1 (event lines), format 2 (batches closed by sync
// lines, {"synced":N,"crc32c":C}), and logs compacted into a checkpoint of
// version 1 or 2 at their head. It is the reader those formats had, with
// their torn-tail rules, folding into a logstate.State that holds no chain;
// where its comments say Open, they mean the Open of those formats, whose
// rules docs/architecture.md kept (git history: "Batches and sync lines").
// It only reads, but for a torn tail, which it cuts as that Open did.

// legacyBatch is a run of consecutive decoded log lines. The last batch of
// a replay may also report how the log ends: a torn tail to cut or an error.
type legacyBatch struct {
	evs    []varplane.Event
	starts []int64 // byte offset of each line of evs
	// docAt and docLen locate each event's document in its line (docLen 0:
	// none): the fold leaves most documents in the log (bodies.go).
	docAt, docLen []int32
	firstLine     int   // line number of evs[0]
	end           int64 // offset just past the last line of evs

	torn     bool // a final fragment without newline starts at end
	tornLen  int
	tornLine int // the torn line's number (0: the line after evs)
	tornWhy  string
	err      error
}

// replay folds the log into s.st and sets s.off to the end of its last
// complete line, cutting a torn tail (a fragment without newline). Decoding
// runs on a goroutine of its own, one batch ahead of folding.
func (s *legacyLog) replay(ctx context.Context) error {
	out := make(chan *legacyBatch, 4)
	free := make(chan *legacyBatch, 6)
	quit := make(chan struct{})
	go s.decodeLog(ctx, out, free, quit)
	stop := func() {
		close(quit)
		for range out {
		}
	}
	tx := s.st.BulkUnchained()
	off := s.base
	for b := range out {
		for i := range b.evs {
			var err error
			if n := b.docLen[i]; n > 0 {
				err = tx.ApplyWithRef(&b.evs[i], logstate.BodyRef{Src: s.bodies, Off: b.starts[i] + int64(b.docAt[i]), Len: int(n)})
			} else {
				err = tx.Apply(&b.evs[i])
			}
			if err != nil {
				stop()
				return fmt.Errorf("file store: %s line %d (byte offset %d) does not follow from the lines before it: %w", s.path, b.firstLine+i, b.starts[i], err)
			}
		}
		off = b.end
		if b.err != nil {
			stop()
			return b.err
		}
		if b.torn {
			for range out {
			}
			line := b.tornLine
			if line == 0 {
				line = b.firstLine + len(b.evs)
			}
			if err := s.cutTail(off, line, b.tornLen, b.tornWhy); err != nil {
				return err
			}
			break
		}
		select {
		case free <- b:
		default:
		}
	}
	if err := tx.CommitBulk(); err != nil {
		return fmt.Errorf("file store: %s: read the heads' documents: %w", s.path, err)
	}
	s.off = off
	return nil
}

// decodeLog reads and decodes the log into batches on out, closing out when
// the log ends, fails, or quit is closed. It sets s.framed when the tail has
// its frame start; from there on it hands on a batch's events only once the
// batch's sync line checks them (frame.go).
func (s *legacyLog) decodeLog(ctx context.Context, out chan<- *legacyBatch, free <-chan *legacyBatch, quit <-chan struct{}) {
	defer close(out)
	if _, err := s.f.Seek(s.base, io.SeekStart); err != nil {
		out <- &legacyBatch{err: fmt.Errorf("file store: seek %s: %w", s.path, err)}
		return
	}
	fi, err := s.f.Stat()
	if err != nil {
		out <- &legacyBatch{err: fmt.Errorf("file store: stat %s: %w", s.path, err)}
		return
	}
	r := bufio.NewReaderSize(s.f, 1<<20)
	in := eventjson.NewInterner()
	var (
		off    = s.base
		lineNo int
		long   []byte
		docs   []byte // the current chunk of document copies
		// pub is the offset of the last line when it is the first line of
		// a publish (publishMark), -1 otherwise: a log that ends there is
		// cut back to it, like a torn line (format 1 only).
		pub int64 = -1
		// Framing: where the current batch starts, its first line, its
		// checksum so far, and how many of b's events checked batches hold.
		batchAt   int64
		batchLine int
		crc       uint32
		checked   int
	)
	next := func() *legacyBatch {
		select {
		case b := <-free:
			clear(b.evs)
			*b = legacyBatch{evs: b.evs[:0], starts: b.starts[:0], docAt: b.docAt[:0], docLen: b.docLen[:0], firstLine: lineNo + 1, end: off}
			return b
		default:
			return &legacyBatch{evs: make([]varplane.Event, 0, batchLines), starts: make([]int64, 0, batchLines),
				docAt: make([]int32, 0, batchLines), docLen: make([]int32, 0, batchLines), firstLine: lineNo + 1, end: off}
		}
	}
	send := func(b *legacyBatch) bool {
		select {
		case out <- b:
			return true
		case <-quit:
			return false
		}
	}
	// unchecked ends the log at the batch that starts at batchAt, which
	// does not check: a torn write to cut, or damage (classifyTail).
	unchecked := func(b *legacyBatch) {
		b.evs = b.evs[:checked]
		b.starts, b.docAt, b.docLen = b.starts[:checked], b.docAt[:checked], b.docLen[:checked]
		b.end = batchAt
		v, err := classifyTail(s.f, batchAt, fi.Size())
		switch {
		case err != nil:
			b.err = fmt.Errorf("file store: read %s: %w", s.path, err)
		case v.damage != "":
			b.err = fmt.Errorf("file store: %s line %d (byte offset %d) is damaged: %s", s.path, batchLine+v.line, v.at, v.damage)
		default:
			b.torn, b.tornLen, b.tornLine, b.tornWhy = true, int(v.torn), batchLine, "a batch whose write a crash cut before its sync"
		}
		send(b)
	}
	b := next()
	// handOn sends b, full, to the folder and starts the next batch; false:
	// stop (cancelled, or the folder quit).
	handOn := func() bool {
		if err := ctx.Err(); err != nil {
			b.err = err
			send(b)
			return false
		}
		if !send(b) {
			return false
		}
		b = next()
		return true
	}
	for {
		chunk, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			continue
		}
		line := chunk
		if len(long) > 0 {
			long = append(long, chunk...)
			line = long
		}
		if errors.Is(err, io.EOF) {
			if s.framed {
				if len(line) > 0 || off > batchAt {
					unchecked(b)
					return
				}
				send(b)
				return
			}
			if len(line) > 0 {
				// A fragment without its newline was never acknowledged.
				b.torn, b.tornLen, b.tornWhy = true, len(line), "no trailing newline"
			}
			cutPublish(b, pub, off)
			send(b)
			return
		}
		if err != nil {
			b.err = fmt.Errorf("file store: read %s: %w", s.path, err)
			send(b)
			return
		}
		lineNo++
		if n, sum, shaped, ok := parseSyncLine(line); shaped {
			switch {
			case s.framed && ok && n == off-batchAt && sum == crc:
			case !s.framed && ok && n == 0 && pub < 0:
				s.framed = true
			case s.framed:
				unchecked(b)
				return
			default:
				b.err = fmt.Errorf("file store: %s line %d (byte offset %d) is damaged: a sync line that starts no framing", s.path, lineNo, off)
				send(b)
				return
			}
			off += int64(len(line))
			b.end = off
			long = long[:0]
			batchAt, batchLine, crc, checked = off, lineNo+1, 0, len(b.evs)
			if len(b.evs) >= batchLines {
				if !handOn() {
					return
				}
				checked = 0
			}
			continue
		}
		b.evs = append(b.evs, varplane.Event{})
		at, n, derr := eventjson.DecodeEventLazy(line[:len(line)-1], &b.evs[len(b.evs)-1], in)
		if derr == nil && n > 0 {
			// A copy, which the fold keeps while the revision may end as a
			// head and then drops for its place in the log (docAt, docLen).
			// Copies share chunks of docChunk bytes, one allocation for
			// many documents; the fold gives the heads it ends with copies
			// of their own (logstate.Tx.CommitBulk), so that no chunk
			// outlives the load.
			if cap(docs)-len(docs) < n {
				docs = make([]byte, 0, max(docChunk, n))
			}
			k := len(docs)
			docs = append(docs, line[at:at+n]...)
			b.evs[len(b.evs)-1].Document = docs[k:len(docs):len(docs)]
		}
		if derr != nil {
			b.evs = b.evs[:len(b.evs)-1]
			if s.framed {
				unchecked(b)
				return
			}
			// A complete line may be an acknowledged event, even the last
			// one: never cut it (see Open).
			b.err = fmt.Errorf("file store: %s line %d (byte offset %d) is damaged: %w", s.path, lineNo, off, derr)
			send(b)
			return
		}
		b.starts = append(b.starts, off)
		b.docAt, b.docLen = append(b.docAt, int32(at)), append(b.docLen, int32(n))
		if s.framed {
			crc = crc32.Update(crc, castagnoli, line)
		} else {
			pub = -1
			if bytes.HasSuffix(line, publishLine) {
				pub = off
			}
		}
		off += int64(len(line))
		b.end = off
		long = long[:0]
		// A publish's first line stays in the batch until the line after
		// it is read, so that cutPublish can still take it out; in a
		// framed log every line stays until its batch checks.
		if len(b.evs) >= batchLines && pub < 0 && !s.framed && !handOn() {
			return
		}
	}
}

// publishLine is how the first line of a publish ends, newline included.
var publishLine = []byte(publishMark + "\n")

// cutPublish drops from b, the last batch of a log that ends at off, the
// first line of a publish whose activation line is missing (it starts at
// pub, or pub < 0 when the last complete line is no such line): the log is
// cut back to pub as if that line were torn too.
func cutPublish(b *legacyBatch, pub, off int64) {
	if pub < 0 {
		return
	}
	b.evs = b.evs[:len(b.evs)-1]
	b.starts, b.docAt, b.docLen = b.starts[:len(b.evs)], b.docAt[:len(b.evs)], b.docLen[:len(b.evs)]
	b.end = pub
	b.tornLen += int(off - pub)
	b.torn = true
	if b.tornWhy == "" {
		b.tornWhy = "a publish cut between its revision and its activation"
	} else {
		b.tornWhy = "a publish cut between its revision and its activation (" + b.tornWhy + ")"
	}
}

// cutTail truncates the log at off, dropping a final fragment without
// newline (or a publish cut between its two lines): the only bytes of a log
// that cannot hold an acknowledged event.
//
// n is 0 when all there is to cut is preallocated space after a crash (zeros
// that hold nothing written): that is cut without a warning.
func (s *legacyLog) cutTail(off int64, lineNo, n int, why string) error {
	if n > 0 {
		s.log.Warn("file store: cutting torn final line of the log",
			"path", s.path, "line", lineNo, "offset", off, "bytes", n, "reason", why)
	}
	if err := s.f.Truncate(off); err != nil {
		return fmt.Errorf("file store: cut torn line %d of %s: %w", lineNo, s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("file store: sync %s after cutting line %d: %w", s.path, lineNo, err)
	}
	return nil
}

// syncPrefix begins a sync line; no event line begins with it (events begin
// with {"kind":).
const syncPrefix = `{"synced":`

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parseSyncLine reads a sync line (newline included) exactly as
// appendSyncLine writes it; ok is false for anything else, sync-shaped
// reports whether the line begins like one.
func parseSyncLine(line []byte) (n int64, crc uint32, shaped, ok bool) {
	rest, found := bytes.CutPrefix(line, []byte(syncPrefix))
	if !found {
		return 0, 0, false, false
	}
	num, rest, found := bytes.Cut(rest, []byte(`,"crc32c":`))
	if !found {
		return 0, 0, true, false
	}
	sum, found := bytes.CutSuffix(rest, []byte("}\n"))
	if !found || !canonicalUint(num) || !canonicalUint(sum) {
		return 0, 0, true, false
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return 0, 0, true, false
	}
	c, err := strconv.ParseUint(string(sum), 10, 32)
	if err != nil {
		return 0, 0, true, false
	}
	return v, uint32(c), true, true
}

// canonicalUint reports whether b is a decimal without sign or leading zero,
// the only form appendSyncLine writes.
func canonicalUint(b []byte) bool {
	if len(b) == 0 || len(b) > 20 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// legacyTailVerdict is what classifyTail makes of the bytes after the last batch
// that checks.
type legacyTailVerdict struct {
	torn   int64  // bytes to cut that are not preallocated zeros (0: the tail is clean)
	damage string // non-empty: damage, not a torn write; Open stops
	at     int64  // the offset the damage names
	line   int    // its line, counted from the start of the tail (0: the first)
}

// classifyTail decides what the bytes of the log in [p, size), from the
// start of the first batch that does not check, are. They are a torn batch,
// to cut, when no batch after p checks and either they hold a zero byte
// before their last non-zero byte (a hole: sectors of the last write that
// never reached the disk read as zeros in allocated space) or they are
// whole event lines, possibly followed by a fragment (a prefix of the last
// write, and zeros where the rest was to go). Otherwise they are damage,
// which may be or follow an acknowledged commit: a batch after p that
// checks (so p's batch was synced before it), or, with every byte present,
// a complete line that does not decode or a sync line that does not match.
func classifyTail(f io.ReaderAt, p, size int64) (legacyTailVerdict, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, p, size-p), 1<<16)
	var (
		off, lineStart = p, p
		last           = p  // just past the last non-zero byte
		pendingZero    bool // a zero byte after the last non-zero byte
		hole           bool // a zero byte before a non-zero byte
		dirty          bool // the current line holds a zero byte
		lines          int  // complete lines before lineStart
		bad            legacyTailVerdict
		long           []byte
		scratch        varplane.Event
	)
	bad.at = -1
	for {
		chunk, rerr := r.ReadSlice('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, bufio.ErrBufferFull) {
			return legacyTailVerdict{}, rerr
		}
		if i := lastNonZero(chunk); i >= 0 {
			if pendingZero || bytes.IndexByte(chunk[:i], 0) >= 0 {
				hole = true
			}
			pendingZero = i < len(chunk)-1
			last = off + int64(i) + 1
		} else if len(chunk) > 0 {
			pendingZero = true
		}
		dirty = dirty || bytes.IndexByte(chunk, 0) >= 0
		off += int64(len(chunk))
		if errors.Is(rerr, bufio.ErrBufferFull) {
			if !dirty {
				long = append(long, chunk...)
			}
			continue
		}
		if rerr != nil { // EOF: a fragment, or nothing
			break
		}
		line := chunk
		if len(long) > 0 {
			line = append(long, chunk...)
		}
		if !dirty {
			if n, crc, shaped, ok := parseSyncLine(line); shaped {
				if ok && n <= lineStart-p && (lineStart-n == p || isLineStart(f, lineStart-n)) {
					// Streamed: n is the file's word, as large as the
					// damaged region, and must not size a buffer.
					h := crc32.New(castagnoli)
					if _, err := io.Copy(h, io.NewSectionReader(f, lineStart-n, n)); err != nil {
						return legacyTailVerdict{}, err
					}
					if h.Sum32() == crc {
						return legacyTailVerdict{damage: fmt.Sprintf("its batch does not check, and a later one does (the sync line at byte offset %d)", lineStart), at: p}, nil
					}
				}
				if bad.at < 0 {
					bad = legacyTailVerdict{damage: "its batch's sync line does not match it", at: lineStart, line: lines}
				}
			} else if _, _, derr := eventjson.DecodeEventLazy(line[:len(line)-1], &scratch, nil); derr != nil && bad.at < 0 {
				bad = legacyTailVerdict{damage: derr.Error(), at: lineStart, line: lines}
			}
		}
		long, dirty = long[:0], false
		lines++
		lineStart = off
	}
	if !hole && bad.at >= 0 {
		return bad, nil
	}
	return legacyTailVerdict{torn: last - p}, nil
}

// isLineStart reports whether a newline precedes offset o of f.
func isLineStart(f io.ReaderAt, o int64) bool {
	var b [1]byte
	_, err := f.ReadAt(b[:], o-1)
	return err == nil && b[0] == '\n'
}

func lastNonZero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

const checkpointPrefix = `{"checkpoint":`

// legacyHeaderLine returns the fixed-width first line of a compacted log.
func legacyHeaderLine(state, tail int64) []byte {
	return fmt.Appendf(nil, `{"checkpoint":%d,"state":%-20d,"tail":%-20d}`+"\n", 2, state, tail)
}

var legacyHeaderLen = int64(len(legacyHeaderLine(0, 0)))

type legacyHeader struct {
	Checkpoint int   `json:"checkpoint"`
	State      int64 `json:"state"`
	Tail       int64 `json:"tail"`
}

type legacyScopeLine struct {
	ScopeState struct {
		Scope      varplane.Scope      `json:"scope"`
		Generation varplane.Generation `json:"generation"`
		Head       *varplane.Event     `json:"head,omitempty"`
		Rejected   *varplane.Event     `json:"rejected,omitempty"`
		Revisions  int                 `json:"revisions"`
		Reclaimed  []varplane.Revision `json:"reclaimed,omitempty"`
		// Block: the scope's other revisions (version 2; bodies.go).
		Block *legacyBlockLine `json:"block,omitempty"`
	} `json:"scopeState"`
}

type legacyIdemLine struct {
	Idem struct {
		Key         string              `json:"key"`
		RequestHash string              `json:"requestHash,omitempty"`
		Generation  varplane.Generation `json:"generation"`
		Event       varplane.Event      `json:"event"`
	} `json:"idem"`
}

type legacyEndLine struct {
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

// legacyCold is the history section of a checkpoint: the events before it,
// by scope, read from [start, end) of from.
type legacyCold struct {
	err   error
	hist  map[varplane.Scope][]varplane.Event
	from  *os.File
	start int64
	end   int64
}

// openCheckpoint reads the checkpoint at the head of the log, when there is
// one, into the fold and sets s.base to the start of the tail.
func (s *legacyLog) openCheckpoint() error {
	head := make([]byte, legacyHeaderLen)
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
	var h legacyHeader
	if int64(n) < legacyHeaderLen || head[n-1] != '\n' || json.Unmarshal(head[:n-1], &h) != nil ||
		(h.Checkpoint != 1 && h.Checkpoint != 2) || h.State < legacyHeaderLen || h.Tail < h.State || h.Tail > fi.Size() {
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
		if histEnd < legacyHeaderLen || histEnd > h.State {
			return fmt.Errorf("file store: %s: the checkpoint end line puts the revision blocks at byte offset %d, outside [%d, %d]", s.path, histEnd, legacyHeaderLen, h.State)
		}
		for i := range scopes {
			if b, ok := scopes[i].Block.(*legacyBlock); ok && b.At < histEnd {
				return fmt.Errorf("file store: %s: the checkpoint's revisions of scope %q start at byte offset %d, inside the history section", s.path, scopes[i].Scope, b.At)
			}
		}
	}
	s.version = h.Checkpoint
	if err := s.st.Restore(scopes, idem); err != nil {
		return fmt.Errorf("file store: %s: the checkpoint state does not hold together: %w", s.path, err)
	}
	from, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("file store: open %s: %w", s.path, err)
	}
	s.cold = &legacyCold{from: from, start: legacyHeaderLen, end: histEnd,
		hist: make(map[varplane.Scope][]varplane.Event, len(scopes))}
	s.coldEvents = end.End.History
	s.base = h.Tail
	return nil
}

// stateParallelMin is the state section size from which decodeState splits
// its work (tests lower it).
var stateParallelMin = 8 << 20

// legacyStatePart is what one part of the state section decodes to.
type legacyStatePart struct {
	scopes []logstate.ScopeImage
	idem   []*varplane.IdempotencyRecord
	nrevs  int
	end    *legacyEndLine
	err    error
}

// decodeState decodes the state section b, which starts at byte offset at,
// in as many parts as there are CPUs: the section is cut right after
// scope lines, where a part can start on its own. The documents share b.
func (s *legacyLog) decodeState(b []byte, at int64) ([]logstate.ScopeImage, []*varplane.IdempotencyRecord, *legacyEndLine, error) {
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
	parts := make([]legacyStatePart, len(cuts))
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
func (s *legacyLog) decodeStatePart(b []byte, at int64) (out legacyStatePart) {
	var (
		revs []*varplane.RevisionRecord
		in   = eventjson.NewInterner()
		off  = at
	)
	damaged := func(why string, err error) legacyStatePart {
		if err != nil {
			why += ": " + err.Error()
		}
		return legacyStatePart{err: fmt.Errorf("file store: %s: the checkpoint state line at byte offset %d is damaged: %s", s.path, off, why)}
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
			var l legacyScopeLine
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
				if bl.At < legacyHeaderLen || bl.End < bl.At || bl.End > s.blocksEnd || bl.N < 0 || bl.End-bl.At > math.MaxInt32 {
					return damaged("scope "+strconv.Quote(string(ss.Scope)), errNoBlock)
				}
				img.Block = &legacyBlock{src: s.bodies, scope: ss.Scope, legacyBlockLine: *bl}
				out.nrevs += bl.N
			}
			out.scopes = append(out.scopes, img)
			revs = nil
		case bytes.HasPrefix(line, []byte(`{"idem":`)):
			var l legacyIdemLine
			if err := json.Unmarshal(line, &l); err != nil {
				return damaged("idempotency record", err)
			}
			out.idem = append(out.idem, &varplane.IdempotencyRecord{Key: l.Idem.Key, RequestHash: l.Idem.RequestHash, Event: l.Idem.Event, Generation: l.Idem.Generation})
		case bytes.HasPrefix(line, []byte(`{"checkpointEnd":`)):
			out.end = &legacyEndLine{}
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

// loadCold reads the history section, each revision-created event's
// document marked logstate.OnDisk (in the checkpoint) unless its line says
// it was reclaimed.
func (s *legacyLog) loadCold() {
	c := s.cold
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
		if ev.Kind == varplane.EventRevisionCreated && !bytes.HasSuffix(line, legacyReclaimedLine) {
			ev.Document = logstate.OnDisk
		}
		c.hist[ev.Scope] = append(c.hist[ev.Scope], ev)
		off += int64(len(line))
		n++
	}
	if c.err == nil && n != s.coldEvents {
		c.err = fmt.Errorf("file store: %s: the checkpoint history holds %d events, its end line counts %d", s.path, n, s.coldEvents)
	}
}

var legacyReclaimedLine = []byte(reclaimedMark + "\n")

// blockCRC is the checksum of a checkpoint's revision block: the block is
// decoded long after Open, so a flipped byte inside a document (which the
// JSON grammar would not notice) is caught when it is.
var blockCRC = crc32.MakeTable(crc32.Castagnoli)

// legacyBlockLine is a block's place in a checkpoint's scope line.
type legacyBlockLine struct {
	At  int64  `json:"at"`
	End int64  `json:"end"`
	N   int    `json:"n"`
	CRC uint32 `json:"crc"`
}

// legacyBlock is a logstate.RevisionBlock: one scope's revision-created lines,
// with their documents, at [at, end) of a checkpointed log.
type legacyBlock struct {
	src   *bodyFile
	scope varplane.Scope
	legacyBlockLine
}

// Load reads and checks the block and returns its records without their
// documents, each with where its document is.
func (b *legacyBlock) Load() ([]*varplane.RevisionRecord, []logstate.BodyRef, []varplane.Revision, error) {
	buf, err := b.src.ReadBody(b.At, int(b.End-b.At))
	if err != nil {
		return nil, nil, nil, err
	}
	return b.decode(buf)
}

// legacyGoneLine lists, in a block, revisions of the scope retention reclaimed
// (kept there rather than in the scope line, so that Open does not decode
// them: they matter only to tell a reclaimed revision from one never
// created).
type legacyGoneLine struct {
	Reclaimed []varplane.Revision `json:"reclaimed"`
}

var legacyGoneLinePrefix = []byte(`{"reclaimed":`)

func (b *legacyBlock) damaged(off int64, format string, args ...any) error {
	return fmt.Errorf("file store: %s: the checkpoint's revisions of scope %q at byte offset %d are damaged: %s", b.src.path, b.scope, off, fmt.Sprintf(format, args...))
}

func (b *legacyBlock) decode(buf []byte) ([]*varplane.RevisionRecord, []logstate.BodyRef, []varplane.Revision, error) {
	if got := crc32.Checksum(buf, blockCRC); got != b.CRC {
		return nil, nil, nil, b.damaged(b.At, "checksum %08x, want %08x", got, b.CRC)
	}
	recs := make([]*varplane.RevisionRecord, 0, b.N)
	refs := make([]logstate.BodyRef, 0, b.N)
	var gone []varplane.Revision
	in := eventjson.NewInterner()
	off := b.At
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return nil, nil, nil, b.damaged(off, "no trailing newline")
		}
		if bytes.HasPrefix(buf, legacyGoneLinePrefix) {
			var l legacyGoneLine
			if err := json.Unmarshal(buf[:i], &l); err != nil {
				return nil, nil, nil, b.damaged(off, "%v", err)
			}
			gone = append(gone, l.Reclaimed...)
			buf = buf[i+1:]
			off += int64(i + 1)
			continue
		}
		var ev varplane.Event
		at, n, err := eventjson.DecodeEventLazy(buf[:i], &ev, in)
		if err != nil {
			return nil, nil, nil, b.damaged(off, "%v", err)
		}
		if ev.Kind != varplane.EventRevisionCreated || n == 0 || ev.Scope != b.scope {
			return nil, nil, nil, b.damaged(off, "want a revision of the scope with its document")
		}
		recs = append(recs, &varplane.RevisionRecord{Scope: ev.Scope, Revision: ev.Revision,
			SchemaID: ev.SchemaID, SchemaVersion: ev.SchemaVersion, Actor: ev.Actor, CreatedAt: ev.Timestamp})
		refs = append(refs, logstate.BodyRef{Src: b.src, Off: off + int64(at), Len: n})
		buf = buf[i+1:]
		off += int64(i + 1)
	}
	if len(recs) != b.N {
		return nil, nil, nil, b.damaged(b.At, "%d revisions, the scope line counts %d", len(recs), b.N)
	}
	return recs, refs, gone, nil
}

// errNoBlock is returned for a block range outside the checkpoint.
var errNoBlock = errors.New("block outside the checkpoint's revision section")
