package file

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The write-ahead file (PATH.wal) makes a commit durable without growing
// the log at each fdatasync. Appending to the log and syncing it commits
// the filesystem's journal for the size change at every commit; the WAL is
// created once at a fixed size, written with zeros and synced, so that
// syncing a record written into it overwrites blocks the file already has
// and commits no metadata. A batch is written as one record at the ring's
// position and fdatasync'ed there; only then are its bytes written to the
// log (not synced) and the batch acknowledged. The log stays exactly log
// format 3: its readers never see the WAL.
//
// The ring holds the records of one lap: a lap starts at the ring's start
// once the log is durable up to where the lap's first record goes (the log
// is fdatasync'ed when the ring is full, and after a batch too large for
// the ring, which is written to the log and synced directly). Open reads
// the records of the current lap from the ring's start, while each one
// parses, checks and follows the one before it (next sequence number, its
// log bytes right after the previous ones), and writes back to the log
// every record whose bytes the log does not hold (a crash that lost the
// page cache); then it syncs the log and starts a new epoch (a random
// number in the header that records carry, so that records of an earlier
// epoch are never read again). Close, and a compaction before it renames
// its log into place, do the same.
//
// File layout: a header block of walHeaderSize bytes (walFileMagic, the
// epoch, a CRC32C), then the ring. A record: walRecHdr bytes of header
// (magic, payload length, epoch, sequence number, the log offset the
// payload goes at, CRC32C of the header's first 32 bytes and of the
// payload) and the payload, the batch's exact log bytes.

const (
	walSuffix      = ".wal"
	walHeaderSize  = 4096
	walRecHdr      = 40
	walRecMagic    = 0x52575056 // "VPWR" little-endian
	walSizeDefault = 4 << 20
	walSizeMin     = 64 << 10
	walSizeMax     = 1 << 30
)

var walFileMagic = []byte("varplane write-ahead file 1\n")

// wal is the open write-ahead file. Owned by the committer (commitMu).
type wal struct {
	f     *os.File
	path  string
	size  int64
	epoch uint64
	seq   uint64       // the last record's sequence number in this epoch
	pos   int64        // where the next record goes
	syncf func() error // fdatasync of f (tests replace it)
}

// walRecord is one parsed record of the ring.
type walRecord struct {
	epoch, seq uint64
	logOff     int64
	payload    []byte
}

// parseWALRecord parses the record at the start of b: it returns the
// record and its length in b, or an error when b holds no whole record
// (zeros, a torn write, bytes of something else).
func parseWALRecord(b []byte) (walRecord, int, error) {
	if len(b) < walRecHdr {
		return walRecord{}, 0, errors.New("short record header")
	}
	if binary.LittleEndian.Uint32(b) != walRecMagic {
		return walRecord{}, 0, errors.New("no record magic")
	}
	n := int64(binary.LittleEndian.Uint32(b[4:]))
	if n == 0 || n > int64(len(b)-walRecHdr) {
		return walRecord{}, 0, fmt.Errorf("record length %d out of bounds", n)
	}
	off := binary.LittleEndian.Uint64(b[24:])
	if off > 1<<62 {
		return walRecord{}, 0, fmt.Errorf("record log offset %d out of bounds", off)
	}
	sum := crc32.Update(crc32.Checksum(b[:32], castagnoli), castagnoli, b[walRecHdr:walRecHdr+n])
	if sum != binary.LittleEndian.Uint32(b[32:]) {
		return walRecord{}, 0, errors.New("record checksum mismatch")
	}
	return walRecord{
		epoch:   binary.LittleEndian.Uint64(b[8:]),
		seq:     binary.LittleEndian.Uint64(b[16:]),
		logOff:  int64(off),
		payload: b[walRecHdr : walRecHdr+n],
	}, walRecHdr + int(n), nil
}

// fillWALRecord writes the header of the record rec[walRecHdr:] into
// rec[:walRecHdr].
func fillWALRecord(rec []byte, epoch, seq uint64, logOff int64) {
	binary.LittleEndian.PutUint32(rec, walRecMagic)
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)-walRecHdr))
	binary.LittleEndian.PutUint64(rec[8:], epoch)
	binary.LittleEndian.PutUint64(rec[16:], seq)
	binary.LittleEndian.PutUint64(rec[24:], uint64(logOff))
	binary.LittleEndian.PutUint32(rec[36:], 0)
	sum := crc32.Update(crc32.Checksum(rec[:32], castagnoli), castagnoli, rec[walRecHdr:])
	binary.LittleEndian.PutUint32(rec[32:], sum)
}

