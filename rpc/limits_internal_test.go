package rpc

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

// boundedGzip yields at most max+1 bytes and then fails every read, also
// after a Reset returns it to connect's pool and it is reused.
func TestBoundedGzip(t *testing.T) {
	var comp bytes.Buffer
	zw := gzip.NewWriter(&comp)
	_, _ = zw.Write(make([]byte, 8<<20))
	_ = zw.Close()
	z := &boundedGzip{max: 1000}
	for round := range 2 {
		if err := z.Reset(bytes.NewReader(comp.Bytes())); err != nil {
			t.Fatal(err)
		}
		// What connect's Decompress does: read max+1, then measure the rest.
		var dst bytes.Buffer
		n, err := dst.ReadFrom(io.LimitReader(z, z.max+1))
		if err != nil || n != z.max+1 {
			t.Fatalf("round %d: read %d, %v; want %d", round, n, err, z.max+1)
		}
		rest, err := io.Copy(io.Discard, z)
		if rest != 0 || !errors.Is(err, errInflateLimit) {
			t.Fatalf("round %d: inflated %d more bytes (%v); want none and errInflateLimit", round, rest, err)
		}
	}
	// A message within the bound reads whole.
	var small bytes.Buffer
	zw = gzip.NewWriter(&small)
	_, _ = zw.Write([]byte("hello"))
	_ = zw.Close()
	if err := z.Reset(&small); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(z); err != nil || string(b) != "hello" {
		t.Fatalf("small message: %q, %v", b, err)
	}
}

// The RPC listener's HTTP/1.1 server has the wire layer's limits.
func TestServerLimits(t *testing.T) {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	h := push.New(e, push.Options{})
	defer func() { h.Close(); e.Close(); _ = st.Close() }()
	s := NewServer("127.0.0.1:0", h, nil)
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	srv := s.srv
	if srv.ReadHeaderTimeout != wire.ServerReadHeaderTimeout || srv.ReadTimeout != wire.ServerReadTimeout ||
		srv.WriteTimeout != wire.ServerWriteTimeout || srv.IdleTimeout != wire.ServerIdleTimeout ||
		srv.MaxHeaderBytes != wire.ServerMaxHeaderBytes {
		t.Errorf("server limits = %v %v %v %v %d", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if got := s.grpc.svc.opts; got.MaxStreams != DefaultMaxStreams || got.RequestTimeout != DefaultRequestTimeout ||
		got.KeepaliveTime != DefaultKeepaliveTime || got.MaxWatches != DefaultMaxWatches {
		t.Errorf("gRPC limits = %+v, want the defaults", got)
	}
	if h2 := srv.HTTP2; h2 == nil || h2.MaxConcurrentStreams != DefaultMaxStreams || h2.MaxReceiveBufferPerStream != streamWindow ||
		h2.MaxReceiveBufferPerConnection != connWindow || h2.SendPingTimeout != DefaultKeepaliveTime || h2.WriteByteTimeout != DefaultWriteTimeout {
		t.Errorf("HTTP/2 limits = %+v", h2)
	}
	if !srv.Protocols.UnencryptedHTTP2() || !srv.Protocols.HTTP1() {
		t.Errorf("protocols = %v, want HTTP/1.1 and h2c", srv.Protocols)
	}
	if st := s.ListenerStats(); st.Accepted != 0 || s.Listener.MaxConns != wire.DefaultMaxConns || s.Listener.MaxConnsPerAddr != wire.DefaultMaxConnsPerAddr {
		t.Errorf("listener = %+v, caps %+v", st, s.Listener)
	}
}
