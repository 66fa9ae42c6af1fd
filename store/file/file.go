// Package file is the durable varplane.Store: an append-only log of events,
// one JSON object per line (the JSON form of varplane.Event), folded in memory
// for reads. A commit is written and fdatasync'ed before it is acknowledged
// and before any reader can see it. Concurrent commits share one write and
// one fsync (group commit), which ends with a sync line carrying the batch's
// length and CRC-32C; a publish's two lines are in one batch. The log grows
// into space allocated ahead of it and zeroed a little ahead of the
// commits, so that an fdatasync neither grows the file nor converts the
// blocks it writes (frame.go, zero.go). On Open the log is replayed; a
// batch that a crash tore (its sync line missing or not matching, and a
// hole or a prefix of the write where it was) is cut off with a warning,
// while damage that may hold an acknowledged commit, wherever it is, stops
// Open with an error naming the line and its byte offset (see Open). Logs
// written before the sync lines (format 1) open too, under their own rule.
// Compact rewrites the log as a checkpoint plus the events after it, and
// Open then reads the checkpoint's state and those events only
// (checkpoint.go). The fold holds in memory the documents of heads and of
// revisions committed since Open or the last compaction; the others are
// read from the log when asked for (bodies.go).
//
// Concurrency contract: every method is safe for concurrent use. Reads never
// wait for a commit; State takes no lock and does not allocate for a scope
// that exists. Commits are checked against the state, written and published
// in order by one committer at a time: the committer goroutine that the
// Store owns and Close stops, which batches what is queued, or the
// committing caller itself when nothing is queued and no batch is in flight
// (a lone writer then skips two goroutine hand-offs). The checks that need
// no state, and the encoding of the log lines, run on the committing
// caller's goroutine before it commits or queues. Watch callbacks run on
// whichever goroutine commits, after the snapshot is installed and before
// the commits are acknowledged, so they must not block nor commit to the
// store.
// One log has one writer: Open takes an exclusive lock (flock on
// "<path>.lock"), and a second Open of the same log, in this process or
// another, fails with ErrLocked.
//
// Leases (AcquireLease, RenewLease, ReleaseLease) live in the memory of the
// one writer process, not in the log: the lock makes that process the only
// one that can hold or contest a lease, and a restart, which frees every
// lease, only lets the next pass start sooner. The instances' status
// heartbeats and canary reports (logstate.Beats) live there too, for the
// same reason, and do not survive a restart either: every instance writes
// its status and its cumulative report again at its next heartbeat.
package file

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

var (
	_ varplane.Store            = (*Store)(nil)
	_ varplane.Replayer         = (*Store)(nil)
	_ varplane.CheckedPublisher = (*Store)(nil)
)

// ErrLocked is returned by Open when another Store, in this process or
// another, holds the log open for writing.
var ErrLocked = errors.New("file store: log is locked by another writer")

// Options configure Open.
type Options struct {
	// Logger receives warnings (a cut torn tail) and commit failures;
	// slog.Default() when nil.
	Logger *slog.Logger
	// NoSync skips fdatasync. UNSAFE: an acknowledged commit can be lost on
	// power failure or OS crash. For benchmarks that measure everything but
	// the disk.
	NoSync bool
	// Preallocate is how many bytes the log allocates at a time ahead of
	// its last line (fallocate), so that a commit's fdatasync overwrites
	// allocated space instead of growing the file (see frame.go), and the
	// store writes zeros over the first MiB of it ahead of the commits
	// (zero.go): 0 means 16 MiB, a negative value turns both off. A log
	// at rest (after Close) holds no allocated space past its last line.
	Preallocate int64
}

// maxBatch bounds the commits that share one write and fsync.
const maxBatch = 1024