// walHeader returns the header block for epoch.
func walHeader(epoch uint64) []byte {
	h := make([]byte, walHeaderSize)
	copy(h, walFileMagic)
	binary.LittleEndian.PutUint64(h[32:], epoch)
	binary.LittleEndian.PutUint32(h[40:], crc32.Checksum(h[:40], castagnoli))
	return h
}

// parseWALHeader returns the epoch of a header block.
func parseWALHeader(h []byte) (uint64, error) {
	if len(h) < 44 || !bytes.Equal(h[:len(walFileMagic)], walFileMagic) {
		return 0, errors.New("not a varplane write-ahead file")
	}
	if crc32.Checksum(h[:40], castagnoli) != binary.LittleEndian.Uint32(h[40:]) {
		return 0, errors.New("header checksum mismatch")
	}
	return binary.LittleEndian.Uint64(h[32:]), nil
}

// scanWAL returns the records of the current lap of ring, the whole file
// whose header holds epoch: from the ring's start, each record that parses,
// carries epoch, and follows the one before it.
func scanWAL(ring []byte, epoch uint64) []walRecord {
	var recs []walRecord
	for pos := walHeaderSize; pos < len(ring); {
		r, n, err := parseWALRecord(ring[pos:])
		if err != nil || r.epoch != epoch {
			break
		}
		if k := len(recs); k > 0 {
			p := recs[k-1]
			if r.seq != p.seq+1 || r.logOff != p.logOff+int64(len(p.payload)) {
				break // a record of an earlier lap
			}
		}
		recs = append(recs, r)
		pos += n
	}
	return recs
}

// recoverWAL writes back into the log f (at logPath) every record of the
// WAL at walPath whose bytes the log does not hold, and returns how many it
// wrote back; clean reports a WAL whose current epoch holds no record, as
// Close and a reset leave it: the log is durable. A WAL that is absent, or
// whose header does not read, holds nothing (its header is written, and
// synced, only while the log is durable) but does not vouch for the log. The log is cut at the first record it does not hold, written,
// and synced. A record that would leave a gap in the log is a defect: the
// log is shorter than anything its WAL was written after.
func recoverWAL(f *os.File, logPath, walPath string) (restored int, clean bool, err error) {
	wf, err := os.Open(walPath)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("file store: open %s: %w", walPath, err)
	}
	defer wf.Close()
	fi, err := wf.Stat()
	if err != nil {
		return 0, false, fmt.Errorf("file store: stat %s: %w", walPath, err)
	}
	if fi.Size() < walHeaderSize+walRecHdr || fi.Size() > walSizeMax {
		return 0, false, nil // never finished being created
	}
	ring := make([]byte, fi.Size())
	if _, err := io.ReadFull(io.NewSectionReader(wf, 0, fi.Size()), ring); err != nil {
		return 0, false, fmt.Errorf("file store: read %s: %w", walPath, err)
	}
	epoch, err := parseWALHeader(ring)
	if err != nil {
		return 0, false, nil
	}
	recs := scanWAL(ring, epoch)
	if len(recs) == 0 {
		return 0, true, nil
	}
	li, err := f.Stat()
	if err != nil {
		return 0, false, fmt.Errorf("file store: stat %s: %w", logPath, err)
	}
	size := li.Size()
	var have []byte
	for _, r := range recs {
		end := r.logOff + int64(len(r.payload))
		if r.logOff > size {
			return 0, false, fmt.Errorf("file store: %s holds a batch for byte offset %d of %s, which ends at %d: the log lost bytes its write-ahead file never held (move %s away to open the log as it is)", walPath, r.logOff, logPath, size, walPath)
		}
		if restored == 0 && end <= size {
			have = append(have[:0], make([]byte, len(r.payload))...)
			if _, err := f.ReadAt(have, r.logOff); err != nil {
				return 0, false, fmt.Errorf("file store: read %s: %w", logPath, err)
			}
			if bytes.Equal(have, r.payload) {
				continue
			}
		}
		if restored == 0 {
			if err := f.Truncate(r.logOff); err != nil {
				return 0, false, fmt.Errorf("file store: cut %s at byte offset %d to restore it from %s: %w", logPath, r.logOff, walPath, err)
			}
		}
		if _, err := f.WriteAt(r.payload, r.logOff); err != nil {
			return 0, false, fmt.Errorf("file store: restore %s from %s: %w", logPath, walPath, err)
		}
		size = end
		restored++
	}
	if restored > 0 {
		if err := f.Sync(); err != nil {
			return 0, false, fmt.Errorf("file store: sync %s after restoring it from %s: %w", logPath, walPath, err)
		}
	}
	return restored, false, nil
}

