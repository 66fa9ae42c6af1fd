package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip decompressor the server may use
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/store/memory"
)

// These tests run stock grpc-go, the reference gRPC implementation, against
// varplane's gRPC listener (rpc.Server: grpc-go's server behind the
// connection router, with the codec that sends a commit's shared
// encoding), as a client that only knows the .proto sees it. .ci/run runs
// them.

type interop struct {
	engine *varplane.Engine
	hub    *push.Hub
	srv    *rpc.Server
	cc     *grpc.ClientConn
}

func startInterop(t *testing.T, auth varplane.Authorizer) *interop {
	t.Helper()
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	h := push.New(e, push.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := rpc.NewServer("127.0.0.1:0", h, auth)
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		h.Close()
		e.Close()
		_ = st.Close()
	})
	return &interop{engine: e, hub: h, srv: srv, cc: cc}
}

func (x *interop) activate(t *testing.T, scope varplane.Scope, doc string) varplane.Generation {
	t.Helper()
	ctx := context.Background()
	rev, err := x.engine.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(doc)})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := x.engine.Status(ctx, scope)
	res, err := x.engine.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev.Revision, ExpectedGeneration: st.Generation})
	if err != nil {
		t.Fatal(err)
	}
	return res.Generation
}

// subscribe opens a Subscribe stream with grpc-go's generic stream API.
func (x *interop) subscribe(ctx context.Context, t *testing.T, req *v1.SubscribeRequest, opts ...grpc.CallOption) grpc.ClientStream {
	t.Helper()
	desc := &grpc.StreamDesc{StreamName: "Subscribe", ServerStreams: true}
	s, err := x.cc.NewStream(ctx, desc, "/varplane.v1.PushService/Subscribe", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(req); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return s
}

func recv(s grpc.ClientStream) (*v1.SnapshotBatch, error) {
	m := new(v1.SnapshotBatch)
	return m, s.RecvMsg(m)
}

func TestGRPCGoSnapshotCommitsAndDeactivation(t *testing.T) {
	x := startInterop(t, nil)
	x.activate(t, "app.a", `{"on":true}`)
	big := `{"pad":"` + strings.Repeat("y", 40<<10) + `"}` // compressed when the client accepts gzip
	x.activate(t, "app.b", big)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A compressed request (gzip is registered in this binary) is inflated
	// no further than the request limit: a bomb is ResourceExhausted.
	bomb := &v1.SubscribeRequest{Keys: []string{"app.a"}, Groups: []string{strings.Repeat("g", 1<<20)}}
	if _, err := recv(x.subscribe(ctx, t, bomb, grpc.UseCompressor("gzip"))); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("compressed 1 MiB request: %v, want ResourceExhausted", err)
	}
	// A small compressed request is served, and so are its compressed
	// responses.
	z := x.subscribe(ctx, t, &v1.SubscribeRequest{Prefixes: []string{"app"}}, grpc.UseCompressor("gzip"))
	if m, err := recv(z); err != nil || len(m.GetHeads()) != 2 || len(m.GetHeads()[1].GetValues()) < 40<<10 && len(m.GetHeads()[0].GetValues()) < 40<<10 {
		t.Fatalf("compressed request: %v %v", m, err)
	}

	s := x.subscribe(ctx, t, &v1.SubscribeRequest{Prefixes: []string{"app"}, Keys: []string{"app.none"}})
	snap, err := recv(s)
	if err != nil {
		t.Fatal(err)
	}
	if !snap.GetSnapshot() || len(snap.GetHeads()) != 2 || len(snap.GetNoHead()) != 1 {
		t.Fatalf("snapshot: %d heads, %d no_head, snapshot=%v", len(snap.GetHeads()), len(snap.GetNoHead()), snap.GetSnapshot())
	}
	for i := 0; i < 50; i++ {
		g := x.activate(t, "app.a", `{"n":`+strconv.Itoa(i)+`}`)
		m, err := recv(s)
		if err != nil {
			t.Fatal(err)
		}
		// Commits may coalesce; a batch never goes back.
		if h := m.GetHeads(); len(h) != 1 || h[0].GetScope() != "app.a" || h[0].GetGeneration() > uint64(g) {
			t.Fatalf("commit %d: %v", i, m)
		}
		for h := m.GetHeads()[0].GetGeneration(); h < uint64(g); {
			m, err = recv(s)
			if err != nil {
				t.Fatal(err)
			}
			h = m.GetHeads()[0].GetGeneration()
		}
	}
	// A large commit goes out whole.
	g := x.activate(t, "app.b", `{"pad":"`+strings.Repeat("w", 40<<10)+`"}`)
	if m, err := recv(s); err != nil || len(m.GetHeads()) != 1 || m.GetHeads()[0].GetGeneration() != uint64(g) || len(m.GetHeads()[0].GetValues()) < 40<<10 {
		t.Fatalf("large commit: %v", err)
	}
	ctx2 := context.Background()
	st, _ := x.engine.Status(ctx2, "app")
	if _, err := x.engine.Deactivate(ctx2, varplane.DeactivateRequest{Scope: "app", ExpectedGeneration: st.Generation}); err != nil {
		t.Fatal(err)
	}
	m, err := recv(s)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, n := range m.GetNoHead() {
		got[n.GetScope()] = true
	}
	if !got["app.a"] || !got["app.b"] {
		t.Fatalf("deactivation batch names %v, want app.a and app.b", got)
	}
}

