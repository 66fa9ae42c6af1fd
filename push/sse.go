package push

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/jsontext"
)

// Defaults of SSEOptions.
const (
	DefaultHeartbeat    = 15 * time.Second
	DefaultWriteTimeout = 30 * time.Second
)

// retryMillis is the reconnect delay the stream tells EventSource.
const retryMillis = 1000

// Frames every stream sends the same.
var (
	retryFrame     = wire.AppendRetry(nil, retryMillis)
	heartbeatFrame = wire.AppendComment(nil, "heartbeat")
)

// SSEOptions configure the Server-Sent Events handler. The zero value
// selects the defaults.
type SSEOptions struct {
	// Heartbeat is the interval of ": heartbeat" comments that keep idle
	// connections (and proxies) alive. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to the client; a peer that does not
	// read for this long is disconnected (after at most an eighth more, and
	// at most a second more: see wire.StreamDeadline). Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Targets, when set, returns the scopes a router in front of the handler
	// has already parsed from the query and authorized (httpapi.WatchTargets
	// when mounted as httpapi's Options.Watch); the handler then neither
	// parses the query's key, group and prefix again nor authorizes them.
	// When it is nil or returns nil, the handler parses them itself with
	// wire.Targets, the rules of every other route.
	Targets func(ctx context.Context) []wire.Target
	// Authorizer, when set, is asked for kind read once per key and group,
	// and once per prefix with Subtree set, through varplane.Authorize (so
	// a failing authorizer fails closed), before anything is streamed; its
	// denial is answered with its code. It applies to targets the handler
	// parsed itself; targets from Targets were authorized by the router.
	// Nil allows every request (behind httpapi, which authorizes).
	Authorizer varplane.Authorizer
	// Logger receives stream errors and failures answered 500 or 503;
	// slog.Default when nil.
	Logger *slog.Logger
}

// NewSSEHandler returns the handler of GET {base}/watch: a text/event-stream
// of the scopes named by the repeatable query parameters key, group and
// prefix. See docs/push.md for the wire format. Resume state comes from the
// repeatable since=<scope>@<generation> parameter and the Last-Event-ID
// header (an event id is <scope>@<generation>).
//
// Before streaming it answers through the wire layer's one error table
// (wire.WriteError): 400 bad-request for a bad filter or resume parameter
// (the errors of wire.Targets, as every route), 401/403 from the
// authorizer, 405 for a method other than GET or HEAD, 503
// too-many-subscribers when the hub or the request's token is at its cap,
// 503 store-unavailable when the store cannot be read or the server is
// shutting down.
func NewSSEHandler(hub *Hub, opts SSEOptions) http.Handler {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &sseHandler{hub: hub, opts: opts}
}

type sseHandler struct {
	hub  *Hub
	opts SSEOptions
}

