package file

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/varplane/varplane/internal/logstate"
)

// Revision bodies stay on disk. The fold (internal/logstate) holds in memory
// the documents of heads and of revisions committed since Open; every other
// document is read from the log when a route asks for it: a revision
// replayed from the log is a record plus the offset of its document in its
// line.
//
// A bodyFile reads one log file. A compaction replaces the file: the fold is
// re-pointed at the new one (logstate.State.Repoint) before the old one is
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

// readLine returns the line of the log that starts at off, newline
// included (at most maxLineBytes long).
func (b *bodyFile) readLine(off int64) ([]byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.retired {
		return nil, logstate.ErrStaleBody
	}
	buf := make([]byte, 2048)
	for n := 0; ; {
		k, err := b.f.ReadAt(buf[n:], off+int64(n))
		if i := bytes.IndexByte(buf[n:n+k], '\n'); i >= 0 {
			return buf[:n+i+1], nil
		}
		n += k
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			return nil, fmt.Errorf("file store: read %s at byte offset %d: %w", b.path, off, err)
		case err != nil, n >= maxLineBytes:
			return nil, fmt.Errorf("file store: %s: no whole line at byte offset %d", b.path, off)
		}
		buf = append(buf, make([]byte, len(buf))...)
	}
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

// BodyStats counts the revision documents a Store holds in memory and those
// it leaves in the log (see Store.Bodies).
type BodyStats = logstate.BodyStats

// Bodies returns how many revision documents the store holds in memory
// (heads, and revisions committed since Open or the last compaction) and
// their bytes, how many loaded revisions it reads from the log on use, and
// how many scopes still have their revisions in a checkpoint block. It
// walks every scope: for metrics and tests.
func (s *Store) Bodies() BodyStats { return s.st.Bodies() }