// Store is a file-backed store. Obtain one with Open.
type Store struct {
	logstate.Reads  // State, Revision, History, Idempotency, Scopes
	logstate.Leases // AcquireLease, RenewLease, ReleaseLease: in this process
	logstate.Beats  // instance statuses and canary reports: in this process

	path string
	log  *slog.Logger
	st   *logstate.State

	f     *os.File
	lock  *os.File
	off   int64 // under commitMu once Open returns: end of the last durable line
	syncf func() error
	// size is the file's allocated end (off to size: zeros), prealloc how
	// far ahead it allocates (0: off); framed, whether the log's tail has
	// its frame start (frame.go). Committer-owned like off.
	size     int64
	prealloc int64
	framed   bool
	used     atomic.Int64 // off, for LogSize
	// zeroed is where the zeros written ahead of off end (zero.go; before
	// off: none), zeroPiece and zeroAhead how much the zeroer writes at a
	// time and how far ahead, zeroOff whether an error turned it off.
	// Committer-owned like off. zkick wakes the zeroer, zquit stops it,
	// zdone is closed when it has stopped (all nil when the log does not
	// allocate ahead).
	zeroed, zeroPiece, zeroAhead int64
	zeroOff                      bool
	zkick, zquit, zdone          chan struct{}

	mu     sync.RWMutex // guards closing reqs against concurrent sends
	closed bool
	failed atomic.Pointer[error]

	reqs chan *request
	done chan struct{}

	// commitMu is held by whoever commits a batch or runs a maintenance
	// step: the committer goroutine, or a caller that finds the committer
	// idle and nothing queued and so commits its own request without the
	// two goroutine hand-offs (send). It guards tx, buf and what the
	// committer owns (off, base, f, syncf).
	commitMu sync.Mutex
	tx       *logstate.Tx
	buf      []byte

	watchers logstate.Watchers

	commits, batches, rejected atomic.Uint64

	// Retention (checkpoint.go, compact.go, reclaim.go): base is where
	// the log's events start after its checkpoint (0 without one;
	// under commitMu once Open returns); cold holds the checkpoint's
	// history, coldEvents how many events it counts.
	base       int64
	blocksEnd  int64     // Open: where the checkpoint's revision blocks end (its state section)
	bodies     *bodyFile // reads the documents the fold keeps on disk (bodies.go); committer-owned
	cold       *cold
	coldEvents int
	noSync     bool
	reclaimMu  sync.Mutex
	reclaim    reclaimList // the to-delete list (reclaim.go)
	compactMu  sync.Mutex  // one compaction at a time
}

// A request is one commit for the committer. A plain append or a publish
// arrives prepared: normalised, checked for what does not depend on the
// state, and encoded by the submitting goroutine, so that the committer
// only checks it against the state, orders, writes and syncs. A subtree
// deactivation, whose cascade depends on the state, is prepared there.
type request struct {
	ev       *varplane.Event // subtree: as given; otherwise prepared
	act      *varplane.Event // a publish: its prepared activation (ev is its revision)
	expected varplane.Generation
	subtree  bool
	line     []byte // ev's log line; a publish: its first line, marked
	actLine  []byte // a publish: the activation's line without the key (after a created revision)
	keyLine  []byte // a publish: the activation's line with the key (a found revision)
	stored   *varplane.Event
	created  bool // a publish appended its revision-created event
	err      error
	done     chan struct{}
	run      func() error // a maintenance step (compact.go), run between batches
}

// publishMark ends the revision-created line of a publish, whose next line
// is the activation. It is a field of the log line only (decoders skip it):
// Open cuts a log that ends right after such a line, as it cuts a torn line,
// so that a crash between a publish's two lines shows neither.
const publishMark = `,"publish":true}`

