package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/atomicfile"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/logstate"
	"golang.org/x/sys/unix"
)

// The checkpoint is a file beside the log, <path>.checkpoint, that holds
// the state at an offset of the log, so that Open reads it and the log's
// tail instead of replaying the whole log. The log is never rewritten for
// it. It is written in the background after CheckpointEvery events, and at
// Close, whole or not at all (internal/atomicfile), as JSON lines:
//
//	header   {"checkpoint":3,"log":X,"lines":N,"chunk":C,"chunks":[…],"digest":D,"chains":H}
//	         X is the log offset it holds the state at and N the number
//	         of lines before it; the log's bytes before X, cut into chunks
//	         of C bytes, have the SHA-256 digests in chunks (hex, the last
//	         chunk possibly shorter), and D is the SHA-256 of those digests
//	         and of X (8 bytes, big-endian); H is varplane.ChainDigest of the
//	         chain heads at X.
//	scopes   one line a scope: its generation, chain head, head (the
//	         activation that installed it and its revision record, document
//	         included), last rejection, and where its revision block is
//	end      {"checkpointEnd":{"scopes":n,"revisions":m,"crc32c":c}}, c the
//	         CRC-32C of every byte before this line
//	blocks   a line a scope with revisions: the log offsets of its
//	         revision-created lines before X, "[o1,o2,…]"; the scope line
//	         gives its place in the file and its CRC-32C
//
// Open reads the header, the scope lines and the end line, checks the
// digest against the log's bytes before X (the chunks in parallel), folds
// the log's lines from X on, and returns; a scope's block is read the first
// time its revision index is needed, each revision's line then read from
// the log (its document staying there); the history and the idempotency
// records of the events before X are read from the log on a goroutine after
// Open returns (cold.go). A checkpoint that cannot be read, or whose digest
// does not match the log, is ignored with a warning and the log is replayed
// in full; and since a digest cannot tell a log that lost its last events
// from another log, the chain heads a readable checkpoint recorded must be
// reached by the log replayed in full, or Open fails naming the scope.

// checkpointSuffix names the checkpoint beside the log.
const checkpointSuffix = ".checkpoint"

// checkpointVersion is the version of the checkpoint's format.
const checkpointVersion = 3

// digestChunk is the size of the log chunks whose digests the checkpoint
// holds; Open checks them in parallel. Tests lower it.
var digestChunk int64 = 64 << 20

// checkpointEveryDefault is Options.CheckpointEvery's default.
const checkpointEveryDefault = 100_000

var ckCRC = crc32.MakeTable(crc32.Castagnoli)

type ckHeader struct {
	Checkpoint int      `json:"checkpoint"`
	Log        int64    `json:"log"`
	Lines      int64    `json:"lines"`
	Chunk      int64    `json:"chunk"`
	Chunks     []string `json:"chunks"`
	Digest     string   `json:"digest"`
	Chains     string   `json:"chains"`
}

type ckScope struct {
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation"`
	Chain      varplane.ChainHead  `json:"chain"`
	Head       json.RawMessage     `json:"head,omitempty"`
	HeadRecord json.RawMessage     `json:"headRecord,omitempty"`
	Rejected   json.RawMessage     `json:"rejected,omitempty"`
	Revisions  *ckBlock            `json:"revisions,omitempty"`
}

// ckBlock locates a scope's block in the checkpoint file: [At, End), N
// offsets, CRC-32C.
type ckBlock struct {
	At  int64  `json:"at"`
	End int64  `json:"end"`
	N   int    `json:"n"`
	CRC uint32 `json:"crc"`
}

type ckEnd struct {
	End struct {
		Scopes    int    `json:"scopes"`
		Revisions int    `json:"revisions"`
		CRC       uint32 `json:"crc32c"`
	} `json:"checkpointEnd"`
}

// checkpoint is a checkpoint read at Open.
type checkpoint struct {
	hdr    ckHeader
	scopes []logstate.ScopeImage
	heads  map[varplane.Scope]varplane.ChainHead
	f      *os.File // kept open for its blocks
}

