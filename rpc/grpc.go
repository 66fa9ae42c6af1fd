package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// Limits of the gRPC server, each a default of GRPCOptions (and a flag of
// `varplane serve`). The HTTP/2 ones are net/http's (see HTTP2Config): the
// server's HTTP/2 is net/http's, and gRPC requests reach grpc-go through
// its ServeHTTP.
const (
	// DefaultMaxStreams is the most concurrent streams of one HTTP/2
	// connection (SETTINGS_MAX_CONCURRENT_STREAMS). A Watch stream carries
	// any number of watches.
	DefaultMaxStreams = 250
	// DefaultKeepaliveTime is how long a connection may be silent before the
	// server pings it; DefaultKeepaliveTimeout how long the answer may take
	// before the connection is closed (a dead peer is found this way).
	DefaultKeepaliveTime    = 2 * time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	// DefaultRequestTimeout bounds the wait for a Subscribe request message,
	// and how long a Watch stream may hold no watch (before its first
	// create, after its last cancel): a stream opened and left silent, or
	// kept alive with progress requests alone, is ended with
	// DeadlineExceeded instead of holding its slot.
	DefaultRequestTimeout = wire.ServerReadTimeout
	// streamWindow is the receive window of each stream, connWindow of each
	// connection: what the server buffers of a peer's unread data. A
	// request is at most MaxRequestBytes, so it always fits.
	streamWindow = MaxRequestBytes + 1<<10
	connWindow   = 1 << 20
)

// GRPCOptions tune NewGRPCServer; the zero value selects the defaults.
type GRPCOptions struct {
	// MaxStreams is the most concurrent streams per connection; default
	// DefaultMaxStreams.
	MaxStreams uint32
	// KeepaliveTime and KeepaliveTimeout: see the defaults of the same
	// names.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// Heartbeat is the interval of empty batches (Subscribe) and progress
	// responses (Watch) on an idle stream; default DefaultHeartbeat.
	Heartbeat time.Duration
	// RequestTimeout bounds the wait for a stream's request, and the time a
	// Watch stream may hold no watch; default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxWatches is the most watches of one Watch stream; default
	// DefaultMaxWatches.
	MaxWatches int
	// WriteTimeout bounds each message write of a stream: a stream whose
	// peer has stopped reading (HTTP/2 flow control holds the message) is
	// reset after it, freeing its writer and its subscriptions. Default
	// DefaultWriteTimeout; never less than twice Heartbeat, so that an
	// idle stream's heartbeats re-arm it in time.
	WriteTimeout time.Duration
	// Logger receives stream errors; slog.Default when nil.
	Logger *slog.Logger
}

// GRPCStats are the gRPC server's counters (exported as metrics by serve).
type GRPCStats struct {
	Streams         int64  // Subscribe and Watch streams open now
	Watches         int64  // watches open now, over every Watch stream
	RequestTimeouts uint64 // streams ended waiting for their request
	WriteTimeouts   uint64 // streams reset because a message write outlasted WriteTimeout
}

// GRPCServer serves PushService with grpc-go (google.golang.org/grpc)
// behind net/http's HTTP/2 server (h2c or TLS; see Route and HTTP2Config):
// Subscribe and Watch, with every commit encoded once for all its streams
// (see codec.go). Its methods are safe for concurrent use.
type GRPCServer struct {
	srv   *grpc.Server
	svc   *grpcService
	opts  GRPCOptions
	close sync.Once
}

