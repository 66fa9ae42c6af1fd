package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// Limits of the gRPC server, each a default of GRPCOptions (and a flag of
// `varplane serve`).
const (
	// DefaultMaxStreams is the most concurrent streams of one connection
	// (SETTINGS_MAX_CONCURRENT_STREAMS; a client past it waits or is
	// refused). A Watch stream carries any number of watches.
	DefaultMaxStreams = 250
	// DefaultKeepaliveMinTime is the shortest interval between a client's
	// pings the server tolerates; a client that pings more often gets
	// GOAWAY too_many_pings and loses the connection.
	DefaultKeepaliveMinTime = 10 * time.Second
	// DefaultKeepaliveTime is how long a connection may be silent before the
	// server pings it; DefaultKeepaliveTimeout how long the answer may take
	// before the connection is closed (a dead peer is found this way).
	DefaultKeepaliveTime    = 2 * time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	// DefaultRequestTimeout bounds the wait for a Subscribe request message
	// (or a Watch stream's first request): a stream opened and left silent
	// is ended with DeadlineExceeded instead of holding its slot.
	DefaultRequestTimeout = wire.ServerReadTimeout
	// streamWindow is the receive window of each stream and of each
	// connection: what the server buffers of a peer's unread data. A
	// request is at most MaxRequestBytes, so it always fits; fixing the
	// windows also turns off grpc-go's window growth (BDP estimation),
	// which would otherwise let an unauthenticated peer make the server
	// buffer megabytes per stream.
	streamWindow = MaxRequestBytes + 1<<10
	connWindow   = 1 << 20
)

// GRPCOptions tune NewGRPCServer; the zero value selects the defaults.
type GRPCOptions struct {
	// MaxStreams is the most concurrent streams per connection; default
	// DefaultMaxStreams.
	MaxStreams uint32
	// MaxConnectionAge, when positive, ends a connection (GOAWAY, then its
	// streams get MaxConnectionAge/10 to finish) once it is that old, so
	// that clients spread over restarted or added servers. Default off:
	// push streams are meant to be long.
	MaxConnectionAge time.Duration
	// KeepaliveMinTime, KeepaliveTime and KeepaliveTimeout: see the
	// defaults of the same names.
	KeepaliveMinTime, KeepaliveTime, KeepaliveTimeout time.Duration
	// Heartbeat is the interval of empty batches (Subscribe) and progress
	// responses (Watch) on an idle stream; default DefaultHeartbeat.
	Heartbeat time.Duration
	// RequestTimeout bounds the wait for a stream's request; default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Hosts, when set, is the listener's Host policy applied to each
	// stream's :authority (a refused one is PermissionDenied, code
	// forbidden), as the HTTP side applies it to Host.
	Hosts *wire.HostPolicy
	// MaxWatches is the most watches of one Watch stream; default
	// DefaultMaxWatches.
	MaxWatches int
	// Logger receives stream errors; slog.Default when nil.
	Logger *slog.Logger
}

// GRPCStats are the gRPC server's counters (exported as metrics by serve).
type GRPCStats struct {
	Streams         int64  // Subscribe and Watch streams open now
	Watches         int64  // watches open now, over every Watch stream
	RefusedHost     uint64 // streams refused for their :authority
	RequestTimeouts uint64 // streams ended waiting for their request
}

// GRPCServer serves PushService with grpc-go (google.golang.org/grpc) on
// any listener of HTTP/2 connections with prior knowledge (h2c) or of TLS
// connections: Subscribe and Watch, with every commit encoded once for all
// its streams (see codec.go). Its methods are safe for concurrent use.
type GRPCServer struct {
	srv   *grpc.Server
	svc   *grpcService
	close sync.Once
}

// NewGRPCServer returns a server of hub's streams, authorizing through
// authorize (nil allows every request).
func NewGRPCServer(hub *push.Hub, authorize Authorizer, opts GRPCOptions) *GRPCServer {
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.KeepaliveMinTime <= 0 {
		opts.KeepaliveMinTime = DefaultKeepaliveMinTime
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
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc := &grpcService{hub: hub, authorize: authorize, opts: opts, ctx: ctx, cancel: cancel}
	// A connection without streams is closed after the wire layer's idle
	// timeout, as an idle HTTP/1.1 connection is.
	kp := keepalive.ServerParameters{Time: opts.KeepaliveTime, Timeout: opts.KeepaliveTimeout, MaxConnectionIdle: wire.ServerIdleTimeout}
	if opts.MaxConnectionAge > 0 {
		kp.MaxConnectionAge = opts.MaxConnectionAge
		kp.MaxConnectionAgeGrace = opts.MaxConnectionAge / 10
	}
	srv := grpc.NewServer(
		grpc.ForceServerCodecV2(grpcCodec{}),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxConcurrentStreams(opts.MaxStreams),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.MaxHeaderListSize(wire.ServerMaxHeaderBytes),
		grpc.ConnectionTimeout(wire.ServerReadHeaderTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: opts.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(kp),
		grpc.ChainStreamInterceptor(svc.intercept),
	)
	svc.hosts.Store(opts.Hosts)
	v1.RegisterPushServiceServer(srv, svc)
	return &GRPCServer{srv: srv, svc: svc}
}

// ServeHTTP2 is Serve holding each stream's :authority to hosts: the
// httpapi.HTTP2Server of a main port whose HTTP/2 connections it serves.
func (g *GRPCServer) ServeHTTP2(ln net.Listener, hosts *wire.HostPolicy) error {
	if hosts != nil {
		g.svc.hosts.Store(hosts)
	}
	return g.Serve(ln)
}

// Serve accepts connections on ln until Close; it returns when ln fails or
// the server is closed (nil then).
func (g *GRPCServer) Serve(ln net.Listener) error {
	err := g.srv.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Close ends every stream with Unavailable ("the server is shutting
// down"), so that clients reconnect elsewhere or later, and stops the
// server, waiting for its connections until ctx ends (then closing them).
func (g *GRPCServer) Close(ctx context.Context) error {
	var err error
	g.close.Do(func() {
		g.svc.cancel()
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
	return GRPCStats{Streams: s.streams.Load(), Watches: s.watches.Load(), RefusedHost: s.refusedHost.Load(), RequestTimeouts: s.requestTimeouts.Load()}
}

type grpcService struct {
	v1.UnimplementedPushServiceServer
	hub       *push.Hub
	authorize Authorizer
	opts      GRPCOptions
	ctx       context.Context // ended by Close
	cancel    context.CancelFunc

	hosts                        atomic.Pointer[wire.HostPolicy]
	streams, watches             atomic.Int64
	refusedHost, requestTimeouts atomic.Uint64
}

// intercept holds every stream to the Host policy, counts it, and bounds
// the wait for its request.
func (s *grpcService) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if hosts := s.hosts.Load(); hosts != nil {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if a := md.Get(":authority"); len(a) != 1 || !hosts.Allows(a[0]) {
			s.refusedHost.Add(1)
			return toGRPC(ss.Context(), &varplane.Error{Code: varplane.CodeForbidden, Message: "this server does not answer for that host name"})
		}
	}
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
	err = pump(ctx, s.ctx, sub, s.opts.Heartbeat, func(b *v1.SnapshotBatch) error { return stream.Send(b) })
	return toGRPC(ctx, err)
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
// subscription: Unavailable with the reason, so that clients reconnect.
func subscriptionEnded(err error) error {
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