// chunker hashes the log's bytes in chunks of digestChunk, from byte
// offset pos on; it is an io.Writer fed the bytes in order.
type chunker struct {
	pos    int64
	size   int64
	chunks [][sha256.Size]byte
	h      hash.Hash
}

func newChunker(size int64) *chunker {
	return &chunker{size: size, h: sha256.New()}
}

func (c *chunker) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(int64(len(p)), c.size-c.pos%c.size)
		c.h.Write(p[:k])
		c.pos += k
		p = p[k:]
		if c.pos%c.size == 0 {
			var sum [sha256.Size]byte
			c.h.Sum(sum[:0])
			c.chunks = append(c.chunks, sum)
			c.h.Reset()
		}
	}
	return n, nil
}

// digest returns the digests of the chunks of the bytes written so far (the
// last one partial) and their combined digest.
func (c *chunker) digest() ([][sha256.Size]byte, string) {
	sums := c.chunks
	if c.pos%c.size != 0 {
		var sum [sha256.Size]byte
		c.h.Sum(sum[:0])
		sums = append(sums[:len(sums):len(sums)], sum)
	}
	return sums, combinedDigest(sums, c.pos)
}

func combinedDigest(sums [][sha256.Size]byte, end int64) string {
	h := sha256.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(end))
	h.Write(b[:])
	return canonical.DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// chunkDigests hashes [0, end) of f in chunks of size, in parallel, from
// a read-only mapping of the file (no copy of the log through a buffer)
// when it can map it, else by reading.
func chunkDigests(ctx context.Context, f *os.File, end, size int64) ([][sha256.Size]byte, error) {
	if end > 0 {
		if m, err := unix.Mmap(int(f.Fd()), 0, int(end), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			defer unix.Munmap(m)
			_ = unix.Madvise(m, unix.MADV_SEQUENTIAL)
			return chunkSums(ctx, end, size, func(h hash.Hash, from, to int64, _ []byte) error {
				h.Write(m[from:to])
				return nil
			})
		}
	}
	return chunkSums(ctx, end, size, func(h hash.Hash, from, to int64, buf []byte) error {
		_, err := io.CopyBuffer(h, io.NewSectionReader(f, from, to-from), buf)
		return err
	})
}

// chunkSums runs sum over the chunks of [0, end), on every CPU.
func chunkSums(ctx context.Context, end, size int64, sum func(h hash.Hash, from, to int64, buf []byte) error) ([][sha256.Size]byte, error) {
	n := (end + size - 1) / size
	sums := make([][sha256.Size]byte, n)
	errs := make([]error, n)
	next := make(chan int64, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(int64(runtime.GOMAXPROCS(0)), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for i := range next {
				if ctx.Err() != nil {
					errs[i] = ctx.Err()
					continue
				}
				h := sha256.New()
				from := i * size
				if err := sum(h, from, min(from+size, end), buf); err != nil {
					errs[i] = err
					continue
				}
				h.Sum(sums[i][:0])
			}
		}()
	}
	wg.Wait()
	return sums, errors.Join(errs...)
}

