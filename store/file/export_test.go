package file

// SetSyncFunc replaces the fdatasync of s; tests use it to inject failures
// and to hold a commit between its write and its acknowledgement. Call it
// before the first commit.
func SetSyncFunc(s *Store, f func() error) {
	s.syncf = f
	if s.wal != nil {
		s.wal.syncf = f
	}
}

// SetMaxLineBytes sets the longest line the log holds, and returns the
// previous bound; tests lower it to write a line past it cheaply.
func SetMaxLineBytes(n int) int {
	old := maxLineBytes
	maxLineBytes = n
	return old
}

// CheckpointedAt returns the log offset of the checkpoint Open started
// from, or -1 when it replayed the whole log.
func CheckpointedAt(s *Store) int64 {
	if s.ck.from == nil {
		return -1
	}
	return s.ck.from.hdr.Log
}

// SetDigestChunk sets the size of the log chunks a checkpoint's digest is
// made of, and returns the previous one.
func SetDigestChunk(n int64) int64 {
	old := digestChunk
	digestChunk = n
	return old
}
