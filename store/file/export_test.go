package file

// SetSyncFunc replaces the fdatasync of s; tests use it to inject failures
// and to hold a commit between its write and its acknowledgement. Call it
// before the first commit.
func SetSyncFunc(s *Store, f func() error) { s.syncf = f }

// SetZeroAhead sets how many bytes of zeros the zeroer writes at a time
// (at most its buffer) and how far past the last line; tests make both
// small so that the zeroer races the committer.
func SetZeroAhead(s *Store, piece, ahead int64) {
	s.commitMu.Lock()
	s.zeroPiece, s.zeroAhead = min(piece, int64(len(zeros))), ahead
	s.commitMu.Unlock()
}

// ZeroState returns where the last line ends, where the zeros written
// ahead of it end, and the allocated end of the log.
func ZeroState(s *Store) (off, zeroed, size int64) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.off, s.zeroed, s.size
}
