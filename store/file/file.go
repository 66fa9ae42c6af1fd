// Package file is the durable varplane.Store: an append-only log book of
// events, one JSON object per line (the JSON form of varplane.Event, with
// its seq and hash, the link of its scope's chain), folded in memory for
// reads. The log holds nothing but event lines (log format 3, format.go),
// so jq, grep and tail -f read it while the server runs. A commit is
// durable before it is acknowledged and before any reader can see it: its
// batch is fdatasync'ed as a record of the write-ahead file beside the log
// (wal.go), which Open writes back into a log that lost it, then written to
// the log; concurrent commits share one write and one fdatasync (group
// commit), and a publish's two lines are in one write. On Open the log is
// replayed and every chain checked; a torn tail that a crash left is cut
// off with a warning, while damage that may hold an acknowledged commit,
// wherever it is, stops Open with an error naming the line and its byte
// offset (see Open). Logs written before format 3 are converted once, at
// Open (convert.go). The fold holds in memory the documents of heads and of
// revisions committed since Open; the others are read from the log when
// asked for (bodies.go).
//
// Concurrency contract: every method is safe for concurrent use. Reads never
// wait for a commit; State takes no lock and does not allocate for a scope
// that exists. Commits are checked against the state, linked into their
// chains, written and published in order by one committer at a time: the
// committer goroutine that the Store owns and Close stops, which batches
// what is queued, or the committing caller itself when nothing is queued
// and no batch is in flight (a lone writer then skips two goroutine
// hand-offs). The checks that need no state, and the encoding of the log
// lines up to their link, run on the committing caller's goroutine before
// it commits or queues. Watch callbacks run on whichever goroutine commits,
// after the snapshot is installed and before the commits are acknowledged,
// so they must not block nor commit to the store.
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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/varplane/varplane"
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
	// CheckpointEvery is how many events the log gains between two
	// checkpoints written in the background beside it (checkpoint.go),
	// besides the one Close writes: 0 means 100,000; a negative value
	// writes none, not even at Close, and every Open replays the whole
	// log.
	CheckpointEvery int
	// WALSize is the size of the write-ahead file beside the log
	// ("<path>.wal", wal.go), which a commit is synced to instead of the
	// log: 0 means 4 MiB; a negative value writes none, and every commit
	// syncs the log itself (each fdatasync then also commits the growth of
	// the file). Ignored with NoSync, which writes none. A write-ahead file
	// left by an earlier run is read at Open whatever this says, and kept
	// at its size.
	WALSize int64
}

// maxBatch bounds the commits that share one write and fsync.
const maxBatch = 1024

// Store is a file-backed store. Obtain one with Open.
type Store struct {
	logstate.Reads  // State, Scopes
	logstate.Leases // AcquireLease, RenewLease, ReleaseLease: in this process
	logstate.Beats  // instance statuses and canary reports: in this process

	path string
	log  *slog.Logger
	st   *logstate.State

	f     *os.File
	lock  *os.File
	off   int64 // under commitMu once Open returns: end of the last durable line
	syncf func() error
	wal   *wal // nil: commits sync the log itself (NoSync, WALSize < 0, not created yet)
	// walStart, when not nil, starts opening the WAL on a goroutine (at
	// the first commit); walDone, when not nil, is closed once it is in
	// place (or failed to be). Both under commitMu once Open returns.
	walStart func()
	walDone  chan struct{}
	used     atomic.Int64 // off, for LogSize
	// end, when not 0, is where replay stops reading (VerifyLog).
	end int64
	// lines counts the log's event lines (committer-owned like off).
	lines int64

	mu     sync.RWMutex // guards closing reqs against concurrent sends
	closed bool
	failed atomic.Pointer[error]

	reqs chan *request
	done chan struct{}

	// commitMu is held by whoever commits a batch or runs a maintenance
	// step: the committer goroutine, or a caller that finds the committer
	// idle and nothing queued and so commits its own request without the
	// two goroutine hand-offs (send). It guards tx, buf and what the
	// committer owns (off, lines, f, syncf, bodies).
	commitMu sync.Mutex
	tx       *logstate.Tx
	buf      []byte

	watchers logstate.Watchers

	commits, batches, rejected atomic.Uint64

	// Checkpoints (checkpoint.go): ckMu is held while one is written
	// (and by a compaction, which moves the lines they point at); cold
	// reads the log before the checkpoint Open started from (cold.go).
	ckMu sync.Mutex
	ck   checkpointer
	ckf  *os.File // the checkpoint Open read, whose blocks the fold may still read
	cold *cold

	// Retention (compact.go, reclaim.go).
	bodies    *bodyFile // reads the documents the fold keeps on disk (bodies.go)
	noSync    bool
	reclaimMu sync.Mutex
	reclaim   reclaimList // the to-delete list (reclaim.go)
	compactMu sync.Mutex  // one compaction at a time
}

