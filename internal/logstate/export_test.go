package logstate

// SetStatusBound sets the bound of b's statuses (MaxBeatStatuses in
// production), so that a test reaches it with a few.
func SetStatusBound(b *Beats, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.maxStatuses = n
}
