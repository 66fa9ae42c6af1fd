package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
)

// Defaults of StreamOptions.
const (
	DefaultStreamHeartbeat    = 15 * time.Second
	DefaultStreamWriteTimeout = 30 * time.Second
	DefaultWatchBuffer        = 256
)

// retryMillis is the reconnect delay the watch stream tells EventSource.
const retryMillis = 1000

// Frames every watch stream sends the same.
var (
	retryFrame     = wire.AppendRetry(nil, retryMillis)
	heartbeatFrame = wire.AppendComment(nil, "heartbeat")
)

// StreamOptions tune the long-lived streams: the watch route and the values
// service's created events. The zero value selects the defaults.
type StreamOptions struct {
	// Heartbeat is the interval of ": heartbeat" comments that keep idle
	// connections (and proxies) alive. Default DefaultStreamHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each write of the watch stream; a peer that does
	// not read for this long is disconnected (after at most an eighth more,
	// and at most a second more: see wire.StreamDeadline). Default
	// DefaultStreamWriteTimeout.
	WriteTimeout time.Duration
	// WatchBuffer is how many created events of the values service a slow
	// watcher may fall behind before its stream is closed (it reconnects
	// and fetches again). Default DefaultWatchBuffer.
	WatchBuffer int
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultStreamHeartbeat
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultStreamWriteTimeout
	}
	if o.WatchBuffer <= 0 {
		o.WatchBuffer = DefaultWatchBuffer
	}
	return o
}

// handleWatch serves GET {base}/watch?key=…&group=…&prefix=… (or all=1): a
// text/event-stream of the named scopes (docs/push.md has the format). It
// parses the targets and authorizes kind read for every one of them (a
// prefix with Subtree set) before anything is streamed; resume positions
// come from the repeatable since=<scope>@<generation> parameter and the
// Last-Event-ID header. It answers 404 without a hub, 400 for a bad filter
// or resume position, the authorizer's 401/403, 503 too-many-subscribers
// at the hub's caps (per token, per address, per connection, in all) and
// 503 store-unavailable when the store cannot be read or the server is
// shutting down. A stream whose token the authorizer later refuses ends
// with a close event whose reason is "revoked".
func (h *Handler) handleWatch(w http.ResponseWriter, r *http.Request) {
	if err := h.watch(w, r); err != nil {
		h.writeError(w, r, err)
	}
}

// watch is handleWatch; an error it returns is answered before the stream
// starts (after that it ends the stream instead).
func (h *Handler) watch(w http.ResponseWriter, r *http.Request) error {
	if h.hub == nil {
		return varplane.Errorf(varplane.CodeNotFound, "the watch stream is not enabled on this server")
	}
	targets, err := wire.Targets(r.URL.RawQuery, true)
	if err != nil {
		return err
	}
	for _, t := range targets {
		if _, err := h.authorize(r, varplane.KindRead, t.Scope, t.Subtree); err != nil {
			return err
		}
	}
	held := map[varplane.Scope]varplane.Generation{}
	err = wire.QueryParams(r.URL.RawQuery, func(name, value string) error {
		if name != "since" {
			return nil
		}
		return push.AddHeld(held, value)
	})
	if err == nil {
		err = push.AddHeld(held, r.Header.Get("Last-Event-ID"))
	}
	if err != nil {
		return err
	}
	ctx := r.Context()
	// The stream is counted under its token, its client's address and its
	// connection, and the hub asks the authorizer again, as above, when
	// the accepted tokens change and periodically: a revoked token's
	// stream ends with a close event ("revoked").
	token := wire.RequestBearer(r)
	recheck := func(ctx context.Context) error {
		for _, t := range targets {
			if _, err := varplane.Authorize(ctx, h.auth, varplane.Access{Kind: varplane.KindRead, Scope: t.Scope, Subtree: t.Subtree, Token: token}); err != nil {
				return err
			}
		}
		return nil
	}
	sub, err := h.hub.SubscribeWith(ctx, push.FilterOf(targets), held, push.SubscribeOptions{
		Owner: push.TokenKey(token), Addr: wire.AddrHost(r.RemoteAddr), Conn: r.RemoteAddr, Recheck: recheck})
	if err != nil {
		return err
	}
	defer sub.Close()

	// A server-wide ReadTimeout or WriteTimeout would cut every stream; each
	// write gets its own deadline instead.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // unsupported writers (tests) have no deadline anyway
	_ = rc.SetWriteDeadline(time.Time{})
	deadline := wire.NewStreamDeadline(rc, h.stream.WriteTimeout)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	write := func(b []byte, now time.Time) bool {
		if len(b) > 0 {
			deadline.Arm(now)
			if _, err := w.Write(b); err != nil {
				return false
			}
		}
		return rc.Flush() == nil
	}
	// retry: tells EventSource how long to wait before reconnecting.
	lastWrite := time.Now()
	if !write(retryFrame, lastWrite) {
		return nil
	}
	// Everything the loop waits for arrives on sub.Ready: commits, the end
	// of the subscription, the request's end and the heartbeat timer. A
	// delivery therefore costs one channel receive and no timer update;
	// the heartbeat timer re-checks how long the stream has been idle.
	stop := context.AfterFunc(ctx, sub.Wake)
	defer stop()
	beatEvery := h.stream.Heartbeat
	var beat atomic.Bool
	heartbeat := time.AfterFunc(beatEvery, func() { beat.Store(true); sub.Wake() })
	defer heartbeat.Stop()
	var buf []byte
	for range sub.Ready() {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-sub.Done():
			write(push.CloseFrame(sub.Err()), time.Now())
			return nil
		default:
		}
		if beat.Swap(false) {
			now := time.Now()
			if idle := now.Sub(lastWrite); idle < beatEvery {
				heartbeat.Reset(beatEvery - idle)
			} else {
				if !write(heartbeatFrame, now) {
					return nil
				}
				lastWrite = now
				heartbeat.Reset(beatEvery)
			}
		}
		b, ok, err := sub.TryNext(ctx)
		if err != nil {
			if errors.Is(err, push.ErrUnsubscribed) || ctx.Err() != nil {
				return nil
			}
			if sub.Err() == nil { // a failed resync read: the client reconnects
				h.log.Warn("sse stream ends", "err", err)
				return nil
			}
			continue // the next turn reports why it ended
		}
		if !ok {
			continue
		}
		buf = buf[:0]
		for i := range b.Updates {
			buf = append(buf, b.Updates[i].SSEFrame()...)
		}
		if len(buf) == 0 {
			continue
		}
		lastWrite = time.Now()
		if !write(buf, lastWrite) {
			return nil
		}
	}
	return nil
}