// readCheckpoint reads the checkpoint beside the log. It returns nil and
// no error when there is none; a checkpoint it cannot read is an error the
// caller warns about (the log is then replayed in full).
func (s *Store) readCheckpoint() (*checkpoint, error) {
	f, err := os.Open(s.path + checkpointSuffix)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ck, err := s.decodeCheckpoint(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return ck, nil
}

// decodeCheckpoint reads the header, the scope lines and the end line of
// the checkpoint in f, in bounded memory per line.
func (s *Store) decodeCheckpoint(f *os.File) (*checkpoint, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	lr := newLineReader(f, 0, 0)
	crc := uint32(0)
	next := func() ([]byte, error) {
		l, err := lr.next()
		switch {
		case err != nil:
			return nil, err
		case l.eof:
			return nil, errors.New("it ends before its end line")
		case !l.complete || l.long:
			return nil, fmt.Errorf("its line %d is not whole", l.lineNo)
		}
		return l.b, nil
	}
	line, err := next()
	if err != nil {
		return nil, err
	}
	ck := &checkpoint{f: f, heads: map[varplane.Scope]varplane.ChainHead{}}
	if err := json.Unmarshal(line, &ck.hdr); err != nil {
		return nil, fmt.Errorf("its header: %w", err)
	}
	h := &ck.hdr
	if h.Checkpoint != checkpointVersion || h.Log < 0 || h.Lines < 0 || h.Chunk <= 0 || int64(len(h.Chunks)) != (h.Log+h.Chunk-1)/h.Chunk {
		return nil, fmt.Errorf("its header is not one of version %d: %.200s", checkpointVersion, line)
	}
	crc = crc32.Update(crc, ckCRC, line)
	revisions := 0
	for {
		line, err := next()
		if err != nil {
			return nil, err
		}
		if bytes.HasPrefix(line, []byte(`{"checkpointEnd":`)) {
			var end ckEnd
			if err := json.Unmarshal(line, &end); err != nil {
				return nil, fmt.Errorf("its end line: %w", err)
			}
			if end.End.CRC != crc || end.End.Scopes != len(ck.scopes) || end.End.Revisions != revisions {
				return nil, fmt.Errorf("its end line does not match its lines (CRC %d, %d scopes, %d revisions; the lines: CRC %d, %d, %d)",
					end.End.CRC, end.End.Scopes, end.End.Revisions, crc, len(ck.scopes), revisions)
			}
			// The blocks' places count from here.
			for _, img := range ck.scopes {
				if b, ok := img.Block.(*ckRevisions); ok {
					b.At, b.End = b.At+lr.off, b.End+lr.off
					if b.End > size {
						return nil, fmt.Errorf("the revisions of scope %q end at byte offset %d, past its end", img.Scope, b.End)
					}
				}
			}
			break
		}
		crc = crc32.Update(crc, ckCRC, line)
		img, err := s.decodeScopeLine(line, f, size)
		if err != nil {
			return nil, fmt.Errorf("its line %d: %w", len(ck.scopes)+2, err)
		}
		if b, ok := img.Block.(*ckRevisions); ok {
			revisions += b.N
		}
		ck.heads[img.Scope] = img.Chain
		ck.scopes = append(ck.scopes, img)
	}
	if ck.hdr.Chains != varplane.ChainDigest(ck.heads) {
		return nil, errors.New("its chain heads do not match its header's digest of them")
	}
	return ck, nil
}

func (s *Store) decodeScopeLine(line []byte, f *os.File, size int64) (logstate.ScopeImage, error) {
	var sl ckScope
	if err := json.Unmarshal(line, &sl); err != nil {
		return logstate.ScopeImage{}, err
	}
	img := logstate.ScopeImage{Scope: sl.Scope, Generation: sl.Generation, Chain: sl.Chain}
	if len(sl.Head) > 0 {
		img.Head = new(varplane.Event)
		var rec varplane.RevisionRecord
		if err := eventjson.DecodeEvent(sl.Head, img.Head); err != nil {
			return img, fmt.Errorf("head: %w", err)
		}
		if err := eventjson.DecodeRecord(sl.HeadRecord, &rec); err != nil {
			return img, fmt.Errorf("head record: %w", err)
		}
		if img.Head.Scope != sl.Scope || rec.Scope != sl.Scope || rec.Revision != img.Head.Revision || len(rec.Document) == 0 {
			return img, errors.New("the head is not the scope's revision")
		}
		img.Revisions = []*varplane.RevisionRecord{&rec}
	}
	if len(sl.Rejected) > 0 {
		img.Rejected = new(varplane.Event)
		if err := eventjson.DecodeEvent(sl.Rejected, img.Rejected); err != nil {
			return img, fmt.Errorf("rejected: %w", err)
		}
	}
	if b := sl.Revisions; b != nil {
		if b.At < 0 || b.End < b.At || b.End > size || b.N <= 0 || b.End-b.At > int64(maxLineBytes) {
			// (Places count from the blocks' start; decodeCheckpoint
			// checks them again once it knows it.)
			return img, fmt.Errorf("its revisions at [%d, %d) are not in the file", b.At, b.End)
		}
		img.Block = &ckRevisions{ck: f, log: s.bodies, scope: sl.Scope, ckBlock: *b}
	}
	return img, nil
}

// appendScopeLine appends sl as a line of JSON. Not encoding/json: it
// would escape the documents' HTML characters, and a document must come
// back byte for byte.
func appendScopeLine(b []byte, sl *ckScope) []byte {
	b = append(b, `{"scope":`...)
	b = jsontext.AppendString(b, string(sl.Scope))
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, uint64(sl.Generation), 10)
	b = append(b, `,"chain":{"seq":`...)
	b = strconv.AppendUint(b, sl.Chain.Seq, 10)
	b = append(b, `,"hash":`...)
	b = jsontext.AppendString(b, sl.Chain.Hash)
	b = append(b, '}')
	for _, f := range [...]struct {
		name string
		v    json.RawMessage
	}{{"head", sl.Head}, {"headRecord", sl.HeadRecord}, {"rejected", sl.Rejected}} {
		if len(f.v) > 0 {
			b = append(b, ',', '"')
			b = append(b, f.name...)
			b = append(b, '"', ':')
			b = append(b, f.v...)
		}
	}
	if r := sl.Revisions; r != nil {
		b = fmt.Appendf(b, `,"revisions":{"at":%d,"end":%d,"n":%d,"crc":%d}`, r.At, r.End, r.N, r.CRC)
	}
	return append(b, '}', '\n')
}