// A request is one commit for the committer. A plain append or a publish
// arrives prepared: normalised, checked for what does not depend on the
// state, and encoded up to its link by the submitting goroutine, so that
// the committer only checks it against the state, links, orders, writes
// and syncs. A subtree deactivation, whose cascade depends on the state, is
// prepared there.
type request struct {
	ev       *varplane.Event // subtree: as given; otherwise prepared
	act      *varplane.Event // a publish: its prepared activation (ev is its revision)
	expected varplane.Generation
	subtree  bool
	line     []byte // ev's open line (openLine); a publish: its first line
	actLine  []byte // a publish: the activation's open line without the key (after a created revision)
	keyLine  []byte // a publish: the activation's open line with the key (a found revision)
	stored   *varplane.Event
	created  bool // a publish appended its revision-created event
	err      error
	done     chan struct{}
	run      func() error // a maintenance step (compact.go), run between batches
}

// Open opens (creating it and its directory when absent, 0700/0600) the log
// at path, replays it, and starts the committer. It returns ErrLocked
// (wrapped, naming the path) when the log is already open for writing. A
// log written before format 3 is converted first (convert.go).
//
// Replay checks every line: it must decode, carry the next link of its
// scope's chain (varplane.ChainHash), and follow from the lines before it
// (generations, revisions, idempotency keys, cascades). The torn-tail rule:
// only bytes after the last acknowledged event may be cut. Every commit is
// acknowledged only after its write and the fdatasync after it (of the
// WAL's record, which Open first writes back into the log when the log
// lost it: wal.go), and the
// log grows by appends, so what a crash leaves after the last acknowledged
// line is a prefix of the last write, possibly followed by zeros where the
// filesystem had grown the file without its data. Open therefore cuts,
// with a warning (none when they are all zeros), the bytes after the last
// complete line when they hold no newline, and a run of lines that hold
// zero bytes when no whole line without one follows them (the writer never
// writes a zero byte; a crash during a write that spans several blocks can
// leave some reading as zeros). A publish whose activation line is cut
// loses its first line too, so a crash never shows half a publish. Any
// other line that does not decode or does not link, wherever it is (the
// last one too), may be an acknowledged event: Open fails with an error
// naming the line number and its byte offset and changes nothing in the
// file. So does a line of zeros that a whole line follows: it was written
// before that line, which a crash does not leave after a hole of its own
// write.
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
	if err := removeLeftovers(path, logger); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	converted := false
	if statErr == nil {
		legacy, err := isLegacy(path)
		if err != nil {
			return nil, err
		}
		if legacy {
			if err := convertLegacy(ctx, path, logger); err != nil {
				return nil, err
			}
			converted = true
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s: %w", path, err)
	}
	// Before anything reads the log: the batches acknowledged from the
	// write-ahead file that the log lost (a crash that lost the page
	// cache). A converted log was never written with this WAL.
	walClean := false
	if !converted {
		n, clean, err := recoverWAL(f, path, path+walSuffix)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		walClean = clean
		if n > 0 {
			logger.Warn("file store: restored the log's last batches from its write-ahead file", "path", path, "batches", n)
		}
	} else if err := os.Remove(path + walSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		_ = f.Close()
		return nil, fmt.Errorf("file store: remove %s%s: %w", path, walSuffix, err)
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
		buf:  make([]byte, walRecHdr, 64<<10),
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
	s.ck.every = int64(opts.CheckpointEvery)
	if s.ck.every == 0 {
		s.ck.every = checkpointEveryDefault
	}
	err = s.load(ctx)
	if err == nil {
		err = s.startWAL(opts, walClean)
	}
	if err != nil {
		s.bodies.retire()
		if s.ckf != nil {
			_ = s.ckf.Close()
		}
		_ = f.Close()
		return nil, err
	}
	s.used.Store(s.off)
	s.ck.kicked = s.lines
	s.tx = s.st.Begin()
	go s.committer()
	if ck := s.ck.from; ck != nil {
		s.startCold(ck.hdr.Log)
	}
	s.startCheckpointer()
	return s, nil
}

// load folds the log: from the checkpoint beside it and the lines after
// it when the checkpoint matches the log, else the whole log (see
// checkpoint.go).
func (s *Store) load(ctx context.Context) error {
	var ck *checkpoint
	if s.ck.every > 0 {
		var err error
		if ck, err = s.readCheckpoint(); err != nil {
			s.log.Warn("file store: ignoring the checkpoint, which cannot be read; replaying the whole log", "path", s.path+checkpointSuffix, "err", err)
		}
	}
	if ck != nil {
		fi, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("file store: stat %s: %w", s.path, err)
		}
		if err := ck.verify(ctx, s.f, fi.Size()); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("file store: ignoring the checkpoint, which does not match the log; replaying the whole log", "path", s.path+checkpointSuffix, "err", err)
			defer ck.f.Close()
			torn, err := s.replay(ctx, s.st.Bulk(), 0, 0)
			if err != nil {
				return err
			}
			// Before anything is cut: the log must hold what the
			// checkpoint saw, or nothing of it changes.
			if err := ck.reached(s.st); err != nil {
				return fmt.Errorf("file store: %s does not hold what its checkpoint %s%s recorded (move the checkpoint away to open the log as it is): %w", s.path, s.path, checkpointSuffix, err)
			}
			return s.cut(torn)
		}
		if err := s.st.Restore(ck.scopes, nil); err != nil {
			return fmt.Errorf("file store: %s%s: the checkpoint does not hold together: %w", s.path, checkpointSuffix, err)
		}
		s.ck.from, s.ckf = ck, ck.f
		torn, err := s.replay(ctx, s.st.Bulk(), ck.hdr.Log, int(ck.hdr.Lines))
		if err != nil {
			return err
		}
		return s.cut(torn)
	}
	torn, err := s.replay(ctx, s.st.Bulk(), 0, 0)
	if err != nil {
		return err
	}
	return s.cut(torn)
}

