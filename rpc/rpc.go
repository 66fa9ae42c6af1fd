// Package rpc serves varplane.v1.PushService (Subscribe, and Watch, many
// watches on one stream), fed by a push.Hub that follows the same engine as
// the HTTP admin, in two ways: NewGRPCServer is grpc-go's server, for gRPC
// clients over HTTP/2 (h2c, or TLS); NewHandler is a net/http handler
// (connectrpc.com/connect) for Connect, gRPC-Web and gRPC over HTTP/1.1
// clients' servers, mounted on the main port. Server is a listener of its
// own that routes each connection to one or the other.
//
// Concurrency contract: each Subscribe stream consumes its own
// push.Subscription from its own goroutine; a Watch stream consumes all its
// watches' subscriptions from one writer goroutine. A stream whose client
// reads slowly only holds back itself (HTTP/2 flow control is per stream),
// while the hub coalesces, resyncs or drops it without ever delaying a
// commit. Server methods are safe for concurrent use.
package rpc

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
)

// DefaultHeartbeat is how often an idle stream receives an empty batch, so
// that clients and proxies can tell a live stream from a dead one.
const DefaultHeartbeat = 15 * time.Second

// CompressMinBytes is the smallest message the server compresses (when the
// client accepts compression).
const CompressMinBytes = 8 << 10

// MaxRequestBytes bounds a Subscribe request message, decompressed: a
// request names at most push.MaxFilterScopes scopes and their held
// generations, a few KiB in practice. The Connect handler refuses a larger
// message (connect.WithReadMaxBytes, which applies after decompression) and
// stops inflating a compressed one at this size, and bounds the request
// body to it plus framing; the fan-out server bounds its request bodies the
// same and takes no compressed requests.
const MaxRequestBytes = 64 << 10

// maxRequestBody is the body limit of the Connect handler: one message of
// MaxRequestBytes with its envelopes (5-byte prefixes, an end-of-stream
// message).
const maxRequestBody = MaxRequestBytes + 1<<10

// DefaultWriteTimeout bounds each message write of a Connect stream: a peer
// that does not read for this long is disconnected (see
// wire.StreamDeadline), whatever the server's own WriteTimeout.
const DefaultWriteTimeout = 30 * time.Second

// HandlerOptions tune NewHandlerWith. The zero value selects the defaults.
type HandlerOptions struct {
	// Heartbeat is the interval of empty keep-alive batches on an idle
	// stream. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each message write (Subscribe and Watch). Default
	// DefaultWriteTimeout; never less than twice Heartbeat.
	WriteTimeout time.Duration
	// RequestTimeout bounds how long a Watch stream may hold no watch: from
	// its start until its first create, and after its last watch ends (a
	// stream that only asks for progress is ended with DeadlineExceeded).
	// Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives stream errors; slog.Default when nil.
	Logger *slog.Logger
}

// NewHandler returns the path prefix and handler of PushService for
// mounting on an http.ServeMux. Subscribe and Watch ask authorize for kind
// read once per key and group, and once per prefix with Subtree set; nil
// allows every request.
func NewHandler(hub *push.Hub, authorize varplane.Authorizer) (string, http.Handler) {
	return NewHandlerWith(hub, authorize, HandlerOptions{})
}

// NewHandlerWith is NewHandler with options.
//
// The handler bounds what a request costs before anything is authorized: the
// body to MaxRequestBytes plus framing (http.MaxBytesReader), the message to
// MaxRequestBytes after decompression, and inflation itself to that size (a
// gzip bomb is refused after MaxRequestBytes of output, not inflated to its
// end). A stream lifts the server's read and write deadlines once its
// request is read and gives each write HandlerOptions.WriteTimeout instead.
func NewHandlerWith(hub *push.Hub, authorize varplane.Authorizer, opts HandlerOptions) (string, http.Handler) {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	// Over HTTP/2 a write deadline that passes resets the stream even with
	// no write pending: an idle stream's heartbeats must re-arm it first.
	opts.WriteTimeout = max(opts.WriteTimeout, 2*opts.Heartbeat)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Compressing every small batch for every subscriber costs more CPU than
	// the bytes it saves on the links this serves; large documents still
	// compress.
	path, h := varplanev1connect.NewPushServiceHandler(&service{hub: hub, authorize: authorize, opts: opts},
		connect.WithCompressMinBytes(CompressMinBytes), connect.WithCodec(wireCodec{}),
		connect.WithReadMaxBytes(MaxRequestBytes),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGzip{max: MaxRequestBytes} },
			func() connect.Compressor { return gzip.NewWriter(io.Discard) }))
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
		ctx := context.WithValue(r.Context(), controllerKey{}, http.NewResponseController(w))
		ctx = context.WithValue(ctx, remoteKey{}, r.RemoteAddr)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// controllerKey carries the stream's http.ResponseController to Subscribe,
