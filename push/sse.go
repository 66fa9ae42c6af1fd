package push

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// Defaults of SSEOptions.
const (
	DefaultHeartbeat    = 15 * time.Second
	DefaultWriteTimeout = 30 * time.Second
)

// SSEOptions configure the Server-Sent Events handler. The zero value
// selects the defaults.
type SSEOptions struct {
	// Heartbeat is the interval of ": heartbeat" comments that keep idle
	// connections (and proxies) alive. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to the client; a peer that does not
	// read for this long is disconnected (after at most an eighth more, and
	// at most a second more: the deadline is re-armed lazily). Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Authorize, when set, is called with the request and its filter (whose
	// Prefixes each cover a subtree) before anything is streamed; an error
	// answers
	// with the error's *varplane.Error code (return varplane.ErrForbidden to
	// deny; any other error fails closed as 500 internal). When mounted behind
	// httpapi, httpapi authorizes and this stays nil.
	Authorize func(r *http.Request, f Filter) error
	// Logger receives stream errors; slog.Default when nil.
	Logger *slog.Logger
}

// NewSSEHandler returns the handler of GET {base}/watch: a text/event-stream
// of the scopes named by the repeatable query parameters key, group and
// prefix. See docs/push.md for the wire format. Resume state comes from the
// repeatable since=<scope>@<generation> parameter and the Last-Event-ID
// header (an event id is <scope>@<generation>).
//
// Before streaming it answers 400 bad-request for a bad filter or resume
// parameter, 503 too-many-subscribers when the hub is full, 503 for a store
// that cannot be read, all with the JSON error body {"code","error"}.
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
		if v == "" {
			continue
		}
		i := strings.LastIndexByte(v, '@')
		if i <= 0 {
			return nil, varplane.Errorf(varplane.CodeBadRequest, "resume position must be <scope>@<generation>")
		}
		sc, err := varplane.ParseScope(v[:i])
		if err != nil {
			return nil, err
		}
		g, err := strconv.ParseUint(v[i+1:], 10, 64)
		if err != nil {
			return nil, varplane.Errorf(varplane.CodeBadRequest, "resume position of scope %q has no valid generation", sc)
		}
		if cur, ok := held[sc]; !ok || varplane.Generation(g) > cur {
			held[sc] = varplane.Generation(g)
		}
	}
	return held, nil
}

// EventID returns the SSE event id of a scope's state: <scope>@<generation>.
func EventID(scope varplane.Scope, gen varplane.Generation) string {
	return string(scope) + "@" + strconv.FormatUint(uint64(gen), 10)
}

func filterFromQuery(r *http.Request) (Filter, error) {
	q := r.URL.Query()
	conv := func(name string) ([]varplane.Scope, error) {
		vals := q[name]
		out := make([]varplane.Scope, 0, len(vals))
		for _, v := range vals {
			sc, err := varplane.ParseScope(v)
			if err != nil {
				return nil, varplane.Errorf(varplane.CodeBadRequest, "%s: %s", name, varplane.ErrorMessage(err))
			}
			out = append(out, sc)
		}
		return out, nil
	}
	var f Filter
	var err error
	if f.Keys, err = conv("key"); err != nil {
		return f, err
	}
	if f.Groups, err = conv("group"); err != nil {
		return f, err
	}
	if f.Prefixes, err = conv("prefix"); err != nil {
		return f, err
	}
	return f, f.Validate()
}