// ckRevisions is a scope's revision block (logstate.RevisionBlock): the
// offsets of its revision-created lines in the log, in the checkpoint file
// ck; Load reads those lines from the log.
type ckRevisions struct {
	ck    io.ReaderAt
	log   *bodyFile
	scope varplane.Scope
	ckBlock
}

// offsets reads and checks the block.
func (b *ckRevisions) offsets() ([]int64, error) {
	buf := make([]byte, b.End-b.At)
	if _, err := b.ck.ReadAt(buf, b.At); err != nil {
		return nil, fmt.Errorf("file store: read the checkpoint's revisions of scope %q: %w", b.scope, err)
	}
	if got := crc32.Checksum(buf, ckCRC); got != b.CRC {
		return nil, fmt.Errorf("file store: the checkpoint's revisions of scope %q at byte offset %d are damaged: checksum %08x, want %08x", b.scope, b.At, got, b.CRC)
	}
	offs, err := parseOffsets(buf)
	if err == nil && len(offs) != b.N {
		err = fmt.Errorf("%d offsets, the scope line counts %d", len(offs), b.N)
	}
	if err != nil {
		return nil, fmt.Errorf("file store: the checkpoint's revisions of scope %q at byte offset %d are damaged: %w", b.scope, b.At, err)
	}
	return offs, nil
}

// Load reads the scope's revision-created lines from the log: the records
// without their documents, where each document is, and the revisions
// retention reclaimed.
func (b *ckRevisions) Load() ([]*varplane.RevisionRecord, []logstate.BodyRef, []varplane.Revision, error) {
	offs, err := b.offsets()
	if err != nil {
		return nil, nil, nil, err
	}
	recs := make([]*varplane.RevisionRecord, 0, len(offs))
	refs := make([]logstate.BodyRef, 0, len(offs))
	var gone []varplane.Revision
	in := eventjson.NewInterner()
	for _, off := range offs {
		line, err := b.log.readLine(off)
		if err != nil {
			return nil, nil, nil, err
		}
		var ev varplane.Event
		at, n, err := eventjson.DecodeEventLazy(line[:len(line)-1], &ev, in)
		switch {
		case err != nil:
		case ev.Kind != varplane.EventRevisionCreated || ev.Scope != b.scope:
			err = errors.New("not a revision of the scope")
		case n == 0 && !bytes.HasSuffix(line, reclaimedEnd):
			err = errors.New("a revision without its document")
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("file store: %s: the line at byte offset %d, a revision of scope %q by the checkpoint, is not one: %w", b.log.path, off, b.scope, err)
		}
		if n == 0 {
			gone = append(gone, ev.Revision)
			continue
		}
		recs = append(recs, &varplane.RevisionRecord{Scope: b.scope, Revision: ev.Revision, SchemaID: ev.SchemaID,
			SchemaVersion: ev.SchemaVersion, Actor: ev.Actor, CreatedAt: ev.Timestamp})
		refs = append(refs, logstate.BodyRef{Src: b.log, Off: off + int64(at), Len: n})
	}
	return recs, refs, gone, nil
}