// which connect does not hand the ResponseWriter.
type controllerKey struct{}

// remoteKey carries the request's remote address ("ip:port") to the
// streams, which count their subscriptions under it (the hub's
// per-address and per-connection caps).
type remoteKey struct{}

// remoteOf returns the remote address ServeHTTP or the Connect handler
// put in ctx ("" when served otherwise).
func remoteOf(ctx context.Context) string {
	s, _ := ctx.Value(remoteKey{}).(string)
	return s
}

// errInflateLimit ends the inflation of a request past MaxRequestBytes.
var errInflateLimit = errors.New("the decompressed request is larger than the limit")

// boundedGzip is connect's gzip decompressor with a ceiling: once it has
// produced max+1 bytes (connect reads max+1 to see that a message is too
// large) every read fails, so that connect's attempt to measure the rest
// ends at once instead of inflating a bomb to its end.
type boundedGzip struct {
	gzip.Reader
	max, n int64
}

func (z *boundedGzip) Read(p []byte) (int, error) {
	if z.n > z.max {
		return 0, errInflateLimit
	}
	if rest := z.max + 1 - z.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := z.Reader.Read(p)
	z.n += int64(n)
	return n, err
}

func (z *boundedGzip) Reset(r io.Reader) error {
	z.n = 0
	return z.Reader.Reset(r)
}

type service struct {
	hub       *push.Hub
	authorize varplane.Authorizer
	opts      HandlerOptions
}

var _ varplanev1connect.PushServiceHandler = (*service)(nil)

// Subscribe implements PushService.Subscribe.
func (s *service) Subscribe(ctx context.Context, req *connect.Request[v1.SubscribeRequest], stream *connect.ServerStream[v1.SnapshotBatch]) error {
	sub, err := subscribe(ctx, s.hub, s.authorize, req.Msg, wire.Bearer(req.Header().Get("Authorization")), push.SubscribeOptions{})
	if err != nil {
		return toConnect(err)
	}
	defer sub.Close()
	// The request has been read whole (connect reads the one message and
	// the end of the body before calling Subscribe): the stream now lifts
	// the server's deadlines, which count from the request's start, and
	// gives each write its own.
	var deadline *wire.StreamDeadline
	if rc, ok := ctx.Value(controllerKey{}).(*http.ResponseController); ok {
		deadline = wire.NewStreamDeadline(rc, s.opts.WriteTimeout)
	}
	err = pump(ctx, context.Background(), sub, s.opts.Heartbeat, func(m *v1.SnapshotBatch) error {
		if deadline != nil {
			deadline.Arm(time.Now())
		}
		return stream.Send(m)
	})
	if err != nil {
		if sub.Err() == nil {
			s.opts.Logger.Warn("rpc stream ends", "err", err)
		}
		return toConnect(err)
	}
	return nil
}