func (h *sseHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, varplane.Errorf(varplane.CodeBadRequest, "method %s is not allowed", r.Method), http.StatusMethodNotAllowed)
		return
	}
	f, err := filterFromQuery(r)
	if err != nil {
		writeError(w, err, 0)
		return
	}
	since := r.URL.Query()["since"]
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		since = append(since, id)
	}
	held, err := ParseHeld(since)
	if err != nil {
		writeError(w, err, 0)
		return
	}
	if h.opts.Authorize != nil {
		if err := h.opts.Authorize(r, f); err != nil {
			writeError(w, err, 0)
			return
		}
	}
	ctx := r.Context()
	sub, err := h.hub.Subscribe(ctx, f, held)
	if err != nil {
		writeError(w, err, 0)
		return
	}
	defer sub.Close()

	rc := http.NewResponseController(w)
	// A server-wide WriteTimeout would cut every stream; each write gets its
	// own deadline instead.
	_ = rc.SetWriteDeadline(time.Time{})
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// Re-arming a deadline costs a runtime timer update per event, so it is
	// armed with some slack and re-armed only once less than WriteTimeout
	// is left: every write still gets at least WriteTimeout, at most
	// WriteTimeout plus the slack.
	slack := min(h.opts.WriteTimeout/8, time.Second)
	var deadline time.Time
	write := func(b []byte, now time.Time) bool {
		if len(b) > 0 {
			if deadline.Sub(now) < h.opts.WriteTimeout {
				deadline = now.Add(h.opts.WriteTimeout + slack)
				_ = rc.SetWriteDeadline(deadline)
			}
			if _, err := w.Write(b); err != nil {
				return false
			}
		}
		// The deadline stays armed until the next write re-arms it: an
		// expired deadline with no write pending is harmless.
		return rc.Flush() == nil
	}
	// retry: tells EventSource how long to wait before reconnecting.
	lastWrite := time.Now()
	if !write([]byte("retry: 1000\n\n"), lastWrite) {
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
			reason, _ := json.Marshal(map[string]string{"reason": Reason(sub.Err())})
			write(append(append([]byte("event: close\ndata: "), reason...), '\n', '\n'), time.Now())
			return
		default:
		}
		if beat.Swap(false) {
			now := time.Now()
			if idle := now.Sub(lastWrite); idle < h.opts.Heartbeat {
				heartbeat.Reset(h.opts.Heartbeat - idle)
			} else {
				if !write([]byte(": heartbeat\n\n"), now) {
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

// sseFrame returns the event for u, computed once per commit and shared.
func (u *Update) sseFrame() []byte {
	return u.Shared(SlotSSE, func(u *Update) any { return buildSSEFrame(u) }).([]byte)
}

func buildSSEFrame(u *Update) []byte {
	id := EventID(u.Scope, u.Generation)
	scope, _ := json.Marshal(string(u.Scope))
	var b []byte
	if u.Head == nil {
		b = make([]byte, 0, 2*len(id)+64)
		b = append(b, "event: no-head\nid: "...)
		b = append(b, id...)
		b = append(b, "\ndata: {\"scope\":"...)
		b = append(b, scope...)
		b = append(b, `,"generation":`...)
		b = strconv.AppendUint(b, uint64(u.Generation), 10)
		return append(b, "}\n\n"...)
	}
	body := u.Head.ReadBody()
	b = make([]byte, 0, len(body)+len(id)+len(scope)+40)
	b = append(b, "event: head\nid: "...)
	b = append(b, id...)
	b = append(b, "\ndata: {\"scope\":"...)
	b = append(b, scope...)
	if len(body) > 2 { // body is a JSON object: splice "scope" in as its first member
		b = append(b, ',')
		b = append(b, body[1:]...)
	} else {
		b = append(b, '}')
	}
	return append(b, '\n', '\n')
}

// StatusOf maps an error code to the HTTP status the push transports answer
// with before a stream starts.
func StatusOf(code varplane.Code) int {
	switch code {
	case varplane.CodeBadRequest:
		return http.StatusBadRequest
	case varplane.CodeForbidden:
		return http.StatusForbidden
	case varplane.CodeUnauthorized:
		return http.StatusUnauthorized
	case varplane.CodeTooManyRequests, varplane.CodeStoreUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeError(w http.ResponseWriter, err error, status int) {
	code := varplane.ErrorCode(err)
	if errors.Is(err, ErrHubClosed) {
		code = varplane.CodeStoreUnavailable
	}
	if status == 0 {
		status = StatusOf(code)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": string(code), "error": varplane.ErrorMessage(err)})
}
