// Package rpc serves the streaming Subscribe of varplane.v1.PushService over
// Connect, gRPC and gRPC-Web from one net/http handler (connectrpc.com/connect),
// fed by a push.Hub that follows the same engine as the HTTP admin.
//
// Concurrency contract: every stream runs on its own handler goroutine and
// consumes its own push.Subscription; a stream whose client reads slowly only
// blocks itself, while the hub coalesces, resyncs or drops it without ever
// delaying a commit. Server methods are safe for concurrent use.
package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
)

// DefaultAddr is the default listen address of the RPC server (--rpc-addr).
const DefaultAddr = "127.0.0.1:8791"

// DefaultHeartbeat is how often an idle stream receives an empty batch, so
// that clients and proxies can tell a live stream from a dead one.
const DefaultHeartbeat = 15 * time.Second

// CompressMinBytes is the smallest message the server compresses (when the
// client accepts compression).
const CompressMinBytes = 8 << 10

// Authorizer decides whether the bearer token (empty when the request had
// none) may read every one of scopes; subtree is true when the scopes are
// prefixes, so that each one covers itself and all its descendants (the
// same as httpapi.Request.Subtree). Subscribe calls it once for the keys and
// groups (subtree false) and once for the prefixes (subtree true), skipping
// an empty list. It returns nil to allow, varplane.ErrForbidden (or any
// *varplane.Error with code forbidden or unauthorized) to deny; any other
// error fails closed as Internal.
type Authorizer func(ctx context.Context, token string, subtree bool, scopes ...varplane.Scope) error

// HandlerOptions tune NewHandlerWith. The zero value selects the defaults.
type HandlerOptions struct {
	// Heartbeat is the interval of empty keep-alive batches on an idle
	// stream. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// Logger receives stream errors; slog.Default when nil.
	Logger *slog.Logger
}

// NewHandler returns the path prefix and handler of PushService for
// mounting on an http.ServeMux. authorize may be nil (allow all).
func NewHandler(hub *push.Hub, authorize Authorizer) (string, http.Handler) {
	return NewHandlerWith(hub, authorize, HandlerOptions{})
}

// NewHandlerWith is NewHandler with options.
func NewHandlerWith(hub *push.Hub, authorize Authorizer, opts HandlerOptions) (string, http.Handler) {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Compressing every small batch for every subscriber costs more CPU than
	// the bytes it saves on the links this serves; large documents still
	// compress.
	return varplanev1connect.NewPushServiceHandler(&service{hub: hub, authorize: authorize, opts: opts},
		connect.WithCompressMinBytes(CompressMinBytes), connect.WithCodec(wireCodec{}))
}

type service struct {
	hub       *push.Hub
	authorize Authorizer
	opts      HandlerOptions
}

var _ varplanev1connect.PushServiceHandler = (*service)(nil)

// Subscribe implements PushService.Subscribe.
func (s *service) Subscribe(ctx context.Context, req *connect.Request[v1.SubscribeRequest], stream *connect.ServerStream[v1.SnapshotBatch]) error {
	m := req.Msg
	f := push.Filter{Keys: scopes(m.GetKeys()), Groups: scopes(m.GetGroups()), Prefixes: scopes(m.GetPrefixes())}
	if err := f.Validate(); err != nil {
		return toConnect(err)
	}
	held := make(map[varplane.Scope]varplane.Generation, len(m.GetHeldGenerations()))
	for sc, g := range m.GetHeldGenerations() {
		held[varplane.Scope(sc)] = varplane.Generation(g)
	}
	if s.authorize != nil {
		token := bearer(req.Header().Get("Authorization"))
		exact := append(append([]varplane.Scope(nil), f.Keys...), f.Groups...)
		for _, part := range []struct {
			subtree bool
			scopes  []varplane.Scope
		}{{false, exact}, {true, f.Prefixes}} {
			if len(part.scopes) == 0 {
				continue
			}
			if err := s.authorize(ctx, token, part.subtree, part.scopes...); err != nil {
				return toConnect(authError(err))
			}
		}
	}
	sub, err := s.hub.Subscribe(ctx, f, held)
	if err != nil {
		return toConnect(err)
	}
	defer sub.Close()
	// One wait for everything (commits, the end of the subscription, the
	// request's end, the heartbeat timer): a delivery costs one channel
	// receive and no timer update; the timer re-checks the idle time.
	stop := context.AfterFunc(ctx, sub.Wake)
	defer stop()
	var beat atomic.Bool
	heartbeat := time.AfterFunc(s.opts.Heartbeat, func() { beat.Store(true); sub.Wake() })
	defer heartbeat.Stop()
	lastSend := time.Now()
	for range sub.Ready() {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-sub.Done():
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("subscription ended: %s", push.Reason(sub.Err())))
		default:
		}
		if beat.Swap(false) {
			now := time.Now()
			if idle := now.Sub(lastSend); idle < s.opts.Heartbeat {
				heartbeat.Reset(s.opts.Heartbeat - idle)
			} else {
				if err := stream.Send(&v1.SnapshotBatch{}); err != nil {
					return nil // the client is gone
				}
				lastSend = now
				heartbeat.Reset(s.opts.Heartbeat)
			}
		}
		b, ok, err := sub.TryNext(ctx)
		if err != nil {
			if sub.Err() != nil {
				continue // the next turn reports why it ended
			}
			if ctx.Err() != nil {
				return nil
			}
			s.opts.Logger.Warn("rpc stream ends", "err", err)
			return toConnect(err)
		}
		if !ok {
			continue
		}
		if err := stream.Send(streamBatch(b)); err != nil {
			return nil
		}
		lastSend = time.Now()
	}
	return nil
}

