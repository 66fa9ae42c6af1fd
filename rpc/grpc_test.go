package rpc_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/wiretest"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// dial connects grpc-go to srv over h2c.
func dial(t *testing.T, srv *rpc.Server, opts ...grpc.DialOption) v1.PushServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL(), "http://"), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return v1.NewPushServiceClient(cc)
}

// onlyToken allows the bearer token "ok" to read every scope but "secret.x".
var onlyToken = varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
	if a.Token != "ok" {
		return varplane.Identity{}, &varplane.Error{Code: varplane.CodeUnauthorized}
	}
	if a.Scope == "secret.x" {
		return varplane.Identity{}, varplane.ErrForbidden
	}
	return varplane.Anonymous, nil
})

func recvWatch(t *testing.T, w v1.PushService_WatchClient) *v1.WatchResponse {
	t.Helper()
	for {
		m, err := w.Recv()
		if err != nil {
			t.Fatalf("watch stream: %v", err)
		}
		if !m.GetProgress() {
			return m
		}
	}
}

func TestWatchMultiplexes(t *testing.T) {
	e, _, srv := rpc.StartTestServer(t, push.Options{}, onlyToken, nil)
	rpc.ActivateForTest(t, e, "app.a", `{"a":1}`)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer ok"), 10*time.Second)
	defer cancel()
	w, err := dial(t, srv).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := func(id int64, c *v1.WatchCreateRequest) {
		c.WatchId = id
		if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: c}}); err != nil {
			t.Fatal(err)
		}
	}
	// Watch 7 (chosen) on a key, a server-assigned one on the prefix.
	create(7, &v1.WatchCreateRequest{Keys: []string{"app.a"}})
	if m := recvWatch(t, w); m.GetWatchId() != 7 || !m.GetCreated() {
		t.Fatalf("first response = %v, want created 7", m)
	}
	if m := recvWatch(t, w); m.GetWatchId() != 7 || !m.GetBatch().GetSnapshot() || len(m.GetBatch().GetHeads()) != 1 {
		t.Fatalf("snapshot of 7 = %v", m)
	}
	create(0, &v1.WatchCreateRequest{Prefixes: []string{"app"}, HeldGenerations: map[string]uint64{"app.a": 1}})
	created := recvWatch(t, w)
	auto := created.GetWatchId()
	if !created.GetCreated() || auto <= 0 || auto == 7 {
		t.Fatalf("created = %v, want a fresh id", created)
	}
	// app.a is held at 1: the snapshot has nothing of it.
	if m := recvWatch(t, w); m.GetWatchId() != auto || !m.GetBatch().GetSnapshot() || len(m.GetBatch().GetHeads()) != 0 {
		t.Fatalf("snapshot of %d = %v", auto, m)
	}
	// Refusals cancel the one watch, not the stream.
	for _, tc := range []struct {
		id   int64
		req  *v1.WatchCreateRequest
		code string
	}{
		{7, &v1.WatchCreateRequest{Keys: []string{"app.b"}}, "bad-request"},
		{-1, &v1.WatchCreateRequest{Keys: []string{"app.b"}}, "bad-request"},
		{9, &v1.WatchCreateRequest{Keys: []string{"secret.x"}}, "forbidden"},
		{10, &v1.WatchCreateRequest{}, "bad-request"},
	} {
		create(tc.id, tc.req)
		if m := recvWatch(t, w); m.GetWatchId() != tc.id || !m.GetCanceled() || m.GetCancelCode() != tc.code || m.GetCancelReason() == "" {
			t.Errorf("create %d %v: %v, want canceled %s", tc.id, tc.req, m, tc.code)
		}
	}
	// A commit reaches both watches, each tagged with its id.
	g := rpc.ActivateForTest(t, e, "app.a", `{"a":2}`)
	seen := map[int64]bool{}
	for range 2 {
		m := recvWatch(t, w)
		if h := m.GetBatch().GetHeads(); len(h) != 1 || h[0].GetGeneration() != uint64(g) {
			t.Fatalf("commit = %v", m)
		}
		seen[m.GetWatchId()] = true
	}
	if !seen[7] || !seen[auto] {
		t.Fatalf("commit reached %v, want 7 and %d", seen, auto)
	}
	// Cancel 7: only the prefix watch sees the next commit.
	if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Cancel{Cancel: &v1.WatchCancelRequest{WatchId: 7}}}); err != nil {
		t.Fatal(err)
	}
	if m := recvWatch(t, w); m.GetWatchId() != 7 || !m.GetCanceled() || m.GetCancelCode() != "" {
		t.Fatalf("cancel = %v", m)
	}
	if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Cancel{Cancel: &v1.WatchCancelRequest{WatchId: 7}}}); err != nil {
		t.Fatal(err)
	}
	if m := recvWatch(t, w); m.GetWatchId() != 7 || !m.GetCanceled() || m.GetCancelCode() != "not-found" {
		t.Fatalf("second cancel = %v, want not-found", m)
	}
	g = rpc.ActivateForTest(t, e, "app.b", `{"b":1}`)
	if m := recvWatch(t, w); m.GetWatchId() != auto || m.GetBatch().GetHeads()[0].GetScope() != "app.b" {
		t.Fatalf("after cancel = %v", m)
	}
	// A progress request is answered at once.
	if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Progress{Progress: &v1.WatchProgressRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || !m.GetProgress() || m.GetWatchId() != 0 {
		t.Fatalf("progress = %v, %v", m, err)
	}
	// A request with nothing in it ends the stream.
	if err := w.Send(&v1.WatchRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty request: %v, want InvalidArgument", err)
	}
	_ = g
}

