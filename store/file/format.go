package file

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// Log format 3: every line is one event, the JSON form of varplane.Event
// (internal/eventjson) with its link, "seq" and "hash", as its last
// members. Two more members may close a line, both skipped by decoders and
// neither covered by the chain:
//
//   - "publish":true on the revision-created line of a publish whose
//     activation line follows it (the two are written in one write): Open
//     cuts such a line when the log ends right after it, so that a crash
//     never shows half a publish;
//   - "reclaimed":true on a revision-created line whose document retention
//     reclaimed (a compaction wrote the line again without it).
//
// Nothing else is in the file: no sync lines, no header, no zeros.

// publishMark closes the revision-created line of a publish.
const publishMark = `,"publish":true}`

// reclaimedMark closes a revision-created line without its document.
const reclaimedMark = `,"reclaimed":true}`

var (
	publishEnd   = []byte(publishMark + "\n")
	reclaimedEnd = []byte(reclaimedMark + "\n")
)

// maxLineBytes bounds a log line: the writer refuses an event whose line
// would be longer (checkLineSize), so the reader holds no longer line in
// memory, whatever a damaged file claims. Twice the largest body a
// deployment may accept (varplane.MaxBodyCeiling): a document of that size
// and its envelope fit. Tests lower it.
var maxLineBytes = 2 * varplane.MaxBodyCeiling

// checkLineSize refuses an event whose line would pass maxLineBytes.
func checkLineSize(ev *varplane.Event) error {
	n := len(ev.Document) + len(ev.Scope) + len(ev.Actor) + len(ev.OnBehalfOf) + len(ev.Reason) + len(ev.IdempotencyKey) +
		len(ev.RequestHash) + len(ev.RejectionReason) + len(ev.SchemaID) + len(ev.SchemaVersion)
	for _, c := range ev.Cascade {
		n += len(c.Scope)
	}
	if n > maxLineBytes/2 { // escapes at most double a string's bytes
		return varplane.Errorf(varplane.CodeBadRequest, "the event of scope %q is too large for the log (%d bytes of content; %d at most)", ev.Scope, n, maxLineBytes/2)
	}
	return nil
}

// openLine returns ev's line up to its link (the JSON of ev, which carries
// no link yet, without its closing brace), in a buffer with room for the
// link: appendLink closes it once the commit has linked ev.
func openLine(ev *varplane.Event) []byte {
	var b []byte
	if p, _ := linePool.Get().(*[]byte); p != nil {
		b = (*p)[:0]
	}
	b = eventjson.AppendEvent(b, ev)
	return b[:len(b)-1]
}

// linePool recycles the buffers of open lines: the committer copies a
// line into its batch, so once the commit has answered its buffer is free.
// They were an eighth of what a publish allocated on a busy server.
var linePool sync.Pool // of *[]byte

// maxPooledLine is the largest line buffer kept for reuse: a line of a
// large document goes to the collector rather than stay in the pool.
const maxPooledLine = 64 << 10

// releaseLines gives r's line buffers back once its commit has answered
// (or will never be made): nothing else holds them then.
func (r *request) releaseLines() {
	for i, b := range [...][]byte{r.line, r.keyLine, r.actLine} {
		if cap(b) == 0 || cap(b) > maxPooledLine || (i == 2 && cap(r.keyLine) > 0 && &b[:1][0] == &r.keyLine[:1][0]) {
			continue
		}
		b = b[:0]
		linePool.Put(&b)
	}
	r.line, r.keyLine, r.actLine = nil, nil, nil
}

// appendLink appends ev's link, mark (publishMark, or "" for a plain
// closing brace) and newline to a line begun by openLine: the bytes
// eventjson.AppendEvent writes for a linked event.
func appendLink(b []byte, ev *varplane.Event, mark string) []byte {
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, `,"hash":"`...)
	b = append(b, ev.Hash...)
	b = append(b, '"')
	if mark == "" {
		b = append(b, '}')
	} else {
		b = append(b, mark...)
	}
	return append(b, '\n')
}