// Batch converts a hub batch to its wire form.
func Batch(b push.Batch) *v1.SnapshotBatch {
	out := &v1.SnapshotBatch{Snapshot: b.Snapshot}
	for i := range b.Updates {
		// Converted once per commit and shared by every stream: proto
		// messages are safe to marshal concurrently while nobody mutates them.
		switch m := b.Updates[i].Shared(push.SlotRPC, toProto).(type) {
		case *v1.ScopeHead:
			out.Heads = append(out.Heads, m)
		case *v1.NoHead:
			out.NoHead = append(out.NoHead, m)
		}
	}
	return out
}

func toProto(u *push.Update) any {
	h := u.Head
	if h == nil {
		return &v1.NoHead{Scope: string(u.Scope), Generation: uint64(u.Generation)}
	}
	return &v1.ScopeHead{
		Scope:         string(u.Scope),
		Generation:    uint64(u.Generation),
		Revision:      string(h.Revision),
		SchemaId:      h.SchemaID,
		SchemaVersion: h.SchemaVersion,
		EffectiveAt:   timestamppb.New(h.EffectiveAt),
		Values:        h.Values(),
	}
}

func scopes(in []string) []varplane.Scope {
	out := make([]varplane.Scope, len(in))
	for i, s := range in {
		out[i] = varplane.Scope(s)
	}
	return out
}

func bearer(h string) string {
	const p = "bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):])
	}
	return ""
}

// authError keeps a denial a denial and turns anything else into a
// fail-closed internal error that echoes nothing.
func authError(err error) error {
	switch varplane.ErrorCode(err) {
	case varplane.CodeForbidden, varplane.CodeUnauthorized:
		return err
	}
	return &varplane.Error{Code: varplane.CodeInternal, Message: "internal error", Err: err}
}

// CodeOf maps a varplane error code to the Connect/gRPC code; this is the one
// place that mapping lives.
func CodeOf(code varplane.Code) connect.Code {
	switch code {
	case varplane.CodeBadRequest:
		return connect.CodeInvalidArgument
	case varplane.CodeForbidden:
		return connect.CodePermissionDenied
	case varplane.CodeUnauthorized:
		return connect.CodeUnauthenticated
	case varplane.CodeTooManyRequests, varplane.CodeStoreUnavailable:
		return connect.CodeUnavailable
	case varplane.CodeNotFound, varplane.CodeNoHead:
		return connect.CodeNotFound
	}
	return connect.CodeInternal
}

// CodeHeader is the error metadata key that carries the varplane error code
// ("too-many-subscribers", "forbidden", …) next to the gRPC status.
const CodeHeader = "Varplane-Code"

func toConnect(err error) error {
	code := varplane.ErrorCode(err)
	if errors.Is(err, push.ErrHubClosed) {
		code = varplane.CodeStoreUnavailable
	}
	cerr := connect.NewError(CodeOf(code), errors.New(varplane.ErrorMessage(err)))
	cerr.Meta().Set(CodeHeader, string(code))
	return cerr
}

// Server serves PushService on its own listener with HTTP/1.1 and
// unencrypted HTTP/2 (h2c), which gRPC clients need without TLS.
type Server struct {
	// Addr is the listen address; DefaultAddr when empty. Use
	// "127.0.0.1:0" in tests and read URL after Open.
	Addr string

	handler http.Handler
	mu      sync.Mutex
	ln      net.Listener
	srv     *http.Server
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewServer returns a Server for hub on addr; call Open to listen.
func NewServer(addr string, hub *push.Hub, authorize Authorizer) *Server {
	path, h := NewHandler(hub, authorize)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	return &Server{Addr: addr, handler: mux}
}

// Open listens on Addr and serves in the background. It returns the listen
// error, and an error when the server is already open.
func (s *Server) Open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return errors.New("rpc: server already open")
	}
	addr := s.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rpc: listen on %s: %w", addr, err)
	}
	// Frames of many streams flushed at once leave in one write: see
	// coalescingConn.
	ln = coalescingListener{ln}
	ctx, cancel := context.WithCancel(context.Background())
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{
		Handler:           s.handler,
		Protocols:         &protos,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Streams end with the server: Close cancels this context.
		BaseContext: func(net.Listener) context.Context { return ctx },
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 1000,
			SendPingTimeout:      30 * time.Second,
			PingTimeout:          15 * time.Second,
		},
	}
	s.ln, s.cancel, s.done = ln, cancel, make(chan struct{})
	srv, done := s.srv, s.done
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return nil
}

// URL returns the base URL of the open server ("http://127.0.0.1:8791"),
// or "" before Open.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Close ends every stream and stops the server, waiting for handlers until
// ctx ends. It is safe to call on a server that is not open.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv, cancel, done := s.srv, s.cancel, s.done
	s.ln, s.srv = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	<-done
	if err != nil {
		return fmt.Errorf("rpc: shutdown: %w", err)
	}
	return nil
}