// removeLeftovers removes the files a crash may leave beside the log: a
// compaction or a conversion that had not taken the log's name yet.
func removeLeftovers(path string, logger *slog.Logger) error {
	for _, suffix := range []string{compactSuffix, convertSuffix} {
		p := path + suffix
		switch err := os.Remove(p); {
		case err == nil:
			logger.Warn("file store: removed an unfinished rewrite of the log", "path", p)
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("file store: remove unfinished rewrite %s: %w", p, err)
		}
	}
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
		s.buf = s.commitBatch(s.tx, batch, s.buf[:walRecHdr])
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

// commitBatch commits batch and returns buf, which holds walRecHdr bytes
// of room for the record header (write) before the batch's log bytes.
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
					buf = appendLink(append(buf, r.line...), r.ev, publishMark)
					buf = appendLink(append(buf, r.actLine...), r.act, "")
					events++
				} else {
					buf = appendLink(append(buf, r.keyLine...), r.act, "")
				}
			}
		case r.subtree:
			if r.stored, err = tx.AppendSubtree(r.ev, r.expected); err == nil {
				buf = appendLine(buf, r.stored, "")
			}
		default:
			if err = tx.AppendPrepared(r.ev, r.expected); err == nil {
				r.stored = r.ev
				buf = appendLink(append(buf, r.line...), r.ev, "")
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
	s.startWALNow()
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
	s.off += int64(len(buf) - walRecHdr)
	s.lines += int64(events)
	s.used.Store(s.off)
	s.commits.Add(uint64(events))
	s.batches.Add(1)
	s.kickCheckpointer()
	s.watchers.Notify(tx.Commit())
	return buf
}