// parseOffsets parses a block line, "[o1,o2,…]\n".
func parseOffsets(b []byte) ([]int64, error) {
	b, ok := bytes.CutPrefix(b, []byte("["))
	if ok {
		b, ok = bytes.CutSuffix(b, []byte("]\n"))
	}
	if !ok {
		return nil, errors.New("not a line of offsets")
	}
	var out []int64
	for len(b) > 0 {
		num, rest, _ := bytes.Cut(b, []byte(","))
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || v < 0 || (len(out) > 0 && v <= out[len(out)-1]) {
			return nil, fmt.Errorf("offset %q", num)
		}
		out = append(out, v)
		b = rest
	}
	return out, nil
}

// verify checks the checkpoint's digest against the log's bytes before its
// offset; an error says where they differ.
func (ck *checkpoint) verify(ctx context.Context, log *os.File, size int64) error {
	h := &ck.hdr
	if h.Log > size {
		return fmt.Errorf("it holds the state at byte offset %d, and the log has %d bytes", h.Log, size)
	}
	sums, err := chunkDigests(ctx, log, h.Log, h.Chunk)
	if err != nil {
		return err
	}
	for i, sum := range sums {
		if hex.EncodeToString(sum[:]) != h.Chunks[i] {
			from := int64(i) * h.Chunk
			return fmt.Errorf("the log's bytes [%d, %d) are not those it was written after", from, min(from+h.Chunk, h.Log))
		}
	}
	if combinedDigest(sums, h.Log) != h.Digest {
		return errors.New("its digest does not match its chunks")
	}
	return nil
}

// reached reports, for a log replayed in full, the first scope whose chain
// does not reach the head the checkpoint recorded: events were taken out
// of the log.
func (ck *checkpoint) reached(st *logstate.State) error {
	for _, img := range ck.scopes {
		want := img.Chain
		if want.Seq == 0 {
			continue
		}
		hist := st.History(img.Scope)
		found := false
		for i := len(hist) - 1; i >= 0; i-- {
			if hist[i].Seq == want.Seq {
				found = hist[i].Hash == want.Hash
				break
			}
			if hist[i].Seq != 0 && hist[i].Seq < want.Seq {
				break
			}
		}
		if !found {
			have := st.State(img.Scope).Chain
			return fmt.Errorf("the chain of scope %q reaches seq %d, and the checkpoint recorded seq %d (hash %s): events of the log were taken out, or the checkpoint belongs to another copy of it",
				img.Scope, have.Seq, want.Seq, want.Hash)
		}
	}
	return nil
}

// checkpointer is the state of the checkpoints a Store writes: what the
// last one covered, carried to the next so that each reads only the log's
// bytes since. Guarded by ckMu.
type checkpointer struct {
	every int64 // events between background checkpoints; < 0: none at all
	// at and lines: the log offset the last checkpoint covered and its
	// lines; sums hashes [0, at) (nil: to be taken up from from); revs
	// the offsets of the revision-created lines before at, by scope (nil:
	// to be read from from's blocks).
	at, lines int64
	sums      *chunker
	revs      map[varplane.Scope][]int64
	from      *checkpoint
	// kicked is s.lines when the committer last woke the writer
	// (committer-owned).
	kicked int64
	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// startCheckpointer starts the goroutine that writes a checkpoint when the
// committer kicks it, until Close.
func (s *Store) startCheckpointer() {
	if s.ck.every <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.ck.kick, s.ck.cancel, s.ck.done = make(chan struct{}, 1), cancel, make(chan struct{})
	go func() {
		defer close(s.ck.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.ck.kick:
			}
			if err := s.checkpoint(ctx, true); err != nil && ctx.Err() == nil {
				s.log.Warn("file store: cannot write a checkpoint; the next restart replays more of the log", "path", s.path, "err", err)
			}
		}
	}()
}

