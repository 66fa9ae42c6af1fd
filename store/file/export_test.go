package file

// SetSyncFunc replaces the fdatasync of s; tests use it to inject failures
// and to hold a commit between its write and its acknowledgement. Call it
// before the first commit.
func SetSyncFunc(s *Store, f func() error) { s.syncf = f }

// SetMaxLineBytes sets the longest line the log holds, and returns the
// previous bound; tests lower it to write a line past it cheaply.
func SetMaxLineBytes(n int) int {
	old := maxLineBytes
	maxLineBytes = n
	return old
}
