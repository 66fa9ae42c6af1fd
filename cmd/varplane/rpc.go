package main

import (
	"context"
	"flag"

	"github.com/varplane/varplane/rpc"
)

func init() {
	serveExtensions = append(serveExtensions, func() serveExtension { return &rpcExtension{} })
}

// rpcExtension is `serve --rpc-addr`: the gRPC Subscribe stream on a
// listener of its own (h2c for gRPC clients, served by rpc's fan-out
// server; HTTP/1.1 for Connect clients), fed by serve's push hub, so that
// every commit made through the HTTP admin reaches its subscribers. The
// Connect handler is also mounted on the main port, for Connect, gRPC and
// gRPC-Web clients that prefer one address.
type rpcExtension struct {
	addr string
}

// RegisterFlags adds --rpc-addr.
func (e *rpcExtension) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.addr, "rpc-addr", rpc.DefaultAddr, `address of the gRPC Subscribe listener (h2c); "off" serves it only on --addr; port 0 picks a free port`)
}

// Start mounts Subscribe on the main mux and, unless --rpc-addr is off,
// opens its own listener; stop closes every stream.
func (e *rpcExtension) Start(_ context.Context, rt *serveRuntime) (func(context.Context) error, error) {
	authorize := rt.Authorizer
	path, h := rpc.NewHandler(rt.Hub, authorize)
	rt.Mux.Handle(path, h)
	if e.addr == "off" || e.addr == "" {
		return nil, nil
	}
	srv := rpc.NewServer(e.addr, rt.Hub, authorize)
	if err := srv.Open(); err != nil {
		return nil, err
	}
	rt.Logger.Info("gRPC Subscribe listening", "url", srv.URL(), "path", path)
	return srv.Close, nil
}