// Progress heartbeats flow on an idle stream; the server's Close ends it
// with Unavailable.
func TestWatchHeartbeatAndShutdown(t *testing.T) {
	_, hub, srv := rpc.StartTestServer(t, push.Options{}, nil, func(s *rpc.Server) { s.GRPC.Heartbeat = 20 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := dial(t, srv).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: &v1.WatchCreateRequest{Keys: []string{"a.b"}}}}); err != nil {
		t.Fatal(err)
	}
	progress := 0
	for progress < 2 {
		m, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetProgress() {
			progress++
		}
	}
	if n := hub.Stats().Subscribers; n != 1 {
		t.Errorf("subscribers = %d, want 1", n)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = w.Recv(); err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("after Close: %v, want Unavailable", err)
	}
	if n := hub.Stats().Subscribers; n != 0 {
		t.Errorf("subscribers after Close = %d, want 0", n)
	}
}

// A stream opened without its request is ended after the request timeout.
func TestRequestTimeout(t *testing.T) {
	_, _, srv := rpc.StartTestServer(t, push.Options{}, nil, func(s *rpc.Server) { s.GRPC.RequestTimeout = 100 * time.Millisecond })
	cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/varplane.v1.PushService/Subscribe")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecvMsg(new(v1.SnapshotBatch)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("silent stream: %v, want DeadlineExceeded", err)
	}
	if n := srv.GRPCServer().Stats().RequestTimeouts; n != 1 {
		t.Errorf("RequestTimeouts = %d, want 1", n)
	}
}

// The listener's Host policy holds :authority too (net/http's Host): a
// refused one is answered 421 before grpc-go sees the stream.
func TestAuthorityOutsideTheHostPolicy(t *testing.T) {
	_, _, srv := rpc.StartTestServer(t, push.Options{}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		authority string
		ok        bool
	}{{"rebound.example:80", false}, {"localhost", true}} {
		s, err := dial(t, srv, grpc.WithAuthority(tc.authority)).Subscribe(ctx, &v1.SubscribeRequest{Keys: []string{"a.b"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv()
		if tc.ok != (err == nil) || !tc.ok && !strings.Contains(err.Error(), "421") {
			t.Errorf("%s: %v", tc.authority, err)
		}
	}
}

// A request larger than MaxRequestBytes is refused from its length prefix.
func TestOversizedRequest(t *testing.T) {
	_, _, srv := rpc.StartTestServer(t, push.Options{}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := dial(t, srv).Subscribe(ctx, &v1.SubscribeRequest{Keys: []string{strings.Repeat("k", rpc.MaxRequestBytes)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized request: %v, want ResourceExhausted", err)
	}
}

// gRPC over TLS shares the port with HTTP/1.1 through ALPN, with mutual
// TLS: grpc-go with the client certificate subscribes; without it, the
// handshake fails.
func TestGRPCOverMutualTLS(t *testing.T) {
	ca := wiretest.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, t.TempDir(), "server")
	cfg, err := wire.ServerTLS(certFile, keyFile, ca.File)
	if err != nil {
		t.Fatal(err)
	}
	_, _, srv := rpc.StartTestServer(t, push.Options{}, nil, func(s *rpc.Server) { s.TLS = cfg })
	if !strings.HasPrefix(srv.URL(), "https://") {
		t.Fatalf("URL = %s", srv.URL())
	}
	clientCert, clientKey := ca.Issue(t, t.TempDir(), "client")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name      string
		cert, key string
		ok        bool
	}{{"with a client certificate", clientCert, clientKey, true}, {"without", "", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ccfg, err := wire.ClientTLS(ca.File, tc.cert, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL(), "https://"), grpc.WithTransportCredentials(credentials.NewTLS(ccfg)))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			s, err := v1.NewPushServiceClient(cc).Subscribe(ctx, &v1.SubscribeRequest{Keys: []string{"a.b"}})
			if err == nil {
				_, err = s.Recv()
			}
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	// HTTP/1.1 on the same port: the Connect handler answers.
	ccfg, _ := wire.ClientTLS(ca.File, clientCert, clientKey)
	ccfg.NextProtos = []string{"http/1.1"}
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: ccfg}}).Post(srv.URL()+"/varplane.v1.PushService/Subscribe", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode == http.StatusNotFound {
		t.Errorf("HTTP/1.1 over TLS: %s %d", resp.Proto, resp.StatusCode)
	}
}