// write appends rec[walRecHdr:] at s.off and makes it durable. The log
// grows by appends: space allocated ahead would either be seen as zeros
// after the last line (what format 2 did, and what tail -f and grep then
// showed) or, kept out of the file's size (FALLOC_FL_KEEP_SIZE), cost each
// fdatasync the same journal commit as growing the file
// (docs/architecture.md). So the batch is made durable as a record of the
// write-ahead file (wal.go), whose fdatasync overwrites written blocks,
// and then written to the log, which is synced only when the WAL's ring is
// full; without a WAL, or for a batch larger than its ring, the log is
// synced itself. On failure it tries to cut the log back to s.off so that
// a later Open does not see a half-written batch (the record, when it
// reached the WAL, may still be restored: the outcome is unknown).
func (s *Store) write(rec []byte) error {
	buf := rec[walRecHdr:]
	var err error
	switch {
	case s.wal != nil && s.wal.fits(len(rec)):
		if err = s.wal.append(rec, s.off, s.syncLog); err == nil {
			if _, err = s.f.WriteAt(buf, s.off); err != nil {
				s.wal.drop(len(rec))
				err = fmt.Errorf("file store: write %s: %w", s.path, err)
			}
		}
	default:
		if _, err = s.f.WriteAt(buf, s.off); err != nil {
			err = fmt.Errorf("file store: write %s: %w", s.path, err)
		} else if err = s.syncLog(); err == nil && s.wal != nil {
			// The log is durable: the next record starts a lap.
			err = s.wal.newLap(func() error { return nil })
		}
	}
	if err != nil {
		if terr := s.f.Truncate(s.off); terr != nil {
			s.log.Error("file store: cannot cut a failed batch off the log", "path", s.path, "err", terr)
		}
	}
	return err
}

// syncLog fdatasyncs the log (nothing with NoSync). Under commitMu.
func (s *Store) syncLog() error {
	if err := s.syncf(); err != nil {
		return fmt.Errorf("file store: fdatasync %s: %w", s.path, err)
	}
	return nil
}

// startWAL makes the log durable and opens its write-ahead file for a new
// epoch, or removes it when commits sync the log itself. The WAL is opened
// (reset: a header write and an fdatasync) on a goroutine, so that Open
// does not wait for it, and one that is absent or not whole is created (4
// MiB of zeros) there at the first commit, so that a store that commits
// nothing never writes one: until it is in place, commits sync the log
// itself. clean says that the WAL beside the log held no record (a Close
// or a reset left it): the log is durable already, without the sync a log
// that a killed process left needs.
func (s *Store) startWAL(opts Options, clean bool) error {
	p := s.path + walSuffix
	if opts.NoSync || opts.WALSize < 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("file store: remove %s: %w", p, err)
		}
		return nil
	}
	if !clean {
		// What the log holds now may be the page cache's only (a process
		// that was killed): durable before the WAL forgets it.
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("file store: sync %s: %w", s.path, err)
		}
	}
	s.walStart = func() {
		s.walDone = make(chan struct{})
		go func() {
			defer close(s.walDone)
			w, err := openWAL(p, opts.WALSize)
			if err != nil {
				s.log.Warn("file store: cannot open the write-ahead file; every commit syncs the log itself", "path", p, "err", err)
				return
			}
			// Every commit until now synced the log: it is durable.
			s.commitMu.Lock()
			s.wal = w
			s.commitMu.Unlock()
		}()
	}
	if fi, err := os.Stat(p); err == nil && fi.Size() >= walSizeMin {
		s.startWALNow()
	}
	return nil
}

// startWALNow starts opening the WAL unless it is started already. Under
// commitMu once Open returns.
func (s *Store) startWALNow() {
	if f := s.walStart; f != nil {
		s.walStart = nil
		f()
	}
}

// waitWAL waits until a WAL being created is in place (or failed to be).
func (s *Store) waitWAL() {
	if s.walDone != nil {
		<-s.walDone
	}
}