// appendLine appends ev's whole line, newline included; a non-empty mark
// replaces the closing brace.
func appendLine(b []byte, ev *varplane.Event, mark string) []byte {
	b = eventjson.AppendEvent(b, ev)
	if mark != "" {
		b = append(b[:len(b)-1], mark...)
	}
	return append(b, '\n')
}

// LogWriter writes events as lines of the log (format 3), each linked into
// its scope's chain as a commit links it, for tools that write a log for
// Open to read (a benchmark's, a conversion). It checks nothing else: the
// events must follow from one another as commits would, or Open refuses the
// log. Not safe for concurrent use.
type LogWriter struct {
	w     io.Writer
	heads map[varplane.Scope]varplane.ChainHead
	buf   []byte
	n     int
}

// NewLogWriter returns a LogWriter that writes to w (buffer it: each event
// is one Write).
func NewLogWriter(w io.Writer) *LogWriter {
	return &LogWriter{w: w, heads: map[varplane.Scope]varplane.ChainHead{}}
}

// Write links ev into its scope's chain (setting ev.Seq and ev.Hash,
// whatever they were) and writes its line.
func (lw *LogWriter) Write(ev *varplane.Event) error { return lw.write(ev, "") }

// WritePublish writes a publish's two events as a commit writes them: the
// revision-created line marked as a publish's first, then the activation.
func (lw *LogWriter) WritePublish(created, activated *varplane.Event) error {
	if err := lw.write(created, publishMark); err != nil {
		return err
	}
	return lw.write(activated, "")
}

// Events returns how many events were written.
func (lw *LogWriter) Events() int { return lw.n }

func (lw *LogWriter) write(ev *varplane.Event, mark string) error {
	ev.Seq, ev.Hash = 0, ""
	lw.heads[ev.Scope] = lw.heads[ev.Scope].Next(ev)
	lw.buf = appendLine(lw.buf[:0], ev, mark)
	lw.n++
	_, err := lw.w.Write(lw.buf)
	return err
}

// LineError is a line of the log that Open (or VerifyLog) found damaged:
// it does not decode, does not link into its scope's chain (Err is then a
// *varplane.ChainError), or does not follow from the lines before it.
type LineError struct {
	Path   string
	Line   int   // from 1
	Offset int64 // where the line starts
	Err    error
}

