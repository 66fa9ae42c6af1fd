package rpc_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
	"github.com/varplane/varplane/store/memory"
)

type fixture struct {
	engine *varplane.Engine
	hub    *push.Hub
	srv    *rpc.Server
	client varplanev1connect.PushServiceClient
}

func start(t *testing.T, opts push.Options, auth varplane.Authorizer) *fixture {
	t.Helper()
	e, h, srv := rpc.StartTestServer(t, opts, auth, nil)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	return &fixture{engine: e, hub: h, srv: srv, client: varplanev1connect.NewPushServiceClient(hc, srv.URL(), connect.WithGRPC())}
}

func (f *fixture) activate(t *testing.T, scope varplane.Scope, doc string) {
	t.Helper()
	rpc.ActivateForTest(t, f.engine, scope, doc)
}

// first opens a stream and returns its first message or its error.
func (f *fixture) first(t *testing.T, req *v1.SubscribeRequest, token string) (*v1.SnapshotBatch, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	r := connect.NewRequest(req)
	if token != "" {
		r.Header().Set("Authorization", "Bearer "+token)
	}
	stream, err := f.client.Subscribe(ctx, r)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = stream.Close() })
	if stream.Receive() {
		return stream.Msg(), nil
	}
	return nil, stream.Err()
}

func TestSubscribeSnapshotAndCommit(t *testing.T) {
	f := start(t, push.Options{}, nil)
	f.activate(t, "a.x", `{"on":true}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := f.client.Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"a.x", "a.none"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	m := stream.Msg()
	if !m.GetSnapshot() || len(m.GetHeads()) != 1 || len(m.GetNoHead()) != 1 {
		t.Fatalf("snapshot = %v", m)
	}
	h := m.GetHeads()[0]
	if h.GetScope() != "a.x" || h.GetGeneration() != 1 || string(h.GetValues()) != `{"a.x":{"on":true}}` || h.GetEffectiveAt() == nil {
		t.Errorf("head = %v", h)
	}
	if n := m.GetNoHead()[0]; n.GetScope() != "a.none" || n.GetGeneration() != 0 {
		t.Errorf("no_head = %v", n)
	}
	f.activate(t, "a.x", `{"on":false}`)
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	if m := stream.Msg(); m.GetSnapshot() || len(m.GetHeads()) != 1 || m.GetHeads()[0].GetGeneration() != 2 {
		t.Errorf("commit batch = %v", m)
	}
}

func TestSubscribeErrors(t *testing.T) {
	auth := varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
		switch a.Token {
		case "good":
			return varplane.Anonymous, nil
		case "keys-only":
			if a.Subtree {
				return varplane.Identity{}, varplane.ErrForbidden
			}
			return varplane.Anonymous, nil
		case "broken":
			return varplane.Identity{}, errors.New("token service down")
		}
		return varplane.Identity{}, varplane.ErrForbidden
	})
	f := start(t, push.Options{MaxSubscribers: 1}, auth)
	tests := []struct {
		name  string
		req   *v1.SubscribeRequest
		token string
		code  connect.Code
		vcode string
	}{
		{"empty filter", &v1.SubscribeRequest{}, "good", connect.CodeInvalidArgument, "bad-request"},
		{"bad scope", &v1.SubscribeRequest{Keys: []string{"a..b"}}, "good", connect.CodeInvalidArgument, "bad-request"},
		{"denied", &v1.SubscribeRequest{Keys: []string{"a.x"}}, "bad", connect.CodePermissionDenied, "forbidden"},
		{"prefix needs a subtree grant", &v1.SubscribeRequest{Keys: []string{"a.x"}, Prefixes: []string{"a"}}, "keys-only", connect.CodePermissionDenied, "forbidden"},
		{"failing authorizer fails closed", &v1.SubscribeRequest{Keys: []string{"a.x"}}, "broken", connect.CodeInternal, "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.first(t, tt.req, tt.token)
			if got := connect.CodeOf(err); got != tt.code {
				t.Errorf("code = %v (%v), want %v", got, err, tt.code)
			}
			var cerr *connect.Error
			if errors.As(err, &cerr) && cerr.Meta().Get(rpc.CodeHeader) != tt.vcode {
				t.Errorf("%s = %q, want %q", rpc.CodeHeader, cerr.Meta().Get(rpc.CodeHeader), tt.vcode)
			}
		})
	}
	t.Run("too many subscribers", func(t *testing.T) {
		if _, err := f.first(t, &v1.SubscribeRequest{Keys: []string{"a.x"}}, "good"); err != nil {
			t.Fatal(err)
		}
		_, err := f.first(t, &v1.SubscribeRequest{Keys: []string{"a.x"}}, "good")
		var cerr *connect.Error
		if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnavailable || cerr.Meta().Get(rpc.CodeHeader) != "too-many-subscribers" {
			t.Errorf("err = %v, want Unavailable too-many-subscribers", err)
		}
	})
}

func TestServerCloseEndsStreams(t *testing.T) {
	f := start(t, push.Options{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := f.client.Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"a.x"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	if err := f.srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if stream.Receive() {
		t.Errorf("received %v after Close", stream.Msg())
	}
	if f.srv.URL() != "" {
		t.Errorf("URL after Close = %q", f.srv.URL())
	}
}

func TestHeartbeat(t *testing.T) {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	h := push.New(e, push.Options{})
	path, handler := rpc.NewHandlerWith(h, nil, rpc.HandlerOptions{Heartbeat: 10 * time.Millisecond})
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protos}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); h.Close(); e.Close(); _ = st.Close() })

	hc := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	c := varplanev1connect.NewPushServiceClient(hc, "http://"+ln.Addr().String(), connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := c.Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"a.x"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || !stream.Msg().GetSnapshot() {
		t.Fatalf("first message: %v %v", stream.Msg(), stream.Err())
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	if m := stream.Msg(); m.GetSnapshot() || len(m.GetHeads())+len(m.GetNoHead()) != 0 {
		t.Errorf("heartbeat = %v, want an empty batch", m)
	}
}