// NewGRPCServer returns a server of hub's streams, authorizing through
// authorize (nil allows every request).
func NewGRPCServer(hub *push.Hub, authorize varplane.Authorizer, opts GRPCOptions) *GRPCServer {
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.KeepaliveTime <= 0 {
		opts.KeepaliveTime = DefaultKeepaliveTime
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = DefaultMaxWatches
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	opts.WriteTimeout = max(opts.WriteTimeout, 2*opts.Heartbeat)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc := &grpcService{hub: hub, authorize: authorize, opts: opts, ctx: ctx, cancel: cancel}
	srv := grpc.NewServer(
		grpc.ForceServerCodecV2(grpcCodec{}),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ChainStreamInterceptor(svc.intercept),
	)
	v1.RegisterPushServiceServer(srv, svc)
	return &GRPCServer{srv: srv, svc: svc, opts: opts}
}

// HTTP2Config is the HTTP/2 configuration of a server that carries g's
// streams: the stream and connection windows (what the server buffers of
// unread request data, at most a request per stream), the concurrent
// streams per connection, and the keepalive pings that find dead peers.
// A connection whose writes make no progress for DefaultWriteTimeout is
// closed, so that a peer that stops reading releases its streams.
func (g *GRPCServer) HTTP2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxConcurrentStreams: int(g.opts.MaxStreams),
		// The smallest frame HTTP/2 allows: requests are small, and a
		// peer's oversized frame is a FRAME_SIZE_ERROR at once.
		MaxReadFrameSize:              16 << 10,
		MaxReceiveBufferPerStream:     streamWindow,
		MaxReceiveBufferPerConnection: connWindow,
		SendPingTimeout:               g.opts.KeepaliveTime,
		PingTimeout:                   g.opts.KeepaliveTimeout,
		WriteByteTimeout:              DefaultWriteTimeout,
	}
}

// IsGRPC reports whether r is a gRPC request (HTTP/2, content-type
// application/grpc or application/grpc+proto; not gRPC-Web, which the
// Connect handler serves).
func IsGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.ProtoMajor == 2 && strings.HasPrefix(ct, "application/grpc") && !strings.HasPrefix(ct, "application/grpc-web")
}

// Route sends gRPC requests (IsGRPC) to g and every other request to next:
// the handler of a port that answers HTTP/1.1, Connect and gRPC.
func (g *GRPCServer) Route(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsGRPC(r) {
			g.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP serves one gRPC request. The stream lifts the server's read
// and write deadlines (HTTP2Config's write timeout and keepalive still
// hold the connection), and its request body is metered: grpc-go's
// handler reads a body ahead into a buffer of its own, so the body is
// capped (Subscribe: one request) or paced (Watch: at most watchAhead
// bytes read and not yet consumed), and HTTP/2 flow control holds the
// rest at the client.
func (g *GRPCServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	// grpc-go runs the stream's handler on a goroutine of its own, which
	// may still arm a deadline after ServeHTTP has returned: the
	// controller passes nothing on once it has.
	sc := &streamController{rc: rc}
	defer func() {
		if sc.end() {
			g.svc.writeTimeouts.Add(1)
		}
	}()
	ctx := context.WithValue(r.Context(), controllerKey{}, sc)
	ctx = context.WithValue(ctx, remoteKey{}, r.RemoteAddr)
	if strings.HasSuffix(r.URL.Path, "/Watch") {
		m := newMeteredBody(r.Body, watchAhead)
		r.Body = m
		ctx = context.WithValue(ctx, meterKey{}, m)
	} else {
		r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
	}
	g.srv.ServeHTTP(w, r.WithContext(ctx))
}

// Close ends every stream with Unavailable ("the server is shutting
// down"), so that clients reconnect elsewhere or later, and stops the
// server, waiting for its connections until ctx ends (then closing them).
func (g *GRPCServer) Close(ctx context.Context) error {
	var err error
	g.close.Do(func() {
		g.svc.cancel()
		// Let the streams write their status before grpc-go closes what is
		// left (GracefulStop cannot drain requests it got from ServeHTTP).
		for g.svc.streams.Load() > 0 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		done := make(chan struct{})
		go func() { g.srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.srv.Stop()
			<-done
			err = fmt.Errorf("rpc: shutdown: %w", ctx.Err())
		}
	})
	return err
}

// Stats returns the server's counters.
func (g *GRPCServer) Stats() GRPCStats {
	s := g.svc
	return GRPCStats{Streams: s.streams.Load(), Watches: s.watches.Load(), RequestTimeouts: s.requestTimeouts.Load(),
		WriteTimeouts: s.writeTimeouts.Load()}
}

type grpcService struct {
	v1.UnimplementedPushServiceServer
	hub       *push.Hub
	authorize varplane.Authorizer
	opts      GRPCOptions
	ctx       context.Context // ended by Close
	cancel    context.CancelFunc

	streams, watches               atomic.Int64
	requestTimeouts, writeTimeouts atomic.Uint64
}

// intercept counts every stream and bounds the wait for its request. (The
// Host policy is the HTTP server's: it has held :authority, which net/http
// gives as Request.Host, before grpc-go sees the stream.)
func (s *grpcService) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s.streams.Add(1)
	defer s.streams.Add(-1)
	return handler(srv, &timedStream{ServerStream: ss, timeout: s.opts.RequestTimeout, svc: s})
}

// timedStream bounds its first RecvMsg: a stream whose request does not
// arrive in time ends with DeadlineExceeded (its handler returns, which
// resets the stream; the pending read ends with it).
type timedStream struct {
	grpc.ServerStream
	timeout time.Duration
	svc     *grpcService
	read    bool
}

func (t *timedStream) RecvMsg(m any) error {
	if t.read {
		return t.ServerStream.RecvMsg(m)
	}
	t.read = true
	done := make(chan error, 1)
	go func() { done <- t.ServerStream.RecvMsg(m) }()
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.svc.requestTimeouts.Add(1)
		return status.Error(codes.DeadlineExceeded, "no request within the request timeout")
	}
}

