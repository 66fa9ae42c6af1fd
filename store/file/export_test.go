package file

import "os"

// SetSyncFunc replaces the fdatasync of s; tests use it to inject failures
// and to hold a commit between its write and its acknowledgement. Call it
// before the first commit.
func SetSyncFunc(s *Store, f func() error) {
	WaitWAL(s)
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

// Abandon stops s as a crash would: the committer and the background work
// end, the files are closed without a sync, the WAL is not reset, and the
// lock is released. What the log holds past its last sync is then the page
// cache's only, which a test may take away to play a machine crash.
func Abandon(s *Store) {
	s.stop()
	s.Shut()
	s.bodies.retire()
	if s.ckf != nil {
		_ = s.ckf.Close()
	}
	_ = s.f.Close()
	if s.wal != nil {
		_ = s.wal.close()
	}
	_ = s.lock.Close() // releases the flock
}

// WALLap returns the log offsets of the records of the WAL's current lap
// beside the log at path, the batches Open would restore if the log lost
// them: every byte of the log before the first is durable.
func WALLap(path string) ([]int64, error) {
	ring, err := os.ReadFile(path + walSuffix)
	if err != nil {
		return nil, err
	}
	epoch, err := parseWALHeader(ring)
	if err != nil {
		return nil, err
	}
	var offs []int64
	for _, r := range scanWAL(ring, epoch) {
		offs = append(offs, r.logOff)
	}
	return offs, nil
}

// WALSeq returns the sequence number of the WAL's last record (how many
// records the epoch has written).
func WALSeq(s *Store) uint64 { return s.wal.seq }

// WALSizeMin is the smallest ring Open makes.
const WALSizeMin = walSizeMin

// WaitWAL waits until the write-ahead file Open creates on a goroutine is
// in place: the commits before it sync the log itself.
func WaitWAL(s *Store) {
	s.commitMu.Lock()
	s.startWALNow()
	s.commitMu.Unlock()
	s.waitWAL()
}