// stopCheckpointer stops the background writer and waits for it.
func (s *Store) stopCheckpointer() {
	if s.ck.cancel != nil {
		s.ck.cancel()
		<-s.ck.done
	}
}

// kickCheckpointer wakes the writer once the log gained every events since
// it last did. Under commitMu.
func (s *Store) kickCheckpointer() {
	if s.ck.kick != nil && s.lines-s.ck.kicked >= s.ck.every {
		s.ck.kicked = s.lines
		select {
		case s.ck.kick <- struct{}{}:
		default:
		}
	}
}

// checkpoint writes a checkpoint of the state at the log's current end,
// unless the last one is there already. live says whether the committer
// runs (it takes the state between two batches) or has stopped (Close).
func (s *Store) checkpoint(ctx context.Context, live bool) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	var (
		at, lines int64
		states    []*varplane.ScopeState
	)
	take := func() error {
		// A checkpoint covers the durable log only: with a WAL, the log
		// is synced when its ring is full, so sync it here.
		if s.wal != nil {
			if err := s.syncLog(); err != nil {
				// The page cache may have dropped what did not reach the
				// disk: only the WAL holds it, until its next lap.
				s.failed.Store(&err)
				return err
			}
		}
		at, lines = s.off, s.lines
		for _, sc := range s.st.Scopes() {
			states = append(states, s.st.State(sc))
		}
		return nil
	}
	if live {
		if err := s.runOnCommitter(ctx, take); err != nil {
			return err
		}
	} else {
		_ = take()
	}
	ck := &s.ck
	if (at == ck.at && ck.sums != nil) || (ck.sums == nil && ck.from != nil && at == ck.from.hdr.Log) {
		return nil // the last one holds this state
	}
	if err := s.resumeCheckpointer(ctx); err != nil {
		return err
	}
	// The log's bytes since the last checkpoint: their digests, and the
	// revision-created lines among them.
	lr := newLineReader(io.TeeReader(io.NewSectionReader(s.f, ck.at, at-ck.at), ck.sums), ck.at, 0)
	for {
		l, err := lr.next()
		if err != nil {
			return fmt.Errorf("file store: read %s: %w", s.path, err)
		}
		if l.eof {
			break
		}
		if !l.complete || l.long {
			return fmt.Errorf("file store: %s: the line at byte offset %d is not whole", s.path, l.off)
		}
		if l.lineNo%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if isCreatedLine(l.b) {
			sc, ok := createdLineScope(l.b)
			if !ok {
				var ev varplane.Event
				if _, _, err := eventjson.DecodeEventLazy(l.b[:len(l.b)-1], &ev, nil); err != nil {
					return fmt.Errorf("file store: %s: the line at byte offset %d: %w", s.path, l.off, err)
				}
				sc = ev.Scope
			}
			ck.revs[sc] = append(ck.revs[sc], l.off)
		}
	}
	ck.at, ck.lines = at, lines
	sums, digest := ck.sums.digest()
	hdr := ckHeader{Checkpoint: checkpointVersion, Log: at, Lines: lines, Chunk: digestChunk, Digest: digest, Chunks: make([]string, len(sums))}
	for i, sum := range sums {
		hdr.Chunks[i] = hex.EncodeToString(sum[:])
	}
	heads := make(map[varplane.Scope]varplane.ChainHead, len(states))
	for _, ss := range states {
		heads[ss.Scope] = ss.Chain
	}
	hdr.Chains = varplane.ChainDigest(heads)
	return atomicfile.WriteFunc(s.path+checkpointSuffix, func(w io.Writer) error {
		return s.writeCheckpoint(w, &hdr, states)
	})
}