// Subscribe implements PushService.Subscribe on grpc-go.
func (s *grpcService) Subscribe(req *v1.SubscribeRequest, stream grpc.ServerStreamingServer[v1.SnapshotBatch]) error {
	ctx := stream.Context()
	sub, err := subscribe(ctx, s.hub, s.authorize, req, bearerOf(ctx), push.SubscribeOptions{})
	if err != nil {
		return toGRPC(ctx, err)
	}
	defer sub.Close()
	deadline := s.writeDeadline(ctx)
	err = pump(ctx, s.ctx, sub, s.opts.Heartbeat, func(b *v1.SnapshotBatch) error {
		return deadline.send(func() error { return stream.Send(b) })
	})
	return ended(ctx, toGRPC(ctx, err))
}

// writeDeadline is the per-message write deadline of the stream of ctx
// (GRPCOptions.WriteTimeout), through the http.ResponseController that
// ServeHTTP put in ctx. net/http's HTTP/2 resets a stream whose write
// deadline passes, and the blocked write returns: grpc-go alone has no
// bound on a write that HTTP/2 flow control holds.
func (s *grpcService) writeDeadline(ctx context.Context) *sendDeadline {
	d := &sendDeadline{}
	if sc, _ := ctx.Value(controllerKey{}).(*streamController); sc != nil {
		d.d = wire.NewStreamDeadline(sc, s.opts.WriteTimeout)
	}
	return d
}

// sendDeadline arms a wire.StreamDeadline before each message (nothing
// for a stream served without ServeHTTP); ServeHTTP counts the streams
// that ended past it.
type sendDeadline struct {
	d *wire.StreamDeadline
}

func (d *sendDeadline) send(send func() error) error {
	if d.d != nil {
		d.d.Arm(time.Now())
	}
	return send()
}

// streamController is the http.ResponseController of a gRPC request for
// the stream's handler, which grpc-go runs on a goroutine of its own: once
// ServeHTTP has returned (end) the response is over and deadlines are no
// longer passed on.
type streamController struct {
	mu      sync.Mutex
	rc      *http.ResponseController
	done    bool
	write   time.Time // the write deadline set last
	expired bool      // a deadline passed before the next was set
}