func (e *LineError) Error() string {
	return fmt.Sprintf("file store: %s line %d (byte offset %d) is damaged: %v", e.Path, e.Line, e.Offset, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// batchLines is how many decoded events the reader hands to the folder at a
// time during replay.
const batchLines = 1024

// docChunk is the size of the chunks replay copies documents into.
const docChunk = 1 << 20

// decodedBatch is a run of consecutive decoded log lines.
type decodedBatch struct {
	evs    []varplane.Event
	starts []int64 // byte offset of each line of evs
	// docAt and docLen locate each event's document in its line (docLen 0:
	// none): the fold leaves most documents in the log (bodies.go).
	docAt, docLen []int32
	// gone marks the revision-created events whose body was reclaimed,
	// pub the first lines of publishes (publishMark).
	gone, pub []bool
	firstLine int   // line number of evs[0]
	end       int64 // offset just past the last line of evs
	// last is set on the final batch: how the log ends after evs.
	last *logEnd
}

// logEnd is what follows the last line the decoder hands on: nothing, a
// torn tail to cut, or damage.
type logEnd struct {
	// cut: the bytes from end on are a torn tail; nonZero counts those
	// that are not zeros (a warning is due when there are any), line is
	// the first cut line's number and why says what was torn.
	cut     bool
	nonZero int64
	line    int
	why     string
	err     error
}

func (b *decodedBatch) reset(firstLine int, end int64) {
	clear(b.evs)
	*b = decodedBatch{evs: b.evs[:0], starts: b.starts[:0], docAt: b.docAt[:0], docLen: b.docLen[:0], gone: b.gone[:0], pub: b.pub[:0], firstLine: firstLine, end: end}
}

func (b *decodedBatch) drop() {
	n := len(b.evs) - 1
	b.evs, b.starts, b.docAt, b.docLen, b.gone, b.pub = b.evs[:n], b.starts[:n], b.docAt[:n], b.docLen[:n], b.gone[:n], b.pub[:n]
}

// replay folds the log from byte offset from (where line fromLine+1
// starts) to its end into tx, a Bulk load of s.st, commits it, and sets
// s.off and s.lines; it returns the torn tail to cut (see Open), if any,
// which cut does. Decoding runs on a goroutine of its own, one batch ahead
// of folding; every link is checked as it is folded.
func (s *Store) replay(ctx context.Context, tx *logstate.Tx, from int64, fromLine int) (*logEnd, error) {
	out := make(chan *decodedBatch, 4)
	free := make(chan *decodedBatch, 6)
	quit := make(chan struct{})
	go s.decodeLog(ctx, from, fromLine, out, free, quit)
	stop := func() {
		close(quit)
		for range out {
		}
	}
	off, lines := from, fromLine
	var torn *logEnd
	for b := range out {
		for i := range b.evs {
			var err error
			switch ev := &b.evs[i]; {
			case b.gone[i]:
				err = tx.ApplyReclaimed(ev)
			case b.docLen[i] > 0:
				err = tx.ApplyWithRef(ev, logstate.BodyRef{Src: s.bodies, Off: b.starts[i] + int64(b.docAt[i]), Len: int(b.docLen[i])})
			default:
				err = tx.Apply(ev)
			}
			if err != nil {
				stop()
				return nil, &LineError{Path: s.path, Line: b.firstLine + i, Offset: b.starts[i], Err: err}
			}
		}
		off, lines = b.end, lines+len(b.evs)
		if e := b.last; e != nil {
			for range out {
			}
			if e.err != nil {
				return nil, e.err
			}
			if e.cut {
				torn = e
			}
			break
		}
		select {
		case free <- b:
		default:
		}
	}
	if err := tx.CommitBulk(); err != nil {
		return nil, fmt.Errorf("file store: %s: read the heads' documents: %w", s.path, err)
	}
	s.off, s.lines = off, int64(lines)
	return torn, nil
}

// cut cuts the torn tail replay found (nil: none) at s.off.
func (s *Store) cut(e *logEnd) error {
	if e == nil {
		return nil
	}
	return s.cutTail(s.off, e)
}

// decodeLog reads and decodes the log from byte offset from into batches
// on out, closing out when the log ends, fails, or quit is closed. The
// final batch says how the log ends (decodedBatch.last).
func (s *Store) decodeLog(ctx context.Context, from int64, fromLine int, out chan<- *decodedBatch, free <-chan *decodedBatch, quit <-chan struct{}) {
	defer close(out)
	fi, err := s.f.Stat()
	if err != nil {
		out <- &decodedBatch{last: &logEnd{err: fmt.Errorf("file store: stat %s: %w", s.path, err)}}
		return
	}
	size := fi.Size()
	if s.end > 0 {
		size = min(size, s.end)
	}
	lr := newLineReader(io.NewSectionReader(s.f, from, size-from), from, fromLine)
	in := eventjson.NewInterner()
	var docs []byte // the current chunk of document copies
	next := func(firstLine int, end int64) *decodedBatch {
		select {
		case b := <-free:
			b.reset(firstLine, end)
			return b
		default:
			b := &decodedBatch{evs: make([]varplane.Event, 0, batchLines), starts: make([]int64, 0, batchLines),
				docAt: make([]int32, 0, batchLines), docLen: make([]int32, 0, batchLines), gone: make([]bool, 0, batchLines), pub: make([]bool, 0, batchLines)}
			b.reset(firstLine, end)
			return b
		}
	}
	send := func(b *decodedBatch) bool {
		select {
		case out <- b:
			return true
		case <-quit:
			return false
		}
	}
	b := next(fromLine+1, from)
	// finish ends the log after b's lines: e says how. A publish's first
	// line at the end of b lost its activation: it is cut too.
	finish := func(e *logEnd, at int64, lineNo int) {
		if e.cut || e.err == nil {
			if n := len(b.evs); n > 0 && b.pub[n-1] {
				at, lineNo = b.starts[n-1], b.firstLine+n-1
				b.drop()
				e.cut, e.nonZero = true, e.nonZero+1
				if e.why == "" {
					e.why = "a publish cut between its revision and its activation"
				} else {
					e.why = "a publish cut between its revision and its activation (" + e.why + ")"
				}
			}
			if e.cut {
				e.line = lineNo
				b.end = at
			}
		}
		b.last = e
		send(b)
	}
	for {
		l, err := lr.next()
		if err != nil {
			finish(&logEnd{err: fmt.Errorf("file store: read %s: %w", s.path, err)}, lr.off, lr.lineNo)
			return
		}
		switch {
		case l.eof:
			finish(&logEnd{}, l.off, l.lineNo)
			return
		case !l.complete:
			// A fragment after the last newline: the prefix of a write a
			// crash cut short (zeros where the file grew without its data).
			why := "no trailing newline"
			if l.nonZero == 0 {
				why = "zeros after the last line"
			}
			finish(&logEnd{cut: true, nonZero: l.nonZero, why: why}, l.off, l.lineNo)
			return
		}
		var derr error
		if l.long {
			derr = fmt.Errorf("the line is longer than %d bytes", maxLineBytes)
		} else {
			b.evs = append(b.evs, varplane.Event{})
			at, n, err := eventjson.DecodeEventLazy(l.b[:len(l.b)-1], &b.evs[len(b.evs)-1], in)
			derr = err
			if err == nil {
				if n > 0 {
					// A copy, which the fold keeps while the revision may
					// end as a head and then drops for its place in the log
					// (docAt, docLen). Copies share chunks of docChunk
					// bytes, one allocation for many documents; the fold
					// gives the heads it ends with copies of their own
					// (logstate.Tx.CommitBulk), so that no chunk outlives
					// the load.
					if cap(docs)-len(docs) < n {
						docs = make([]byte, 0, max(docChunk, n))
					}
					k := len(docs)
					docs = append(docs, l.b[at:at+n]...)
					b.evs[len(b.evs)-1].Document = docs[k:len(docs):len(docs)]
				}
				b.starts = append(b.starts, l.off)
				b.docAt, b.docLen = append(b.docAt, int32(at)), append(b.docLen, int32(n))
				b.gone = append(b.gone, n == 0 && bytes.HasSuffix(l.b, reclaimedEnd))
				b.pub = append(b.pub, bytes.HasSuffix(l.b, publishEnd))
			} else {
				b.evs = b.evs[:len(b.evs)-1]
			}
		}
		if derr != nil {
			finish(s.damagedLine(l, derr), l.off, l.lineNo)
			return
		}
		b.end = l.off + l.n
		// A publish's first line stays in the batch until the line after
		// it is read, so that finish can still take it out.
		if len(b.evs) >= batchLines && !b.pub[len(b.evs)-1] {
			if err := ctx.Err(); err != nil {
				b.last = &logEnd{err: err}
				send(b)
				return
			}
			if !send(b) {
				return
			}
			b = next(l.lineNo+1, b.end)
		}
	}
}

// damagedLine decides what a complete line that does not decode is. One
// without a zero byte is damage: every byte of it is one the writer wrote
// or none of them is, and as written it decoded. One with zero bytes is a
// torn write, to cut, when no whole line without one follows it; a whole
// line after it was written after it, so it is damage too.
func (s *Store) damagedLine(l line, derr error) *logEnd {
	damaged := func(err error) *logEnd {
		return &logEnd{err: &LineError{Path: s.path, Line: l.lineNo, Offset: l.off, Err: err}}
	}
	if !l.zeros {
		return damaged(derr)
	}
	after, nonZero, err := wholeLineAfter(s.f, l.off+l.n)
	switch {
	case err != nil:
		return &logEnd{err: fmt.Errorf("file store: read %s: %w", s.path, err)}
	case after >= 0:
		return damaged(fmt.Errorf("it holds zero bytes, and the whole line at byte offset %d was written after it", after))
	}
	return &logEnd{cut: true, nonZero: l.nonZero + nonZero, why: "a write a crash cut short (zero bytes where its blocks did not reach the disk)"}
}

// wholeLineAfter returns the offset of the first complete line without a
// zero byte from byte offset p of f on (-1: none), and how many non-zero
// bytes there are from p on, reading in bounded memory.
func wholeLineAfter(f io.ReaderAt, p int64) (at, nonZero int64, err error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, p, 1<<62), 1<<16)
	at = -1
	lineStart, off := p, p
	zeros := false
	for {
		chunk, rerr := r.ReadSlice('\n')
		for _, c := range chunk {
			if c == 0 {
				zeros = true
			} else {
				nonZero++
			}
		}
		off += int64(len(chunk))
		switch {
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		case errors.Is(rerr, io.EOF):
			return at, nonZero, nil
		case rerr != nil:
			return -1, 0, rerr
		}
		if !zeros && at < 0 {
			at = lineStart
		}
		lineStart, zeros = off, false
	}
}