// resetWAL starts a new epoch of the write-ahead file once the log is
// durable: before the log changes other than by appends (a compaction), and
// at Close. Under commitMu, or once the committer has stopped.
func (s *Store) resetWAL() error {
	if s.wal == nil {
		return nil
	}
	if err := s.syncLog(); err != nil {
		return err
	}
	return s.wal.reset()
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
		if err := checkLineSize(p); err != nil {
			s.rejected.Add(1)
			return nil, err
		}
		r.ev, r.line = p, openLine(p)
	}
	if ev.IdempotencyKey != "" {
		// Checked against every key the log holds (cold.go).
		if err := s.waitCold(ctx); err != nil {
			return nil, err
		}
	}
	err := s.send(ctx, r)
	r.releaseLines()
	if err == nil {
		ev.Seq, ev.Hash = r.stored.Seq, r.stored.Hash
	}
	return r.stored, err
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
	r.keyLine = openLine(a)
	r.actLine = r.keyLine
	if key != "" {
		a.IdempotencyKey, a.RequestHash = "", ""
		r.actLine = openLine(a)
		a.IdempotencyKey, a.RequestHash = key, hash
		c.IdempotencyKey, c.RequestHash = key, hash
	}
	r.line = openLine(c)
	err = checkLineSize(c)
	c.IdempotencyKey, c.RequestHash = "", ""
	if err != nil {
		s.rejected.Add(1)
	}
	return err
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
			s.buf = s.commitBatch(s.tx, one[:], s.buf[:walRecHdr])
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

// Append commits ev with the checks of varplane.Store.Append, durably: it
// returns only after the event is written and fdatasync'ed, and only then is
// it visible. The stored event is a normalised copy (UTC timestamp,
// compacted document, generation fields filled in from expected when unset)
// linked into its scope's chain; of ev, only Seq and Hash are set, to that
// link. An event whose log line would be longer than a line the reader
// accepts (a document far beyond varplane.MaxBodyCeiling) is a bad request.
// It returns ErrClosed after Close, the context's error
// if ctx is done before the commit is queued, and a store-unavailable error
// when the write or sync fails; after such a failure the store refuses every
// later commit (fail-stop) and must be reopened.
func (s *Store) Append(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	_, err := s.submit(ctx, ev, expected, false)
	return err
}

// AppendSubtreeDeactivation commits, in one log line, the deactivation of
// ev.Scope and of every active descendant (one event of ev.Scope's chain),
// and sets ev.Cascade to the descendants it deactivated and ev.Seq, ev.Hash
// to its link. Errors and durability as Append.
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
// revision is already stored, then the activation line. It sets the Seq
// and Hash of each event to its link (created's to zero when it was not
// appended). Errors and durability as Append.
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
	defer r.releaseLines()
	if err := s.preparePublish(r, created, activated, doc); err != nil {
		return false, err
	}
	if activated.IdempotencyKey != "" {
		if err := s.waitCold(ctx); err != nil {
			return false, err
		}
	}
	if err := s.send(ctx, r); err != nil {
		return false, err
	}
	created.Seq, created.Hash = 0, ""
	if r.created {
		created.Seq, created.Hash = r.ev.Seq, r.ev.Hash
	}
	activated.Seq, activated.Hash = r.act.Seq, r.act.Hash
	return r.created, nil
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
	if !s.stop() {
		return nil
	}
	var errs []error
	if s.failed.Load() == nil && s.ck.every > 0 {
		// The committer has stopped: the state is the log's.
		if err := s.checkpoint(context.Background(), false); err != nil {
			s.log.Warn("file store: cannot write the checkpoint; the next Open replays more of the log", "path", s.path, "err", err)
		}
	}
	s.Shut()
	s.bodies.retire()
	if s.ckf != nil {
		_ = s.ckf.Close()
	}
	if s.failed.Load() == nil {
		if err := s.f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("file store: sync %s: %w", s.path, err))
		} else if err := s.resetWAL(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.wal != nil {
		if err := s.wal.close(); err != nil {
			errs = append(errs, fmt.Errorf("file store: close %s: %w", s.wal.path, err))
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

// stop stops the committer after the commits already queued, and the work
// on other goroutines; it reports false when s was stopped already.
func (s *Store) stop() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	close(s.reqs)
	s.mu.Unlock()
	<-s.done
	s.waitWAL()
	s.stopCheckpointer()
	s.stopCold()
	return true
}
