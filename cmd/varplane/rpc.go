package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/varplane/varplane/rpc"
)

// registerRPCFlags adds --rpc-addr (an extra gRPC/Connect listener, off
// unless given: the main port serves gRPC too) and the gRPC server's limits.
func registerRPCFlags(fs *flag.FlagSet, addr *string, opts *rpc.GRPCOptions) {
	fs.StringVar(addr, "rpc-addr", "", "address of an extra gRPC/Connect listener (off unless given: --addr serves gRPC too); port 0 picks a free port")
	fs.Func("grpc-max-streams", fmt.Sprintf("most concurrent streams of one HTTP/2 connection (default %d)", rpc.DefaultMaxStreams), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 {
			return fmt.Errorf("want a positive integer, got %q", s)
		}
		opts.MaxStreams = uint32(n)
		return nil
	})
	fs.DurationVar(&opts.KeepaliveTime, "grpc-keepalive-time", rpc.DefaultKeepaliveTime, "ping an HTTP/2 connection silent for this long; one that does not answer within 20s is closed")
	fs.IntVar(&opts.MaxWatches, "grpc-max-watches", rpc.DefaultMaxWatches, "most watches of one Watch stream")
	fs.DurationVar(&opts.WriteTimeout, "grpc-write-timeout", rpc.DefaultWriteTimeout, "reset a gRPC stream whose message write waits this long (a subscriber that stopped reading)")
	fs.DurationVar(&opts.RequestTimeout, "grpc-request-timeout", rpc.DefaultRequestTimeout, "end a gRPC or Connect stream whose request has not arrived after this long, and a Watch stream that has held no watch for this long (progress requests alone do not keep it)")
}
