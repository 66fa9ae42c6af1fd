package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strconv"

	"github.com/varplane/varplane/rpc"
)

func init() {
	serveExtensions = append(serveExtensions, func() serveExtension { return &rpcExtension{} })
}

// rpcExtension is PushService (Subscribe and Watch) on grpc-go, fed by
// serve's push hub so that every commit made through the HTTP admin reaches
// its subscribers. The main port (--addr) serves it to gRPC clients over
// h2c (connections that open with the HTTP/2 preface), next to the Connect
// handler for Connect, gRPC-Web and HTTP/1.1 clients; --rpc-addr adds a
// listener of its own, off unless given.
type rpcExtension struct {
	addr string
	opts rpc.GRPCOptions
	grpc *rpc.GRPCServer
}

// RegisterFlags adds --rpc-addr and the gRPC server's limits.
func (e *rpcExtension) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.addr, "rpc-addr", "", "address of an extra gRPC/Connect listener (off unless given: --addr serves gRPC too); port 0 picks a free port")
	fs.Func("grpc-max-streams", fmt.Sprintf("most concurrent streams of one HTTP/2 connection (default %d)", rpc.DefaultMaxStreams), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 {
			return fmt.Errorf("want a positive integer, got %q", s)
		}
		e.opts.MaxStreams = uint32(n)
		return nil
	})
	fs.DurationVar(&e.opts.KeepaliveTime, "grpc-keepalive-time", rpc.DefaultKeepaliveTime, "ping an HTTP/2 connection silent for this long; one that does not answer within 20s is closed")
	fs.IntVar(&e.opts.MaxWatches, "grpc-max-watches", rpc.DefaultMaxWatches, "most watches of one Watch stream")
	fs.DurationVar(&e.opts.WriteTimeout, "grpc-write-timeout", rpc.DefaultWriteTimeout, "reset a gRPC stream whose message write waits this long (a subscriber that stopped reading)")
}

// Start builds the gRPC server (serve hands it the main port's HTTP/2
// connections) and, with --rpc-addr, opens its own listener; stop closes
// every stream.
func (e *rpcExtension) Start(_ context.Context, rt *serveRuntime) (func(context.Context) error, error) {
	authorize := rt.Authorizer
	path, h := rpc.NewHandler(rt.Hub, authorize)
	rt.mounts = append(rt.mounts, func(http.Handler) (string, http.Handler) { return path, h })
	opts := e.opts
	opts.Logger = rt.Logger
	e.grpc = rpc.NewGRPCServer(rt.Hub, authorize, opts)
	rt.GRPC = e.grpc
	if e.addr == "" || e.addr == "off" {
		return e.grpc.Close, nil
	}
	srv := rpc.NewServer(e.addr, rt.Hub, authorize)
	srv.GRPC = opts
	srv.TLS, srv.Listener, srv.HTTP2Guard = rt.TLS, rt.Listener, rt.HTTP2Guard
	if err := srv.Open(); err != nil {
		return nil, err
	}
	rt.Logger.Info("gRPC Subscribe listening", "url", srv.URL(), "path", path)
	return func(ctx context.Context) error {
		return errors.Join(srv.Close(ctx), e.grpc.Close(ctx))
	}, nil
}
