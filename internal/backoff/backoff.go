// Package backoff is the one wait between retries of the project: the Go
// SDK's reconnections, the values consumer's, `varplane watch`'s, and the
// shared stores' resubscriptions (Redis) and relistens (PostgreSQL).
//
// The wait is "full jitter": a uniform draw in (0, d], where d doubles from
// a minimum per attempt up to a maximum. Spreading the whole interval is
// what keeps a fleet of clients, or the replicas of a server, from
// reconnecting in step after an outage.
//
// Concurrency: Duration is safe for concurrent use; a Retry belongs to the
// one loop that uses it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// DefaultMin is the minimum of a Duration or Retry given none.
const DefaultMin = 100 * time.Millisecond

// Duration returns the wait before retry number attempt (0 for the first
// retry after a failure): a uniform draw in (0, d] where d doubles from min
// per attempt up to max (min is DefaultMin when not positive; max is at
// least min).
func Duration(attempt int, min, max time.Duration) time.Duration {
	if min <= 0 {
		min = DefaultMin
	}
	if max < min {
		max = min
	}
	d := min
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return time.Duration(rand.Int64N(int64(d))) + 1
}

// Retry is the state of a reconnect loop: Wait before each new attempt
// after a failure, Reset once the connection is back.
type Retry struct {
	// Min and Max bound the waits (see Duration).
	Min, Max time.Duration
	attempt  int
}

// Wait waits the next backoff and reports true, or reports false as soon
// as ctx ends.
func (r *Retry) Wait(ctx context.Context) bool {
	t := time.NewTimer(Duration(r.attempt, r.Min, r.Max))
	defer t.Stop()
	r.attempt++
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Reset starts the waits again from Min: the next failure follows a
// success, not the failures before it.
func (r *Retry) Reset() { r.attempt = 0 }

// Attempt returns how many waits followed the last Reset.
func (r *Retry) Attempt() int { return r.attempt }