// cutTail truncates the log at off, dropping the torn tail e describes:
// the only bytes of a log that cannot hold an acknowledged event. A tail of
// zeros only is cut without a warning.
func (s *Store) cutTail(off int64, e *logEnd) error {
	if e.nonZero > 0 {
		s.log.Warn("file store: cutting the torn tail of the log",
			"path", s.path, "line", e.line, "offset", off, "reason", e.why)
	}
	if err := s.f.Truncate(off); err != nil {
		return fmt.Errorf("file store: cut the torn tail of %s at line %d: %w", s.path, e.line, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("file store: sync %s after cutting line %d: %w", s.path, e.line, err)
	}
	return nil
}

// line is one line of the log as lineReader reads it.
type line struct {
	b        []byte // the line, newline included (empty when long)
	off, n   int64  // its offset and length
	lineNo   int
	complete bool  // it ends with a newline
	long     bool  // longer than maxLineBytes: b is not kept
	zeros    bool  // it holds a zero byte
	nonZero  int64 // its bytes that are not zeros
	eof      bool  // no line: the log ends at off
}

// lineReader reads the log's lines in bounded memory: a line longer than
// maxLineBytes is skipped over, not kept.
type lineReader struct {
	r      *bufio.Reader
	off    int64
	lineNo int
	long   []byte
}

func newLineReader(r io.Reader, off int64, lineNo int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 1<<20), off: off, lineNo: lineNo}
}

// next returns the next line. The slice is valid until the next call.
func (lr *lineReader) next() (line, error) {
	l := line{off: lr.off, lineNo: lr.lineNo + 1}
	lr.long = lr.long[:0]
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if bytes.IndexByte(chunk, 0) >= 0 {
			l.zeros = true
		}
		l.nonZero += int64(len(chunk) - bytes.Count(chunk, []byte{0}))
		l.n += int64(len(chunk))
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !l.long && l.n > int64(maxLineBytes) {
				l.long, lr.long = true, lr.long[:0]
			}
			if !l.long {
				lr.long = append(lr.long, chunk...)
			}
			continue
		case errors.Is(err, io.EOF):
			if l.n == 0 {
				l.eof = true
				return l, nil
			}
		case err != nil:
			return l, err
		default:
			l.complete = true
		}
		if !l.long && l.n > int64(maxLineBytes) {
			l.long = true
		}
		switch {
		case l.long:
		case len(lr.long) > 0:
			lr.long = append(lr.long, chunk...)
			l.b = lr.long
		default:
			l.b = chunk
		}
		lr.off += l.n
		if l.complete {
			lr.lineNo++
		}
		return l, nil
	}
}
