package postgres

import "time"

// The bounds of the store's reconnections to its server (the invalidation
// subscription or LISTEN connection), waited by internal/backoff: full
// jitter, so that the replicas of a server do not come back in step.
const (
	reconnectMin = 50 * time.Millisecond
	reconnectMax = 2 * time.Second
)