// subscribe validates and authorizes a Subscribe request and registers its
// subscription, counted under its token, its client's address and its
// connection, with a recheck of the same authorization that the hub runs
// when the accepted tokens change and periodically; the Connect handler,
// Subscribe and Watch share it.
func subscribe(ctx context.Context, hub *push.Hub, authorize varplane.Authorizer, m *v1.SubscribeRequest, token string, opts push.SubscribeOptions) (*push.Subscription, error) {
	f := push.Filter{Keys: scopes(m.GetKeys()), Groups: scopes(m.GetGroups()), Prefixes: scopes(m.GetPrefixes())}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	held := make(map[varplane.Scope]varplane.Generation, len(m.GetHeldGenerations()))
	for sc, g := range m.GetHeldGenerations() {
		held[varplane.Scope(sc)] = varplane.Generation(g)
	}
	if authorize != nil {
		check := func(ctx context.Context) error {
			exact := append(append([]varplane.Scope(nil), f.Keys...), f.Groups...)
			for _, part := range []struct {
				subtree bool
				scopes  []varplane.Scope
			}{{false, exact}, {true, f.Prefixes}} {
				for _, sc := range part.scopes {
					if _, err := varplane.Authorize(ctx, authorize, varplane.Access{Kind: varplane.KindRead, Scope: sc, Subtree: part.subtree, Token: token}); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := check(ctx); err != nil {
			return nil, err
		}
		opts.Recheck = check
	}
	opts.Owner = push.TokenKey(token)
	if remote := remoteOf(ctx); remote != "" {
		opts.Addr, opts.Conn = wire.AddrHost(remote), remote
	}
	return hub.SubscribeWith(ctx, f, held, opts)
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

// CodeOf maps a varplane error code to the Connect/gRPC code; this is the one
// place that mapping lives, for the Connect handler and grpc-go alike. Every code of the root package has its entry (a test holds it to
// errors.go); unknown codes and internal are Internal. The varplane code
// itself travels next to it in the CodeHeader metadata.
//
// The choices that are not one-to-one: revision-conflict is Aborted (the
// gRPC code of a failed test-and-set, retried after re-reading);
// payload-too-large is ResourceExhausted (what gRPC answers an oversized
// message); limit-exceeded, a document's shape past a limit, is
// InvalidArgument, since only changing the input helps; too-many-subscribers
// stays Unavailable like its HTTP 503, so that clients back off and retry.
func CodeOf(code varplane.Code) connect.Code {
	switch code {
	case varplane.CodeBadRequest, varplane.CodeLimitExceeded, varplane.CodeRevisionInvalid,
		varplane.CodeInvalidConfiguration, varplane.CodeUnsupportedMediaType,
		varplane.CodeTargetingKeyMissing:
		return connect.CodeInvalidArgument
	case varplane.CodeUnauthorized:
		return connect.CodeUnauthenticated
	case varplane.CodeForbidden, varplane.CodeScopeOwned:
		return connect.CodePermissionDenied
	case varplane.CodeNotFound, varplane.CodeNoHead, varplane.CodeUnknownComponent:
		return connect.CodeNotFound
	case varplane.CodeRevisionReclaimed:
		return connect.CodeNotFound
	case varplane.CodeChangeRequired, varplane.CodeChangeState, varplane.CodeCanaryWindowOpen, varplane.CodeConfirmationRequired:
		return connect.CodeFailedPrecondition
	case varplane.CodeRevisionConflict:
		return connect.CodeAborted
	case varplane.CodeIdempotencyReused:
		return connect.CodeAlreadyExists
	case varplane.CodePayloadTooLarge:
		return connect.CodeResourceExhausted
	case varplane.CodeStoreUnsupported, varplane.CodeMethodNotAllowed:
		return connect.CodeUnimplemented
	case varplane.CodeTooManyRequests, varplane.CodeStoreUnavailable,
		varplane.CodeDocumentFailed, varplane.CodeDocumentStale, varplane.CodeNotReady,
		varplane.CodeCheckUnavailable:
		return connect.CodeUnavailable
	case varplane.CodeOutcomeUnknown:
		// gRPC's own word for "may have completed": a client must not read
		// it as Unavailable, which promises that nothing changed.
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}

// CodeHeader is the error metadata key that carries the varplane error code
// ("too-many-subscribers", "forbidden", …) next to the gRPC status.
const CodeHeader = "Varplane-Code"

func toConnect(err error) error {
	code := varplane.ErrorCode(err)
	cerr := connect.NewError(CodeOf(code), errors.New(varplane.ErrorMessage(err)))
	cerr.Meta().Set(CodeHeader, string(code))
	return cerr
}

// Server serves PushService on its own listener (serve --rpc-addr): one
// net/http server for HTTP/1.1 and HTTP/2 (h2c with prior knowledge, how
// gRPC clients connect without TLS), whose gRPC requests go to a
// GRPCServer and every other one to the Connect handler (Connect,
// gRPC-Web), with the wire layer's timeouts and Host policy. The listener
// holds the connection caps and survives EMFILE (see wire.Listener).
type Server struct {
	// Addr is the listen address. Use "127.0.0.1:0" in tests and read URL
	// after Open.
	Addr string
	// GRPC tunes the gRPC server; Listener the connection caps. Set them
	// before Open.
	GRPC     GRPCOptions
	Listener wire.ListenerOptions
	// TLS, when set, serves HTTPS (wire.ServerTLS): HTTP/1.1 and HTTP/2,
	// gRPC included, share the port through ALPN.
	TLS *tls.Config
	// HTTP2Guard, when set, holds the connections to its ping policy and
	// maximum age (see wire.HTTP2Guard). Set it before Open.
	HTTP2Guard *wire.HTTP2Guard

	hub    *push.Hub
	auth   varplane.Authorizer
	mu     sync.Mutex
	ln     *wire.Listener
	srv    *http.Server
	grpc   *GRPCServer
	cancel context.CancelFunc
	done   chan struct{}
}

// NewServer returns a Server for hub on addr; call Open to listen.
func NewServer(addr string, hub *push.Hub, authorize varplane.Authorizer) *Server {
	return &Server{Addr: addr, hub: hub, auth: authorize,
		Listener: wire.ListenerOptions{MaxConns: wire.DefaultMaxConns, MaxConnsPerAddr: wire.DefaultMaxConnsPerAddr}}
}

// Open listens on Addr and serves in the background. It returns the listen
// error, and an error when the server is already open.
func (s *Server) Open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return errors.New("rpc: server already open")
	}
	raw, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("rpc: listen on %s: %w", s.Addr, err)
	}
	ln := wire.NewListener(raw, s.Listener)
	ctx, cancel := context.WithCancel(context.Background())
	g := NewGRPCServer(s.hub, s.auth, s.GRPC)
	log := s.GRPC.Logger
	if log == nil {
		log = slog.Default()
	}
	path, connect := NewHandlerWith(s.hub, s.auth, HandlerOptions{Logger: log, RequestTimeout: s.GRPC.RequestTimeout})
	mux := http.NewServeMux()
	mux.Handle(path, connect)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP2(s.TLS != nil)
	// The wire layer's server limits, as on the main port: a stream lifts
	// the read and write deadlines itself once its request is read.
	s.srv = &http.Server{
		TLSConfig:         s.TLS,
		Handler:           wire.NewHostPolicy(raw.Addr(), nil).Guard(g.Route(mux)),
		Protocols:         &protos,
		HTTP2:             g.HTTP2Config(),
		ReadHeaderTimeout: wire.ServerReadHeaderTimeout,
		ReadTimeout:       wire.ServerReadTimeout,
		WriteTimeout:      wire.ServerWriteTimeout,
		IdleTimeout:       wire.ServerIdleTimeout,
		MaxHeaderBytes:    wire.ServerMaxHeaderBytes,
		// Streams end with the server: Close cancels this context.
		BaseContext: func(net.Listener) context.Context { return ctx },
		// net/http's own lines (a TLS handshake that failed) go through
		// the logger, in its format.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if s.HTTP2Guard != nil {
		if err := s.HTTP2Guard.Install(s.srv); err != nil {
			cancel()
			_ = ln.Close()
			return err
		}
	}
	s.grpc = g
	s.ln, s.cancel, s.done = ln, cancel, make(chan struct{})
	srv, done := s.srv, s.done
	go func() {
		defer close(done)
		if srv.TLSConfig != nil {
			_ = srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
			return
		}
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
	if s.TLS != nil {
		return "https://" + s.ln.Addr().String()
	}
	return "http://" + s.ln.Addr().String()
}

// GRPCServer returns the gRPC server of the open server (for its Stats),
// nil before Open.
func (s *Server) GRPCServer() *GRPCServer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grpc
}

// ListenerStats returns the listener's counters.
func (s *Server) ListenerStats() wire.ListenerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return wire.ListenerStats{}
	}
	return s.ln.Stats()
}

// Close ends every stream (gRPC streams with status UNAVAILABLE, so that
// clients reconnect elsewhere or later) and stops the server, waiting for
// connections to finish until ctx ends. It is safe to call on a server that
// is not open.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv, g, cancel, done := s.srv, s.grpc, s.cancel, s.done
	s.ln, s.srv, s.grpc = nil, nil, nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	// gRPC streams first, so that they end with their status; then the
	// Connect streams (their requests' context).
	gerr := g.Close(ctx)
	cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	<-done
	if err = errors.Join(gerr, err); err != nil {
		return fmt.Errorf("rpc: shutdown: %w", err)
	}
	return nil
}
