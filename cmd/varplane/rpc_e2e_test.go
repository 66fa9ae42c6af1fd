package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
)

var rpcListenRE = regexp.MustCompile(`msg="gRPC Subscribe listening" url=(\S+)`)

// TestServeSubscribe drives the gRPC Subscribe stream of the real binary: a
// snapshot on subscribe, then the commit made through the HTTP admin, on the
// --rpc-addr listener (gRPC over h2c) and on the main port (gRPC over h2c,
// and Connect over HTTP/1.1).
func TestServeSubscribe(t *testing.T) {
	s := startServer(t, "--store", "memory:")
	m := rpcListenRE.FindStringSubmatch(s.logs())
	if m == nil {
		t.Fatalf("no gRPC listening line in the logs:\n%s", s.logs())
	}
	created := expect(t, call(t, "POST", s.Base+"/admin/revisions", map[string]any{"scope": "rpc.k", "document": map[string]any{"v": 1}}), http.StatusCreated, "")
	rev := created["revision"].(string)

	clients := map[string]varplanev1connect.PushServiceClient{
		"grpc on --rpc-addr": varplanev1connect.NewPushServiceClient(h2cClient(), m[1], connect.WithGRPC()),
		"grpc on --addr":     varplanev1connect.NewPushServiceClient(h2cClient(), s.URL, connect.WithGRPC()),
		"connect on --addr":  varplanev1connect.NewPushServiceClient(http.DefaultClient, s.URL),
	}
	type sub struct {
		name   string
		stream *connect.ServerStreamForClient[v1.SnapshotBatch]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var subs []sub
	for name, c := range clients {
		stream, err := c.Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"rpc.k"}}))
		if err != nil {
			t.Fatalf("%s: subscribe: %v", name, err)
		}
		t.Cleanup(func() { _ = stream.Close() })
		if !stream.Receive() {
			t.Fatalf("%s: no snapshot: %v", name, stream.Err())
		}
		if snap := stream.Msg(); !snap.GetSnapshot() || len(snap.GetNoHead()) != 1 {
			t.Fatalf("%s: snapshot = %v, want one no_head for rpc.k", name, snap)
		}
		subs = append(subs, sub{name, stream})
	}
	expect(t, call(t, "POST", s.Base+"/admin/activate", map[string]any{"scope": "rpc.k", "revision": rev, "expectedGeneration": 0}), http.StatusOK, "")
	for _, sb := range subs {
		for {
			if !sb.stream.Receive() {
				t.Fatalf("%s: stream ended: %v", sb.name, sb.stream.Err())
			}
			msg := sb.stream.Msg()
			if len(msg.GetHeads()) == 0 {
				continue // a heartbeat
			}
			if h := msg.GetHeads()[0]; h.GetScope() != "rpc.k" || h.GetGeneration() != 1 || h.GetRevision() != rev {
				t.Fatalf("%s: commit batch = %v", sb.name, msg)
			}
			break
		}
	}
}

func h2cClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &protos}}
}

// Two servers on one host, each with its own --addr and no other flag,
// both start: gRPC shares the main port, and --rpc-addr is off by default.
func TestTwoServersOnOneHost(t *testing.T) {
	var urls []string
	for range 2 {
		s := startServe(t, "--addr", "127.0.0.1:0")
		if strings.Contains(s.logs(), "gRPC Subscribe listening") {
			t.Errorf("a second listener opened without --rpc-addr:\n%s", s.logs())
		}
		urls = append(urls, s.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, u := range urls {
		c := varplanev1connect.NewPushServiceClient(h2cClient(), u, connect.WithGRPC())
		stream, err := c.Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"two.k"}}))
		if err != nil {
			t.Fatal(err)
		}
		if !stream.Receive() || !stream.Msg().GetSnapshot() {
			t.Errorf("%s: no snapshot over gRPC on --addr: %v", u, stream.Err())
		}
		_ = stream.Close()
	}
}