// Open opens (creating it and its directory when absent, 0700/0600) the log
// at path, replays it, and starts the committer. It returns ErrLocked
// (wrapped, naming the path) when the log is already open for writing.
//
// The torn-tail rule: only bytes that were never acknowledged may be cut.
// In a framed log (format 2, frame.go) an acknowledged commit is in a batch
// whose sync line checks; Open cuts, with a warning, the batch where the
// checks stop when it can only be a write that a crash cut short (no later
// batch checks, and it holds a hole or is a prefix of whole lines), and
// fails naming the line and its byte offset, changing nothing in the file,
// when it may be damage to an acknowledged batch (see classifyTail).
//
// In the lines of format 1 before the frame start, every acknowledged
// event is a whole line, newline included, that was written and
// fdatasync'ed before its answer; the log keeps no separate
// record of the synced offset, so Open tells a torn write from damage by the
// newline alone. A crash during a write leaves a prefix of that write, so
// the only torn thing it can leave after the last complete line is a
// fragment without a newline: Open cuts that fragment (and only it) and logs
// a warning naming the line and offset. A complete line that does not
// decode, or that does not follow from the lines before it, is damage
// whether it is the last line or not: it may be an acknowledged event, so
// Open fails with an error naming the line number and its byte offset and
// changes nothing in the file. Complete lines after the last fsync (written
// whole, but not yet acknowledged when the process died) are kept; that
// loses nothing a client was told was stored. Zero bytes that a filesystem
// exposes after a crash (the writer never writes a zero byte) are cut like
// any fragment when no newline follows them; zero bytes followed by a
// newline stop Open like any damage, because they cannot be told from an
// acknowledged line whose block was zeroed: the operator decides. Open then
// writes the frame start after the last line.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("file store: create directory of %s: %w", path, err)
	}
	lockPath := path + ".lock"
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file store: open lock %s: %w", lockPath, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is open for writing elsewhere (lock %s is held)", ErrLocked, path, lockPath)
		}
		return nil, fmt.Errorf("file store: lock %s: %w", lockPath, err)
	}
	s, err := open(ctx, path, lock, logger, opts)
	if err != nil {
		_ = unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		_ = lock.Close()
		return nil, err
	}
	return s, nil
}

func open(ctx context.Context, path string, lock *os.File, logger *slog.Logger, opts Options) (*Store, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s: %w", path, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// Make the new file's directory entry durable too.
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	s := &Store{
		path: path,
		log:  logger,
		st:   logstate.New(),
		f:    f,
		lock: lock,
		reqs: make(chan *request, maxBatch),
		done: make(chan struct{}),
	}
	if s.bodies, err = openBodies(path); err != nil {
		_ = f.Close()
		return nil, err
	}
	s.Init(s.st)
	s.InitLeases(&s.Reads, nil)
	s.InitBeats(&s.Reads, nil)
	s.noSync = opts.NoSync
	fd := int(f.Fd())
	s.syncf = func() error { return unix.Fdatasync(fd) }
	if opts.NoSync {
		s.syncf = func() error { return nil }
	}
	if err := s.openCheckpoint(); err != nil {
		s.bodies.retire()
		_ = f.Close()
		return nil, err
	}
	err = s.replay(ctx)
	if err == nil {
		err = s.startFraming(opts)
	}
	if err != nil {
		if s.cold != nil {
			_ = s.cold.from.Close()
		}
		s.bodies.retire()
		_ = f.Close()
		return nil, err
	}
	if s.cold != nil {
		go s.loadCold()
	}
	s.tx = s.st.Begin()
	s.startZeroer()
	go s.committer()
	return s, nil
}

// startFraming writes the frame start after the last line of a log whose
// tail has none (a new log, or one of format 1), and sets up preallocation.
func (s *Store) startFraming(opts Options) error {
	s.size = s.off
	switch {
	case opts.Preallocate == 0:
		s.prealloc = preallocDefault
	case opts.Preallocate > 0:
		s.prealloc = opts.Preallocate
	}
	if !s.framed {
		if err := s.write(frameStart); err != nil {
			return err
		}
		s.off += int64(len(frameStart))
		s.size = max(s.size, s.off)
		s.framed = true
	}
	s.used.Store(s.off)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("file store: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("file store: sync directory %s: %w", dir, err)
	}
	return nil
}

// batchLines is how many decoded events the reader hands to the folder at a
// time during replay.
const batchLines = 1024

