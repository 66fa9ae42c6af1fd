package file

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Zeroing ahead. fallocate (reserve) leaves the space it allocates
// unwritten: its blocks read as zeros, but the first write into each one
// converts it to written, a change to the file's extent map that the
// batch's fdatasync must then commit through the filesystem's journal. On
// ext4 here that is about 30 µs of a lone writer's 200 µs fdatasync. So a
// goroutine of the store writes zeros over the allocated space a little
// ahead of the last line, one piece at a time between batches, and starts
// their write-back at once: a batch then overwrites blocks that are already
// written, and its fdatasync flushes data only. (The conversions the zeros
// make reach the journal with the next fdatasync, one per piece, or with
// the filesystem's own periodic commit.)
//
// Correctness does not depend on the zeros: the space after the last line
// reads as zeros whether it was written or not, and Open treats the two
// alike (frame.go). What must hold is that zeros never land on a line, so a
// piece is written under commitMu and never before off.

const (
	zeroPiece = 256 << 10 // bytes of zeros written per step
	zeroAhead = 1 << 20   // how far past the last line the zeros reach
)

// zeros is the source of every piece; it is never written.
var zeros [zeroPiece]byte

// startZeroer starts the zeroer when the log allocates ahead.
func (s *Store) startZeroer() {
	s.zeroPiece, s.zeroAhead = zeroPiece, zeroAhead
	if s.prealloc <= 0 {
		return
	}
	s.zkick = make(chan struct{}, 1)
	s.zquit = make(chan struct{})
	s.zdone = make(chan struct{})
	go s.zeroer()
}

// stopZeroer stops the zeroer and waits for it, so that Close may cut the
// allocated space.
func (s *Store) stopZeroer() {
	if s.zquit != nil {
		close(s.zquit)
		<-s.zdone
	}
}

// kickZeroer wakes the zeroer when a whole piece of allocated space past the
// last line is not yet zeroed. Under commitMu.
func (s *Store) kickZeroer() {
	if s.zkick != nil && s.zeroWanted() {
		select {
		case s.zkick <- struct{}{}:
		default: // already awake
		}
	}
}

// zeroWanted reports whether a whole piece is left to zero between the last
// line and zeroAhead past it, within the allocated space. Under commitMu.
func (s *Store) zeroWanted() bool {
	start := max(s.zeroed, s.off)
	return !s.zeroOff && s.failed.Load() == nil && min(s.off+s.zeroAhead, s.size)-start >= s.zeroPiece
}

// zeroer writes pieces of zeros while kickZeroer finds some wanted, taking
// commitMu for each piece so that batches and maintenance steps run in
// between, until stopZeroer.
func (s *Store) zeroer() {
	defer close(s.zdone)
	for {
		select {
		case <-s.zquit:
			return
		case <-s.zkick:
		}
		for more := true; more; {
			s.commitMu.Lock()
			more = s.zeroStep()
			s.commitMu.Unlock()
			select {
			case <-s.zquit:
				return
			default:
			}
		}
	}
}

// zeroStep writes one piece of zeros from the later of off and the end of
// the zeros written before, and starts its write-back; it reports whether
// another piece is wanted. Under commitMu. A full disk stops this round
// (commits report it when it matters); any other error turns zeroing off
// with a warning, and batches write into allocated space as it is.
func (s *Store) zeroStep() bool {
	if !s.zeroWanted() {
		return false
	}
	start := max(s.zeroed, s.off)
	n := s.zeroPiece
	if _, err := s.f.WriteAt(zeros[:n], start); err != nil {
		if !spaceShort(err) {
			s.log.Warn("file store: cannot write zeros ahead of the log; commits convert allocated space as they write it", "path", s.path, "err", err)
			s.zeroOff = true
		}
		return false
	}
	// Asynchronous: the pages go to the disk now rather than with the next
	// batch's fdatasync. An error here leaves them to that fdatasync.
	_ = unix.SyncFileRange(int(s.f.Fd()), start, n, unix.SYNC_FILE_RANGE_WRITE)
	s.zeroed = start + n
	return s.zeroWanted()
}

// spaceShort reports whether err is a full disk or quota, or an interrupted
// call: a reason to skip one allocation or piece of zeros and try again
// later, not to stop doing it.
func spaceShort(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EINTR)
}