// ParseHeld parses resume positions of the form <scope>@<generation>. The
// separator is the last '@', since a scope may itself contain '@'.
func ParseHeld(values []string) (map[varplane.Scope]varplane.Generation, error) {
	held := make(map[varplane.Scope]varplane.Generation, len(values))
	for _, v := range values {
		if err := addHeld(held, v); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// addHeld adds one resume position to held, keeping the newest per scope.
func addHeld(held map[varplane.Scope]varplane.Generation, v string) error {
	if v == "" {
		return nil
	}
	i := strings.LastIndexByte(v, '@')
	if i <= 0 {
		return wire.BadRequest("resume position must be <scope>@<generation>")
	}
	sc, err := wire.ScopeField("since", v[:i])
	if err != nil {
		return err
	}
	g, err := wire.GenerationText("since", v[i+1:])
	if err != nil {
		return err
	}
	if cur, ok := held[sc]; !ok || g > cur {
		held[sc] = g
	}
	return nil
}

// EventID returns the SSE event id of a scope's state: <scope>@<generation>.
func EventID(scope varplane.Scope, gen varplane.Generation) string {
	return string(scope) + "@" + strconv.FormatUint(uint64(gen), 10)
}

// filterOf returns the filter of a watch request's targets: keys and groups
// match exactly, Subtree targets are prefixes.
func filterOf(targets []wire.Target) Filter {
	var f Filter
	for _, t := range targets {
		switch {
		case t.Subtree:
			f.Prefixes = append(f.Prefixes, t.Scope)
		case t.Scope.IsGroup():
			f.Groups = append(f.Groups, t.Scope)
		default:
			f.Keys = append(f.Keys, t.Scope)
		}
	}
	return f
}

// request reads a watch request: its targets (from the router, or parsed and
// authorized here), and its resume positions from since and Last-Event-ID.
func (h *sseHandler) request(r *http.Request) (Filter, map[varplane.Scope]varplane.Generation, error) {
	var targets []wire.Target
	if h.opts.Targets != nil {
		targets = h.opts.Targets(r.Context())
	}
	if targets == nil {
		var err error
		if targets, err = wire.Targets(r.URL.RawQuery, true); err != nil {
			return Filter{}, nil, err
		}
		if h.opts.Authorizer != nil {
			token := wire.RequestBearer(r)
			for _, t := range targets {
				if _, err := varplane.Authorize(r.Context(), h.opts.Authorizer, varplane.Access{
					Kind: varplane.KindRead, Scope: t.Scope, Subtree: t.Subtree, Token: token,
				}); err != nil {
					return Filter{}, nil, err
				}
			}
		}
	}
	held := map[varplane.Scope]varplane.Generation{}
	err := wire.QueryParams(r.URL.RawQuery, func(name, value string) error {
		if name != "since" {
			return nil
		}
		return addHeld(held, value)
	})
	if err != nil {
		return Filter{}, nil, err
	}
	if err := addHeld(held, r.Header.Get("Last-Event-ID")); err != nil {
		return Filter{}, nil, err
	}
	return filterOf(targets), held, nil
}

func (h *sseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, varplane.Errorf(varplane.CodeMethodNotAllowed, "method %s is not allowed", r.Method))
		return
	}
	f, held, err := h.request(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx := r.Context()
	sub, err := h.hub.SubscribeWith(ctx, f, held, SubscribeOptions{Owner: TokenKey(wire.RequestBearer(r))})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer sub.Close()

	// A server-wide ReadTimeout or WriteTimeout would cut every stream; each
	// write gets its own deadline instead.
	rc := http.NewResponseController(w)
	deadline := wire.NewStreamDeadline(rc, h.opts.WriteTimeout)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
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
		return
	}
	// Everything the loop waits for arrives on sub.Ready: commits, the end
	// of the subscription, the request's end and the heartbeat timer. A
	// delivery therefore costs one channel receive and no timer update;
	// the heartbeat timer re-checks how long the stream has been idle.
	stop := context.AfterFunc(ctx, sub.Wake)
	defer stop()
	var beat atomic.Bool
	heartbeat := time.AfterFunc(h.opts.Heartbeat, func() { beat.Store(true); sub.Wake() })
	defer heartbeat.Stop()
	var buf []byte
	for range sub.Ready() {
		if ctx.Err() != nil {
			return
		}
		select {
		case <-sub.Done():
			write(closeFrame(sub.Err()), time.Now())
			return
		default:
		}
		if beat.Swap(false) {
			now := time.Now()
			if idle := now.Sub(lastWrite); idle < h.opts.Heartbeat {
				heartbeat.Reset(h.opts.Heartbeat - idle)
			} else {
				if !write(heartbeatFrame, now) {
					return
				}
				lastWrite = now
				heartbeat.Reset(h.opts.Heartbeat)
			}
		}
		b, ok, err := sub.TryNext(ctx)
		if err != nil {
			if errors.Is(err, ErrUnsubscribed) || ctx.Err() != nil {
				return
			}
			if sub.Err() == nil { // a failed resync read: the client reconnects
				h.opts.Logger.Warn("sse stream ends", "err", err)
				return
			}
			continue // the next turn reports why it ended
		}
		if !ok {
			continue
		}
		buf = buf[:0]
		for i := range b.Updates {
			buf = append(buf, b.Updates[i].sseFrame()...)
		}
		if len(buf) == 0 {
			continue
		}
		lastWrite = time.Now()
		if !write(buf, lastWrite) {
			return
		}
	}
}

// fail answers err before the stream starts, through the wire layer.
func (h *sseHandler) fail(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(w, r, h.opts.Logger, err)
}

// closeFrame is the event that ends a stream: {"reason": Reason(err)}.
func closeFrame(err error) []byte {
	data := append([]byte(`{"reason":`), jsontext.AppendString(nil, Reason(err))...)
	return wire.AppendEvent(nil, "close", "", append(data, '}'))
}

// sseFrame returns the event for u, computed once per commit and shared.
func (u *Update) sseFrame() []byte {
	return u.Shared(SlotSSE, func(u *Update) any { return buildSSEFrame(u) }).([]byte)
}

// buildSSEFrame writes the event of u: "head" with the scope spliced into
// the head's read body as its first member, or "no-head" with the scope and
// generation. The data is written in place (one allocation for the frame).
func buildSSEFrame(u *Update) []byte {
	id := EventID(u.Scope, u.Generation)
	var body []byte
	event := "no-head"
	if u.Head != nil {
		body, event = u.Head.ReadBody(), "head"
	}
	// "event: " event "\n" "id: " id "\n" "data: " data "\n\n", data being
	// at most the body, the scope escaped and 40 bytes of ours.
	size := len("event: \nid: \ndata: \n\n") + len(event) + len(id) + len(body) + 2*len(u.Scope) + 40
	return wire.AppendEventWith(make([]byte, 0, size), event, id, func(b []byte) []byte {
		b = append(b, `{"scope":`...)
		b = jsontext.AppendString(b, string(u.Scope))
		switch {
		case u.Head == nil:
			b = append(b, `,"generation":`...)
			b = strconv.AppendUint(b, uint64(u.Generation), 10)
			return append(b, '}')
		case len(body) > 2: // body is a JSON object: splice "scope" in as its first member
			b = append(b, ',')
			return append(b, body[1:]...)
		}
		return append(b, '}')
	})
}
