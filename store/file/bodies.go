package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
)

// Revision bodies stay on disk. The fold (internal/logstate) holds in memory
// the documents of heads and of revisions committed since Open or the last
// compaction; every other document is read from the log when a route asks
// for it: a revision replayed from the log is a record plus the offset of
// its document in the log line, and a checkpoint's revisions other than the
// heads are in per-scope blocks that are not even decoded until the scope's
// revision index is needed. So Open reads the heads and the tail, whatever
// the number of revisions retention keeps.
//
// A bodyFile reads one log file. A compaction replaces the file: the fold is
// re-pointed at the new one (logstate.State.Rebase) before the old one is
// retired, and a read that raced the swap and finds its source retired gets
// logstate.ErrStaleBody and looks the revision up again (logstate does it).
// The old file is never read after it is retired, and its descriptor is
// closed then, so its disk space is freed once the compaction is over.

// bodyFile is a logstate.BodySource over one log file, opened read-only.
type bodyFile struct {
	path    string
	mu      sync.RWMutex // readers against retire
	f       *os.File
	retired bool
}

func openBodies(path string) (*bodyFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s for reading: %w", path, err)
	}
	return &bodyFile{path: path, f: f}, nil
}

// ReadBody returns n bytes at off, or logstate.ErrStaleBody once retired.
func (b *bodyFile) ReadBody(off int64, n int) ([]byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.retired {
		return nil, logstate.ErrStaleBody
	}
	buf := make([]byte, n)
	if _, err := b.f.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("file store: read %d bytes at byte offset %d of %s: %w", n, off, b.path, err)
	}
	return buf, nil
}

// retire makes every later read answer ErrStaleBody and closes the file,
// after the reads in flight.
func (b *bodyFile) retire() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.retired {
		b.retired = true
		_ = b.f.Close()
	}
}

// blockCRC is the checksum of a checkpoint's revision block: the block is
// decoded long after Open, so a flipped byte inside a document (which the
// JSON grammar would not notice) is caught when it is.
var blockCRC = crc32.MakeTable(crc32.Castagnoli)

// blockLine is a block's place in a checkpoint's scope line.
type blockLine struct {
	At  int64  `json:"at"`
	End int64  `json:"end"`
	N   int    `json:"n"`
	CRC uint32 `json:"crc"`
}

// fileBlock is a logstate.RevisionBlock: one scope's revision-created lines,
// with their documents, at [at, end) of a checkpointed log.
type fileBlock struct {
	src   *bodyFile
	scope varplane.Scope
	blockLine
}

// Load reads and checks the block and returns its records without their
// documents, each with where its document is.
func (b *fileBlock) Load() ([]*varplane.RevisionRecord, []logstate.BodyRef, []varplane.Revision, error) {
	buf, err := b.src.ReadBody(b.At, int(b.End-b.At))
	if err != nil {
		return nil, nil, nil, err
	}
	return b.decode(buf)
}

// goneLine lists, in a block, revisions of the scope retention reclaimed
// (kept there rather than in the scope line, so that Open does not decode
// them: they matter only to tell a reclaimed revision from one never
// created).
type goneLine struct {
	Reclaimed []varplane.Revision `json:"reclaimed"`
}

var goneLinePrefix = []byte(`{"reclaimed":`)

func (b *fileBlock) damaged(off int64, format string, args ...any) error {
	return fmt.Errorf("file store: %s: the checkpoint's revisions of scope %q at byte offset %d are damaged: %s", b.src.path, b.scope, off, fmt.Sprintf(format, args...))
}

func (b *fileBlock) decode(buf []byte) ([]*varplane.RevisionRecord, []logstate.BodyRef, []varplane.Revision, error) {
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
		if bytes.HasPrefix(buf, goneLinePrefix) {
			var l goneLine
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

// BodyStats counts the revision documents a Store holds in memory and those
// it leaves in the log (see Store.Bodies).
type BodyStats = logstate.BodyStats

// Bodies returns how many revision documents the store holds in memory
// (heads, and revisions committed since Open or the last compaction) and
// their bytes, how many loaded revisions it reads from the log on use, and
// how many scopes still have their revisions in a checkpoint block. It
// walks every scope: for metrics and tests.
func (s *Store) Bodies() BodyStats { return s.st.Bodies() }