// decodedBatch is a run of consecutive decoded log lines. The last batch of
// a replay may also report how the log ends: a torn tail to cut or an error.
type decodedBatch struct {
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
func (s *Store) replay(ctx context.Context) error {
	out := make(chan *decodedBatch, 4)
	free := make(chan *decodedBatch, 6)
	quit := make(chan struct{})
	go s.decodeLog(ctx, out, free, quit)
	stop := func() {
		close(quit)
		for range out {
		}
	}
	tx := s.st.Bulk()
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
func (s *Store) decodeLog(ctx context.Context, out chan<- *decodedBatch, free <-chan *decodedBatch, quit <-chan struct{}) {
	defer close(out)
	if _, err := s.f.Seek(s.base, io.SeekStart); err != nil {
		out <- &decodedBatch{err: fmt.Errorf("file store: seek %s: %w", s.path, err)}
		return
	}
	fi, err := s.f.Stat()
	if err != nil {
		out <- &decodedBatch{err: fmt.Errorf("file store: stat %s: %w", s.path, err)}
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
	next := func() *decodedBatch {
		select {
		case b := <-free:
			clear(b.evs)
			*b = decodedBatch{evs: b.evs[:0], starts: b.starts[:0], docAt: b.docAt[:0], docLen: b.docLen[:0], firstLine: lineNo + 1, end: off}
			return b
		default:
			return &decodedBatch{evs: make([]varplane.Event, 0, batchLines), starts: make([]int64, 0, batchLines),
				docAt: make([]int32, 0, batchLines), docLen: make([]int32, 0, batchLines), firstLine: lineNo + 1, end: off}
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
	// unchecked ends the log at the batch that starts at batchAt, which
	// does not check: a torn write to cut, or damage (classifyTail).
	unchecked := func(b *decodedBatch) {
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

// docChunk is the size of the chunks replay copies documents into.
const docChunk = 1 << 20

// publishLine is how the first line of a publish ends, newline included.
var publishLine = []byte(publishMark + "\n")

// cutPublish drops from b, the last batch of a log that ends at off, the
// first line of a publish whose activation line is missing (it starts at
// pub, or pub < 0 when the last complete line is no such line): the log is
// cut back to pub as if that line were torn too.
func cutPublish(b *decodedBatch, pub, off int64) {
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
func (s *Store) cutTail(off int64, lineNo, n int, why string) error {
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

// committer checks against the state, writes, syncs and publishes batches
// of requests in arrival order until reqs is closed, holding commitMu for
// each batch and each maintenance step.
func (s *Store) committer() {
	defer close(s.done)
	batch := make([]*request, 0, maxBatch)
	for {
		r, ok := <-s.reqs
		if !ok {
			return
		}
		s.commitMu.Lock()
		if r.run != nil {
			s.runStep(r)
			s.commitMu.Unlock()
			continue
		}
		batch = append(batch[:0], r)
		var step *request
	drain:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				if r.run != nil {
					step = r
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.buf = s.commitBatch(s.tx, batch, s.buf[:0])
		for i, r := range batch {
			close(r.done)
			batch[i] = nil
		}
		if step != nil {
			s.runStep(step)
		}
		s.commitMu.Unlock()
	}
}

func (s *Store) commitBatch(tx *logstate.Tx, batch []*request, buf []byte) []byte {
	if p := s.failed.Load(); p != nil {
		for _, r := range batch {
			r.err = varplane.Unavailable(*p)
		}
		return buf
	}
	accepted, events := 0, 0
	for _, r := range batch {
		var err error
		switch {
		case r.act != nil:
			if r.created, err = tx.AppendPublishPrepared(r.ev, r.act, r.expected); err == nil {
				r.stored = r.act
				if r.created {
					buf = append(append(buf, r.line...), r.actLine...)
					events++
				} else {
					buf = append(buf, r.keyLine...)
				}
			}
		case r.subtree:
			if r.stored, err = tx.AppendSubtree(r.ev, r.expected); err == nil {
				buf = append(eventjson.AppendEvent(buf, r.stored), '\n')
			}
		default:
			if err = tx.AppendPrepared(r.ev, r.expected); err == nil {
				r.stored = r.ev
				buf = append(buf, r.line...)
			}
		}
		if err != nil {
			r.err = err
			continue
		}
		accepted++
		events++
	}
	s.rejected.Add(uint64(len(batch) - accepted))
	if accepted == 0 {
		tx.Discard()
		return buf
	}
	buf = CloseBatch(buf, 0)
	if err := s.write(buf); err != nil {
		tx.Discard()
		s.failed.Store(&err)
		s.log.Error("file store: commit failed; refusing further writes", "path", s.path, "err", err)
		for _, r := range batch {
			if r.err == nil {
				// The batch was handed to the kernel: after a failed write or
				// fdatasync its bytes may still reach the disk.
				r.stored, r.err = nil, varplane.OutcomeUnknown(err)
			}
		}
		return buf
	}
	s.off += int64(len(buf))
	s.used.Store(s.off)
	s.commits.Add(uint64(events))
	s.batches.Add(1)
	s.kickZeroer()
	s.watchers.Notify(tx.Commit())
	return buf
}

// write appends buf at s.off, in allocated space when it can, and syncs it.
// On failure it tries to cut the log back to s.off so that a later Open does
// not see a half-written batch.
func (s *Store) write(buf []byte) error {
	s.reserve(len(buf))
	_, err := s.f.WriteAt(buf, s.off)
	if err == nil {
		err = s.syncf()
		if err != nil {
			err = fmt.Errorf("file store: fdatasync %s: %w", s.path, err)
		}
	} else {
		err = fmt.Errorf("file store: write %s: %w", s.path, err)
	}
	if err != nil {
		if terr := s.f.Truncate(s.off); terr != nil {
			s.log.Error("file store: cannot cut a failed batch off the log", "path", s.path, "err", terr)
		}
		s.size = s.off
	}
	return err
}

func (s *Store) submit(ctx context.Context, ev *varplane.Event, expected varplane.Generation, subtree bool) (*varplane.Event, error) {
	r := &request{ev: ev, expected: expected, subtree: subtree}
	if !subtree {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := logstate.Prepare(ev, expected)
		if err != nil {
			s.rejected.Add(1)
			return nil, err
		}
		r.ev, r.line = p, encodeLine(p, "")
	}
	return r.stored, s.send(ctx, r)
}

// encodeLine returns the log line of ev, newline included, in one
// allocation; a non-empty mark replaces the closing brace (publishMark).
func encodeLine(ev *varplane.Event, mark string) []byte {
	b := eventjson.Event(ev) // its capacity leaves room for the mark and newline
	if mark != "" {
		b = append(b[:len(b)-1], mark...)
	}
	return append(b, '\n')
}

// preparePublish fills r, a publish of created and activated, with the
// prepared events and the lines the committer may write: the marked first
// line and the activation without the key when the revision is new, the
// activation with the key when it is found.
func (s *Store) preparePublish(r *request, created, activated *varplane.Event, doc varplane.CheckedDocument) error {
	c, a, err := logstate.PreparePublishChecked(created, activated, r.expected, doc)
	if err != nil {
		s.rejected.Add(1)
		return err
	}
	r.ev, r.act = c, a
	key, hash := a.IdempotencyKey, a.RequestHash
	r.keyLine = encodeLine(a, "")
	r.actLine = r.keyLine
	if key != "" {
		a.IdempotencyKey, a.RequestHash = "", ""
		r.actLine = encodeLine(a, "")
		a.IdempotencyKey, a.RequestHash = key, hash
		c.IdempotencyKey, c.RequestHash = key, hash
	}
	r.line = encodeLine(c, publishMark)
	c.IdempotencyKey, c.RequestHash = "", ""
	return nil
}

// send queues r for the committer and waits for its outcome.
func (s *Store) send(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.done = make(chan struct{})
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return varplane.ErrClosed
	}
	if p := s.failed.Load(); p != nil {
		s.mu.RUnlock()
		return varplane.Unavailable(*p)
	}
	// Nothing queued and no batch in flight: commit here, as the batch of
	// one the committer would make of it at once, without waking it and
	// being woken back (two goroutine hand-offs, tens of microseconds of a
	// lone writer's latency on a small machine). Under load the lock is
	// held or the queue is not empty, and requests queue for the
	// committer's batches as before.
	if r.run == nil && len(s.reqs) == 0 && s.commitMu.TryLock() {
		if len(s.reqs) == 0 {
			one := [1]*request{r}
			s.buf = s.commitBatch(s.tx, one[:], s.buf[:0])
			s.commitMu.Unlock()
			s.mu.RUnlock()
			return r.err
		}
		s.commitMu.Unlock()
	}
	s.reqs <- r
	s.mu.RUnlock()
	// Once queued, the commit may happen: wait for its outcome whatever ctx
	// says, so that the answer is never ambiguous.
	<-r.done
	return r.err
}

// Name returns "file".
func (s *Store) Name() string { return "file" }

// Path returns the path of the log.
func (s *Store) Path() string { return s.path }

// Replay returns the state of scope right after the event that allocated
// generation gen (generation 0: the never-activated zero state), or a
// not-found error when the scope is not in the log or never reached gen.
func (s *Store) Replay(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	return s.replayAt(ctx, scope, gen)
}

// Append commits ev with the checks of varplane.Store.Append, durably: it
// returns only after the event is written and fdatasync'ed, and only then is
// it visible. The stored event is a normalised copy (UTC timestamp,
// compacted document, generation fields filled in from expected when unset);
// ev is not modified. It returns ErrClosed after Close, the context's error
// if ctx is done before the commit is queued, and a store-unavailable error
// when the write or sync fails; after such a failure the store refuses every
// later commit (fail-stop) and must be reopened.
func (s *Store) Append(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	_, err := s.submit(ctx, ev, expected, false)
	return err
}

// AppendSubtreeDeactivation commits, in one log line, the deactivation of
// ev.Scope and of every active descendant, and sets ev.Cascade to the
// descendants it deactivated. Errors and durability as Append.
func (s *Store) AppendSubtreeDeactivation(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	stored, err := s.submit(ctx, ev, expected, true)
	if err == nil {
		ev.Cascade = slices.Clone(stored.Cascade)
	}
	return err
}

// AppendPublish commits a publish (see varplane.Store.AppendPublish) in one
// write and one fdatasync, shared with the other commits of its batch: the
// revision-created line, marked as the first of a publish, unless the
// revision is already stored, then the activation line. Errors and
// durability as Append.
func (s *Store) AppendPublish(ctx context.Context, created, activated *varplane.Event, expected varplane.Generation) (bool, error) {
	return s.AppendPublishChecked(ctx, created, activated, expected, varplane.CheckedDocument{})
}

// AppendPublishChecked is AppendPublish that does not scan created's
// document again when doc vouches for it (varplane.CheckedPublisher).
func (s *Store) AppendPublishChecked(ctx context.Context, created, activated *varplane.Event, expected varplane.Generation, doc varplane.CheckedDocument) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r := &request{expected: expected}
	if err := s.preparePublish(r, created, activated, doc); err != nil {
		return false, err
	}
	err := s.send(ctx, r)
	return r.created && err == nil, err
}

// Watch registers fn for every commit that changes a head, called by the
// committer of the batch (the store's goroutine, or the committing caller's
// when it commits alone) after the snapshot is installed, in commit order.
func (s *Store) Watch(fn func(varplane.Commit)) (cancel func()) {
	return s.watchers.Add(fn)
}

// Stats are commit counters since Open.
type Stats struct {
	// Commits counts events written and acknowledged.
	Commits uint64
	// Fsyncs counts the writes that carried them, each followed by one
	// fdatasync (unless NoSync).
	Fsyncs uint64
	// Refused counts events refused by validation (conflicts, duplicates…).
	Refused uint64
}

// EventsPerFsync is Commits / Fsyncs: how many commits group commit folded
// into each fsync.
func (st Stats) EventsPerFsync() float64 {
	if st.Fsyncs == 0 {
		return 0
	}
	return float64(st.Commits) / float64(st.Fsyncs)
}

// Stats returns the commit counters. Safe for concurrent use.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Fsyncs: s.batches.Load(), Refused: s.rejected.Load()}
}

// Close stops the committer after the commits already queued, syncs and
// closes the log, and releases the lock. Later calls return ErrClosed;
// closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reqs)
	s.mu.Unlock()
	<-s.done
	s.stopZeroer()
	s.stopCold()
	s.Shut()
	s.bodies.retire()
	var errs []error
	if s.failed.Load() == nil {
		if err := s.trimPrealloc(); err != nil {
			errs = append(errs, err)
		}
		if err := s.f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("file store: sync %s: %w", s.path, err))
		}
	}
	if err := s.f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("file store: close %s: %w", s.path, err))
	}
	if err := unix.Flock(int(s.lock.Fd()), unix.LOCK_UN); err != nil {
		errs = append(errs, fmt.Errorf("file store: unlock %s.lock: %w", s.path, err))
	}
	if err := s.lock.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