// resumeCheckpointer takes up what the checkpoint Open read covered, the
// first time a checkpoint follows it: the digest of the chunk in progress
// and every scope's block.
func (s *Store) resumeCheckpointer(ctx context.Context) error {
	ck := &s.ck
	if ck.sums != nil {
		return nil
	}
	if ck.from == nil {
		ck.at, ck.lines, ck.sums, ck.revs = 0, 0, newChunker(digestChunk), map[varplane.Scope][]int64{}
		return nil
	}
	from := ck.from
	c := newChunker(from.hdr.Chunk)
	whole := from.hdr.Log / from.hdr.Chunk
	for i := range whole {
		b, err := hex.DecodeString(from.hdr.Chunks[i])
		if err != nil || len(b) != sha256.Size {
			return errors.New("file store: the checkpoint's chunk digests are damaged")
		}
		c.chunks = append(c.chunks, [sha256.Size]byte(b))
	}
	c.pos = whole * from.hdr.Chunk
	if _, err := io.Copy(c, io.NewSectionReader(s.f, c.pos, from.hdr.Log-c.pos)); err != nil {
		return fmt.Errorf("file store: read %s: %w", s.path, err)
	}
	revs := map[varplane.Scope][]int64{}
	for _, img := range from.scopes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if b, ok := img.Block.(*ckRevisions); ok {
			offs, err := b.offsets()
			if err != nil {
				return err
			}
			revs[img.Scope] = offs
		}
	}
	ck.at, ck.lines, ck.sums, ck.revs = from.hdr.Log, from.hdr.Lines, c, revs
	return nil
}

// resetCheckpointer forgets what the checkpoints covered (a compaction
// moved the lines): the next one reads the whole log.
func (s *Store) resetCheckpointer() {
	s.ck.at, s.ck.lines, s.ck.sums, s.ck.revs, s.ck.from = 0, 0, nil, nil, nil
}

// writeCheckpoint writes the checkpoint's lines to w.
func (s *Store) writeCheckpoint(w io.Writer, hdr *ckHeader, states []*varplane.ScopeState) error {
	crc := uint32(0)
	put := func(b []byte, sum bool) error {
		if sum {
			crc = crc32.Update(crc, ckCRC, b)
		}
		_, err := w.Write(b)
		return err
	}
	line, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	if err := put(append(line, '\n'), true); err != nil {
		return err
	}
	// A block's place is counted from the end of the end line, so that no
	// scope line depends on the lengths of the others.
	var (
		blocks [][]byte
		at     int64
		end    ckEnd
	)
	for _, ss := range states {
		sl := ckScope{Scope: ss.Scope, Generation: ss.Generation, Chain: ss.Chain}
		if h := ss.Head; h != nil {
			rec := s.st.Resident(ss.Scope, h.Revision) // a head's is held in memory
			if rec == nil {
				var err error
				if rec, err = s.st.RevisionOrGone(ss.Scope, h.Revision); err != nil {
					return fmt.Errorf("the head of scope %q: %w", ss.Scope, err)
				}
			}
			sl.Head = eventjson.Event(&varplane.Event{Kind: varplane.EventActivated, Scope: h.Scope, Revision: h.Revision,
				Generation: h.Generation, Actor: h.Actor, Reason: h.Reason, Timestamp: h.EffectiveAt})
			sl.HeadRecord = eventjson.Record(rec)
		}
		if r := ss.LastRejected; r != nil {
			sl.Rejected = eventjson.Event(r)
		}
		if offs := s.ck.revs[ss.Scope]; len(offs) > 0 {
			b := make([]byte, 0, 12*len(offs)+3)
			b = append(b, '[')
			for k, o := range offs {
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, o, 10)
			}
			b = append(b, ']', '\n')
			sl.Revisions = &ckBlock{At: at, End: at + int64(len(b)), N: len(offs), CRC: crc32.Checksum(b, ckCRC)}
			blocks = append(blocks, b)
			at += int64(len(b))
			end.End.Revisions += len(offs)
		}
		if err := put(appendScopeLine(nil, &sl), true); err != nil {
			return err
		}
	}
	end.End.Scopes, end.End.CRC = len(states), crc
	line, err = json.Marshal(&end)
	if err != nil {
		return err
	}
	if err := put(append(line, '\n'), false); err != nil {
		return err
	}
	for _, b := range blocks {
		if err := put(b, false); err != nil {
			return err
		}
	}
	return nil
}
