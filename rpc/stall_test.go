package rpc_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// stalledWatch opens a Watch stream on a connection of its own that grants
// the server a 64-byte stream window and never returns any: the server's
// first message larger than that waits on HTTP/2 flow control, as it does
// for a client that stopped reading. The connection itself stays read, so
// only the stream is stalled. The returned channel receives how the stream
// ended (RST_STREAM or trailers), or the connection's error.
func stalledWatch(t *testing.T, addr string, create *v1.WatchCreateRequest) <-chan string {
	t.Helper()
	c := dialRaw(t, addr)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 64}); err != nil {
		t.Fatal(err)
	}
	if err := c.headers(1, "/varplane.v1.PushService/Watch"); err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: create}})
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	if err := c.fr.WriteData(1, false, append(frame, msg...)); err != nil {
		t.Fatal(err)
	}
	ended := make(chan string, 1)
	go func() {
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				ended <- "connection: " + err.Error()
				return
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				ended <- "reset " + f.ErrCode.String()
				return
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					ended <- "trailers"
					return
				}
			case *http2.GoAwayFrame:
				ended <- "goaway " + f.ErrCode.String()
				return
			}
		}
	}()
	return ended
}

// A Watch subscriber that stops reading is reset after the write timeout
// (its writer and its watches released, the server's memory bounded while
// it is stalled), while a subscriber on another connection gets every
// commit; the stalled client, back with the generation it holds, resumes
// from the newest head.
func TestStalledWatchSubscriberIsDropped(t *testing.T) {
	const stalled = 20
	e, hub, srv := rpc.StartTestServer(t, push.Options{StallTimeout: 200 * time.Millisecond}, nil, func(s *rpc.Server) {
		s.GRPC.WriteTimeout = 2 * time.Second
		s.GRPC.Heartbeat = 100 * time.Millisecond
	})
	doc := func(n int) string { return fmt.Sprintf(`{"n":%d,"pad":"%s"}`, n, strings.Repeat("x", 64<<10)) }
	g0 := rpc.ActivateForTest(t, e, "s.k", doc(0))
	addr := strings.TrimPrefix(srv.URL(), "http://")

	// The healthy subscriber, a stock grpc-go client on its own connection.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	healthy, err := dial(t, srv).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := healthy.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: &v1.WatchCreateRequest{WatchId: 1, Keys: []string{"s.k"}, ShareResponses: true}}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan uint64, 256)
	go func() {
		for {
			m, err := healthy.Recv()
			if err != nil {
				close(got)
				return
			}
			if h := m.GetBatch().GetHeads(); len(h) == 1 {
				got <- h[0].GetGeneration()
			}
		}
	}()
	if g := <-got; g != uint64(g0) {
		t.Fatalf("healthy snapshot at %d, want %d", g, g0)
	}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var ends []<-chan string
	for i := range stalled {
		ends = append(ends, stalledWatch(t, addr, &v1.WatchCreateRequest{WatchId: int64(i + 1), Keys: []string{"s.k"}}))
	}
	waitUntil(t, "the stalled watches open", func() bool { return srv.GRPCServer().Stats().Watches == 1+stalled })

	// Commits while they are stalled: the healthy one gets each.
	var last uint64
	for n := 1; n <= 30; n++ {
		last = uint64(rpc.ActivateForTest(t, e, "s.k", doc(n)))
		select {
		case g := <-got:
			if g != last {
				t.Fatalf("healthy subscriber got %d, want %d", g, last)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("healthy subscriber did not get generation %d while others are stalled", last)
		}
	}
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	if grew := int64(during.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		t.Errorf("heap grew by %d MiB with %d stalled subscribers and 30 commits of 64 KiB", grew>>20, stalled)
	}

	// Each stalled stream is reset after the write timeout; its watches
	// and subscriptions are gone; the healthy one is still served.
	for i, end := range ends {
		select {
		case how := <-end:
			if !strings.HasPrefix(how, "reset") {
				t.Errorf("stalled stream %d ended with %s, want a reset", i, how)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stalled stream %d still open", i)
		}
	}
	// A stream's write timeout is counted when its ServeHTTP returns, which
	// may be after its watches are released: wait for both.
	waitUntil(t, "the stalled watches released and their write timeouts counted", func() bool {
		st := srv.GRPCServer().Stats()
		return st.Watches == 1 && st.Streams == 1 && hub.Stats().Subscribers == 1 && st.WriteTimeouts >= stalled
	})
	if n := srv.GRPCServer().Stats().WriteTimeouts; n != stalled {
		t.Errorf("WriteTimeouts = %d, want %d", n, stalled)
	}
	last = uint64(rpc.ActivateForTest(t, e, "s.k", doc(31)))
	if g := <-got; g != last {
		t.Fatalf("after the drops the healthy subscriber got %d, want %d", g, last)
	}

	// The stalled client comes back holding g0: its snapshot is the newest
	// head alone.
	w, err := dial(t, srv).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: &v1.WatchCreateRequest{WatchId: 1, Keys: []string{"s.k"},
		HeldGenerations: map[string]uint64{"s.k": uint64(g0)}}}}); err != nil {
		t.Fatal(err)
	}
	for {
		m := recvWatch(t, w)
		if b := m.GetBatch(); b != nil {
			if h := b.GetHeads(); !b.GetSnapshot() || len(h) != 1 || h[0].GetGeneration() != last {
				t.Fatalf("resumed snapshot = %v, want the head at %d", b, last)
			}
			break
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