func TestGRPCGoErrorsCarryTheVarplaneCode(t *testing.T) {
	deny := varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
		if a.Token == "ok" {
			return varplane.Anonymous, nil
		}
		return varplane.Identity{}, varplane.ErrForbidden
	})
	x := startInterop(t, deny)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tests := []struct {
		name  string
		token string
		req   *v1.SubscribeRequest
		code  codes.Code
		vcode string
	}{
		{"denied", "", &v1.SubscribeRequest{Keys: []string{"a.x"}}, codes.PermissionDenied, "forbidden"},
		{"empty filter", "ok", &v1.SubscribeRequest{}, codes.InvalidArgument, "bad-request"},
		{"bad scope", "ok", &v1.SubscribeRequest{Keys: []string{"A..b"}}, codes.InvalidArgument, "bad-request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ctx
			if tt.token != "" {
				c = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tt.token)
			}
			var trailer metadata.MD
			s := x.subscribe(c, t, tt.req, grpc.Trailer(&trailer))
			_, err := recv(s)
			if status.Code(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			if got := trailer.Get("varplane-code"); len(got) != 1 || got[0] != tt.vcode {
				t.Errorf("varplane-code = %v, want %s", got, tt.vcode)
			}
		})
	}
	t.Run("allowed", func(t *testing.T) {
		c := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer ok")
		if _, err := recv(x.subscribe(c, t, &v1.SubscribeRequest{Keys: []string{"a.x"}})); err != nil {
			t.Fatal(err)
		}
	})
}

func TestGRPCGoDeadlineAndServerStop(t *testing.T) {
	x := startInterop(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s := x.subscribe(ctx, t, &v1.SubscribeRequest{Keys: []string{"a.x"}})
	if _, err := recv(s); err != nil {
		t.Fatal(err)
	}
	if _, err := recv(s); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("after the deadline: %v, want DeadlineExceeded", err)
	}

	s = x.subscribe(context.Background(), t, &v1.SubscribeRequest{Keys: []string{"a.x"}})
	if _, err := recv(s); err != nil {
		t.Fatal(err)
	}
	go func() { _ = x.srv.Close(context.Background()) }()
	_, err := recv(s)
	if status.Code(err) != codes.Unavailable || errors.Is(err, io.EOF) {
		t.Fatalf("after the server stopped: %v, want Unavailable", err)
	}
}