// openWAL opens the WAL at path for a new epoch, creating it (size bytes,
// written with zeros, synced with its directory) when it is absent or not
// whole. Call it only while the log is durable: it forgets every record.
func openWAL(path string, size int64) (*wal, error) {
	if size <= 0 {
		size = walSizeDefault
	}
	size = max(size, walSizeMin)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s: %w", path, err)
	}
	w := &wal{f: f, path: path}
	fd := int(f.Fd())
	w.syncf = func() error { return unix.Fdatasync(fd) }
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("file store: stat %s: %w", path, err)
	}
	h := make([]byte, walHeaderSize)
	_, herr := f.ReadAt(h, 0)
	if _, perr := parseWALHeader(h); herr != nil || perr != nil || fi.Size() < walSizeMin || fi.Size() > walSizeMax {
		// Written whole before use: a record's fdatasync then overwrites
		// written blocks. Not fallocate'd: an unwritten extent converts on
		// its first write, a journal commit.
		err := f.Truncate(0)
		if err == nil {
			err = writeZeros(f, size)
		}
		if err == nil {
			err = f.Sync()
		}
		if err == nil {
			err = syncDir(filepath.Dir(path))
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("file store: create %s: %w", path, err)
		}
		fi, err = f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("file store: stat %s: %w", path, err)
		}
	}
	w.size = fi.Size()
	if err := w.reset(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return w, nil
}

func writeZeros(f *os.File, size int64) error {
	z := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(z)) {
		n := min(int64(len(z)), size-off)
		if _, err := f.WriteAt(z[:n], off); err != nil {
			return err
		}
	}
	return nil
}

// reset starts a new epoch: no record written before it is read again.
// Call it only while the log is durable.
func (w *wal) reset() error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("file store: new epoch for %s: %w", w.path, err)
	}
	epoch := binary.LittleEndian.Uint64(b[:])
	if _, err := w.f.WriteAt(walHeader(epoch), 0); err != nil {
		return fmt.Errorf("file store: write %s: %w", w.path, err)
	}
	if err := w.sync(); err != nil {
		return fmt.Errorf("file store: fdatasync %s: %w", w.path, err)
	}
	w.epoch, w.seq, w.pos = epoch, 0, walHeaderSize
	return nil
}

func (w *wal) sync() error { return w.syncf() }

// fits reports whether a record of n bytes (header included) fits in the
// ring.
func (w *wal) fits(n int) bool { return int64(n) <= w.size-walHeaderSize }

// append writes rec (walRecHdr bytes of room, then the log bytes that go
// at logOff) as the next record and syncs it. syncLog is called, to make
// the log durable, before a new lap overwrites the ring's start.
func (w *wal) append(rec []byte, logOff int64, syncLog func() error) error {
	if w.pos+int64(len(rec)) > w.size {
		if err := w.newLap(syncLog); err != nil {
			return err
		}
	}
	fillWALRecord(rec, w.epoch, w.seq+1, logOff)
	if _, err := w.f.WriteAt(rec, w.pos); err != nil {
		return fmt.Errorf("file store: write %s: %w", w.path, err)
	}
	w.seq++
	w.pos += int64(len(rec))
	if err := w.sync(); err != nil {
		w.drop(len(rec))
		return fmt.Errorf("file store: fdatasync %s: %w", w.path, err)
	}
	return nil
}

// drop takes back the last record, n bytes, whose commit failed: its
// magic is overwritten so that Open, which stops at it, does not restore a
// batch the store cut from the log (best effort, as the log's cut: what a
// failed fdatasync left on the disk is unknown, and so is the outcome).
func (w *wal) drop(n int) {
	w.seq--
	w.pos -= int64(n)
	var zero [walRecHdr]byte
	_, _ = w.f.WriteAt(zero[:], w.pos)
}

// newLap makes the log durable and moves the next record to the ring's
// start. Sequence numbers go on, so that Open never takes the rest of the
// lap before for the records after the new lap's last one.
func (w *wal) newLap(syncLog func() error) error {
	if err := syncLog(); err != nil {
		return err
	}
	w.pos = walHeaderSize
	return nil
}

func (w *wal) close() error { return w.f.Close() }
