package wire

import (
	"time"
)

// StreamDeadline is the write deadline of a long-lived response (a Server-
// Sent Events stream, a Connect server stream). A server's ReadTimeout and
// WriteTimeout count from the start of the request and would cut every
// stream; a stream instead gives each write its own deadline, so that a
// peer that stops reading is disconnected after timeout while a live one is
// served for as long as it stays.
//
// Re-arming a deadline costs a runtime timer update per write, so it is
// armed with some slack (an eighth of timeout, at most a second) and
// re-armed only once less than timeout is left: every write gets at least
// timeout and at most timeout plus the slack. A StreamDeadline is used by
// the one goroutine that writes the response.
type StreamDeadline struct {
	rc       DeadlineSetter
	timeout  time.Duration
	slack    time.Duration
	deadline time.Time
}

// DeadlineSetter sets a response's deadlines: an *http.ResponseController,
// or a wrapper that stops passing them on once the response is over (a
// response written from a goroutine other than its handler's).
type DeadlineSetter interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// NewStreamDeadline lifts the server's read and write deadlines of the
// response rc controls and returns the per-write deadline of timeout. Call
// it once the request has been read whole (its body, if any): the read
// deadline is what bounds a slow request.
func NewStreamDeadline(rc DeadlineSetter, timeout time.Duration) *StreamDeadline {
	// Writers that cannot set deadlines (test recorders) have none anyway.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	return &StreamDeadline{rc: rc, timeout: timeout, slack: min(timeout/8, time.Second)}
}

// Arm makes sure the next write, starting at now, has at least timeout to
// finish. The deadline stays armed after the write: an expired deadline
// with no write pending is harmless.
func (d *StreamDeadline) Arm(now time.Time) {
	if d.deadline.Sub(now) < d.timeout {
		d.deadline = now.Add(d.timeout + d.slack)
		_ = d.rc.SetWriteDeadline(d.deadline)
	}
}
