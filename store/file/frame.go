package file

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// Framing (log format 2). Every batch the committer writes ends with a sync
// line, {"synced":N,"crc32c":C}, where N is the byte length of the batch's
// event lines before it and C their CRC-32C. A batch is one write and one
// fdatasync, and its commits are acknowledged only after both, so a batch
// whose sync line is missing or does not match was never acknowledged.
//
// The log needs this because it grows into preallocated space (fallocate):
// overwriting allocated blocks spares each fdatasync the journal commit of
// a growing file (on ext4 about 150 against 240 µs here), but a crash
// during a write into such space can leave any subset of the batch's
// sectors written and the rest reading as zeros, a hole in the middle of
// whole lines. The newline rule of format 1 (see Open) cannot tell that
// from damage; the sync line can.
//
// A log in format 2 has, after its checkpoint (if any), a frame start: a
// sync line with N = 0, written once by Open on a log whose tail has none
// (a new log, or a format-1 log, whose lines before the frame start keep
// the format-1 rules) and by Compact at the start of the new log's tail.
// From the frame start on, every line belongs to a batch closed by a sync
// line. Where the first batch that does not check starts, Open either cuts
// (the batch is torn: see classifyTail) or stops, naming the line.

// syncPrefix begins a sync line; no event line begins with it (events begin
// with {"kind":).
const syncPrefix = `{"synced":`

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FrameStart is the line that begins the framed tail of a log (format 2):
// the sync line of an empty batch.
const FrameStart = syncPrefix + `0,"crc32c":0}` + "\n"

var frameStart = []byte(FrameStart)

// CloseBatch appends to b, whose bytes from start on are whole event lines
// (each the JSON of a varplane.Event and a newline), the sync line that
// makes them one batch of log format 2, and returns the extended slice. The
// committer closes every batch with it; a tool that writes a log for Open
// to read (a benchmark's, say) writes FrameStart, then batches closed by it.
func CloseBatch(b []byte, start int) []byte {
	return appendSyncLine(b, len(b)-start, crc32.Checksum(b[start:], castagnoli))
}

// appendSyncLine appends the sync line of a batch of n bytes with
// checksum crc, newline included.
func appendSyncLine(b []byte, n int, crc uint32) []byte {
	b = append(b, syncPrefix...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"crc32c":`...)
	b = strconv.AppendUint(b, uint64(crc), 10)
	return append(b, "}\n"...)
}

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

// tailVerdict is what classifyTail makes of the bytes after the last batch
// that checks.
type tailVerdict struct {
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
func classifyTail(f io.ReaderAt, p, size int64) (tailVerdict, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, p, size-p), 1<<16)
	var (
		off, lineStart = p, p
		last           = p  // just past the last non-zero byte
		pendingZero    bool // a zero byte after the last non-zero byte
		hole           bool // a zero byte before a non-zero byte
		dirty          bool // the current line holds a zero byte
		lines          int  // complete lines before lineStart
		bad            tailVerdict
		long           []byte
		scratch        varplane.Event
	)
	bad.at = -1
	for {
		chunk, rerr := r.ReadSlice('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, bufio.ErrBufferFull) {
			return tailVerdict{}, rerr
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
						return tailVerdict{}, err
					}
					if h.Sum32() == crc {
						return tailVerdict{damage: fmt.Sprintf("its batch does not check, and a later one does (the sync line at byte offset %d)", lineStart), at: p}, nil
					}
				}
				if bad.at < 0 {
					bad = tailVerdict{damage: "its batch's sync line does not match it", at: lineStart, line: lines}
				}
			} else if _, _, derr := eventjson.DecodeEventLazy(line[:len(line)-1], &scratch, nil); derr != nil && bad.at < 0 {
				bad = tailVerdict{damage: derr.Error(), at: lineStart, line: lines}
			}
		}
		long, dirty = long[:0], false
		lines++
		lineStart = off
	}
	if !hole && bad.at >= 0 {
		return bad, nil
	}
	return tailVerdict{torn: last - p}, nil
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

// preallocDefault is how far ahead of its end the log allocates space.
const preallocDefault = 16 << 20

// reserve makes room for n more bytes at s.off: when they would pass the
// allocated end, it allocates prealloc bytes more (fallocate, which the
// next fdatasync makes durable with the batch). A filesystem that cannot
// allocate ahead turns preallocation off: the log then grows by appends.
// A full disk only skips this allocation (the write that follows reports
// it when it matters); the next batch tries again.
func (s *Store) reserve(n int) {
	if s.prealloc <= 0 || s.off+int64(n) <= s.size {
		return
	}
	end := s.off + int64(n) + s.prealloc
	switch err := unix.Fallocate(int(s.f.Fd()), 0, s.size, end-s.size); {
	case err == nil:
		s.size = end
	case spaceShort(err):
	default:
		s.log.Warn("file store: cannot allocate log space ahead; growing by appends", "path", s.path, "err", err)
		s.prealloc = 0
	}
}

// trimPrealloc cuts the allocated space after the last line, so that a log
// at rest ends with its last line (for the tools that read it) and a later
// Open finds no zeros to skip.
func (s *Store) trimPrealloc() error {
	if s.size <= s.off {
		return nil
	}
	if err := s.f.Truncate(s.off); err != nil {
		return fmt.Errorf("file store: trim %s: %w", s.path, err)
	}
	s.size = s.off
	return nil
}