// errResponseOver: a deadline set after the response ended.
var errResponseOver = errors.New("rpc: the response is over")

func (c *streamController) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return errResponseOver
	}
	return c.rc.SetReadDeadline(t)
}

func (c *streamController) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return errResponseOver
	}
	if !c.write.IsZero() && !time.Now().Before(c.write) {
		c.expired = true // the stream was reset at it
	}
	c.write = t
	return c.rc.SetWriteDeadline(t)
}

// end marks the response over and reports whether a write deadline had
// passed: net/http's HTTP/2 resets a stream at its write deadline, and a
// live stream's writes keep the deadline ahead, so a stream whose deadline
// passed was reset for it.
func (c *streamController) end() (expired bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	return c.expired || !c.write.IsZero() && !time.Now().Before(c.write)
}

// ended is the status of a stream whose context ended: DeadlineExceeded
// when its grpc-timeout passed (the client's deadline, which it must see
// as such rather than as a clean end), else err.
func ended(ctx context.Context, err error) error {
	if err == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	}
	return err
}

// bearerOf returns the bearer token of a stream's authorization metadata.
func bearerOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		return wire.Bearer(v[0])
	}
	return ""
}

// errShutdown ends streams when their server closes.
var errShutdown = push.ErrHubClosed

// pump sends sub's batches (and a heartbeat, an empty batch, after each
// idle interval) until the stream, the subscription or the server ends. It
// returns nil when the client went away, else why the stream ends.
func pump(ctx, server context.Context, sub *push.Subscription, interval time.Duration, send func(*v1.SnapshotBatch) error) error {
	// One wait for everything (commits, the end of the subscription, the
	// request's end, the heartbeat timer): a delivery costs one channel
	// receive and no timer update; the timer re-checks the idle time.
	stop := context.AfterFunc(ctx, sub.Wake)
	defer stop()
	stopServer := context.AfterFunc(server, sub.Wake)
	defer stopServer()
	var beat atomic.Bool
	heartbeat := time.AfterFunc(interval, func() { beat.Store(true); sub.Wake() })
	defer heartbeat.Stop()
	lastSend := time.Now()
	for range sub.Ready() {
		if ctx.Err() != nil {
			return nil
		}
		if server.Err() != nil {
			return errShutdown
		}
		select {
		case <-sub.Done():
			return subscriptionEnded(sub.Err())
		default:
		}
		if beat.Swap(false) {
			now := time.Now()
			if idle := now.Sub(lastSend); idle < interval {
				heartbeat.Reset(interval - idle)
			} else {
				if err := send(&v1.SnapshotBatch{}); err != nil {
					return nil // the client is gone
				}
				lastSend = now
				heartbeat.Reset(interval)
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
			return err
		}
		if !ok {
			continue
		}
		lastSend = time.Now()
		if err := send(streamBatch(b)); err != nil {
			return nil
		}
	}
	return nil
}

// subscriptionEnded is the error a stream ends with when the hub ended its
// subscription: Unavailable with the reason, so that clients reconnect;
// for a revoked token, the authorizer's denial (PermissionDenied or
// Unauthenticated), so that they do not reconnect with it.
func subscriptionEnded(err error) error {
	if errors.Is(err, push.ErrRevoked) {
		return &varplane.Error{Code: varplane.ErrorCode(err), Message: "the token no longer allows this stream"}
	}
	return &varplane.Error{Code: varplane.CodeStoreUnavailable, Message: "subscription ended: " + push.Reason(err)}
}

// toGRPC converts err to a gRPC status with the varplane code in the
// trailer (CodeHeader); nil stays nil.
func toGRPC(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := varplane.ErrorCode(err)
	_ = grpc.SetTrailer(ctx, metadata.Pairs(strings.ToLower(CodeHeader), string(code)))
	return status.Error(codes.Code(CodeOf(code)), varplane.ErrorMessage(err))
}
