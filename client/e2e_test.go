package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/internal/syncbuf"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
)

func h2cClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &protos}}
}

// subscribeRPC opens a gRPC Subscribe stream and returns a channel of the
// heads' "scope@generation" and no-heads' "scope@generation!".
func subscribeRPC(ctx context.Context, pc varplanev1connect.PushServiceClient, req *v1.SubscribeRequest) (<-chan string, error) {
	stream, err := pc.Subscribe(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	out := make(chan string, 256)
	go func() {
		defer close(out)
		defer stream.Close()
		for stream.Receive() {
			m := stream.Msg()
			for _, h := range m.GetHeads() {
				out <- fmt.Sprintf("%s@%d", h.GetScope(), h.GetGeneration())
			}
			for _, n := range m.GetNoHead() {
				out <- fmt.Sprintf("%s@%d!", n.GetScope(), n.GetGeneration())
			}
			if m.GetSnapshot() {
				out <- "snapshot"
			}
		}
	}()
	return out, nil
}

func TestFanOutThroughHTTPAdmin(t *testing.T) {
	p := startPlane(t, planeOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const nSSE, nRPC = 1000, 100

	hc := sseHTTPClient()
	conns := make([]*sseConn, nSSE)
	var wg sync.WaitGroup
	errs := make(chan error, nSSE+nRPC)
	sem := make(chan struct{}, 64)
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := dialSSE(ctx, hc, p.url()+"/vars/watch?key=fan.out&group=fan")
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
		}()
	}
	rpcStreams := make([]<-chan string, nRPC)
	clients := make([]varplanev1connect.PushServiceClient, 10) // 10 HTTP/2 connections
	for i := range clients {
		clients[i] = varplanev1connect.NewPushServiceClient(h2cClient(), p.rpc.URL(), connect.WithGRPC())
	}
	for i := range rpcStreams {
		ch, err := subscribeRPC(ctx, clients[i%len(clients)], &v1.SubscribeRequest{Keys: []string{"fan.out"}, Groups: []string{"fan"}})
		if err != nil {
			t.Fatal(err)
		}
		rpcStreams[i] = ch
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, "every subscriber", func() bool { return p.hub.Stats().Subscribers == nSSE+nRPC })

	gen := p.activate("fan.out", `{"n":1}`)
	want := push.EventID("fan.out", gen)
	var failed sync.Map
	var rw sync.WaitGroup
	for i, c := range conns {
		rw.Add(1)
		go func() {
			defer rw.Done()
			if err := c.waitID(want, 10*time.Second); err != nil {
				failed.Store(fmt.Sprintf("sse %d", i), err)
			}
		}()
	}
	for i, ch := range rpcStreams {
		rw.Add(1)
		go func() {
			defer rw.Done()
			timeout := time.After(10 * time.Second)
			for {
				select {
				case got, ok := <-ch:
					if !ok {
						failed.Store(fmt.Sprintf("rpc %d", i), "stream ended")
						return
					}
					if got == want {
						return
					}
				case <-timeout:
					failed.Store(fmt.Sprintf("rpc %d", i), "timeout")
					return
				}
			}
		}()
	}
	rw.Wait()
	n := 0
	failed.Range(func(k, v any) bool {
		if n++; n <= 5 {
			t.Errorf("%v did not receive %s: %v", k, want, v)
		}
		return true
	})
	if n > 0 {
		t.Errorf("%d of %d subscribers missed the commit", n, nSSE+nRPC)
	}
}

func TestStalledSubscriberDoesNotDelayOthers(t *testing.T) {
	p := startPlane(t, planeOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The stalled subscriber sends its request and never reads a byte.
	stalled, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET /vars/watch?key=stall.x HTTP/1.1\r\nHost: %s\r\n\r\n", p.addr)

	hc := sseHTTPClient()
	var healthy []*sseConn
	for i := 0; i < 10; i++ {
		c, err := dialSSE(ctx, hc, p.url()+"/vars/watch?key=stall.x")
		if err != nil {
			t.Fatal(err)
		}
		healthy = append(healthy, c)
	}
	waitFor(t, "11 subscribers", func() bool { return p.hub.Stats().Subscribers == 11 })

	// Two large revisions activated alternately: far more bytes than the
	// stalled socket buffers hold.
	big := func(tag string) json.RawMessage {
		return json.RawMessage(`{"tag":"` + tag + `","pad":"` + strings.Repeat("x", 128<<10) + `"}`)
	}
	bg := context.Background()
	var revs []varplane.Revision
	for _, tag := range []string{"a", "b"} {
		r, err := p.engine.CreateRevision(bg, varplane.CreateRevisionRequest{Scope: "stall.x", Document: big(tag)})
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Revision)
	}
	const commits = 200
	for g := 0; g < commits; g++ {
		if _, err := p.engine.Activate(bg, varplane.ActivateRequest{Scope: "stall.x", Revision: revs[g%2], ExpectedGeneration: varplane.Generation(g)}); err != nil {
			t.Fatal(err)
		}
	}
	// Every commit returned while the stalled peer had read nothing; each
	// healthy subscriber sees strictly increasing generations up to the last.
	want := push.EventID("stall.x", commits)
	for i, c := range healthy {
		last := uint64(0)
		deadline := time.After(20 * time.Second)
	read:
		for {
			select {
			case id, ok := <-c.ids:
				if !ok {
					t.Fatalf("healthy %d: stream ended", i)
				}
				var g uint64
				fmt.Sscanf(id[strings.LastIndexByte(id, '@')+1:], "%d", &g)
				if g <= last && g != 0 {
					t.Fatalf("healthy %d: generation %d after %d", i, g, last)
				}
				last = g
				if id == want {
					break read
				}
			case <-deadline:
				t.Fatalf("healthy %d: stuck at generation %d", i, last)
			}
		}
	}
	st := p.hub.Stats()
	if st.Coalesced == 0 {
		t.Errorf("Coalesced = 0: the stalled subscriber never fell behind (stats %+v)", st)
	}
	if st.Subscribers != 11 && st.Disconnects == 0 {
		t.Errorf("stats %+v: a subscriber vanished without a disconnect", st)
	}
}

func startClient(t *testing.T, p *plane, opts client.Options, scopes ...varplane.Scope) *client.Client {
	t.Helper()
	return startClientAt(t, p.url(), opts, scopes...)
}

// startClientAt starts a client of the server at serverURL following
// scopes, stopped when the test ends.
func startClientAt(t *testing.T, serverURL string, opts client.Options, scopes ...varplane.Scope) *client.Client {
	t.Helper()
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := client.New(serverURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(scopes...); err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Stop)
	return c
}

func fetch(t *testing.T, c *client.Client, sc varplane.Scope) client.Value {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Fetch(ctx, sc)
	if err != nil {
		t.Fatalf("Fetch %s: %v", sc, err)
	}
	return v
}

type numDoc struct {
	N int `json:"n"`
}

func num(c *client.Client, sc varplane.Scope) int {
	v, err := client.Get[numDoc](c, sc)
	if err != nil {
		return -1
	}
	return v.N
}

func TestSDKOutageKeepsServingThenConverges(t *testing.T) {
	p := startPlane(t, planeOptions{})
	p.activate("o.a", `{"n":1}`)
	p.activate("o.b", `{"n":1}`)
	var clients []*client.Client
	for i := 0; i < 5; i++ {
		c := startClient(t, p, client.Options{}, "o.a", "o.b")
		fetch(t, c, "o.a")
		fetch(t, c, "o.b")
		clients = append(clients, c)
	}
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d connected", i), c.Connected)
	}

	p.stop()
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d sees the outage", i), func() bool { return !c.Connected() })
		if got := num(c, "o.a"); got != 1 {
			t.Errorf("client %d during outage: o.a = %d, want the last value 1", i, got)
		}
	}
	p.activateDirect("o.a", `{"n":2}`) // a change the clients cannot hear of yet
	for i, c := range clients {
		if got := num(c, "o.a"); got != 1 {
			t.Errorf("client %d during outage: o.a = %d, want 1", i, got)
		}
	}

	p.start()
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d converges to o.a=2", i), func() bool { return num(c, "o.a") == 2 })
	}
	p.activate("o.b", `{"n":3}`)
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d follows o.b=3", i), func() bool { return num(c, "o.b") == 3 })
	}
}

func TestSDKDropsExactlyTheDeactivatedScopes(t *testing.T) {
	p := startPlane(t, planeOptions{})
	p.activate("g", `{"g.n":1}`)
	p.activate("g.a", `{"n":1}`)
	p.activate("g.b", `{"n":1}`)
	p.activate("h.c", `{"n":1}`)
	static := map[varplane.Scope]json.RawMessage{"g.a": json.RawMessage(`{"n":-7}`)}
	scopes := []varplane.Scope{"g", "g.a", "g.b", "h.c"}
	var clients []*client.Client
	for i := 0; i < 5; i++ {
		c := startClient(t, p, client.Options{Static: static}, scopes...)
		for _, sc := range scopes {
			fetch(t, c, sc)
		}
		waitFor(t, "connected", c.Connected)
		clients = append(clients, c)
	}
	p.deactivate("g")
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d drops g", i), func() bool { _, ok := c.Value("g"); return !ok })
		waitFor(t, fmt.Sprintf("client %d drops g.b", i), func() bool { _, ok := c.Value("g.b"); return !ok })
		waitFor(t, fmt.Sprintf("client %d falls back for g.a", i), func() bool {
			v, _ := c.Value("g.a")
			return v.Tier == client.TierStatic
		})
		if got := num(c, "g.a"); got != -7 {
			t.Errorf("client %d: g.a = %d, want the static -7", i, got)
		}
		if v, _ := c.Value("h.c"); v.Tier != client.TierRuntime || num(c, "h.c") != 1 {
			t.Errorf("client %d: h.c = %+v, want untouched runtime value", i, v)
		}
	}
}

func TestSDKBatchesOneTickAndRetriesUntilServed(t *testing.T) {
	p := startPlane(t, planeOptions{})
	scopes := []varplane.Scope{"b.one", "b.two", "b.three", "bgroup"}
	p.activate("b.one", `{"n":1}`)
	p.activate("b.two", `{"n":2}`)
	p.activate("b.three", `{"n":3}`)
	p.activate("bgroup", `{"bgroup.n":4}`)
	logs := &syncbuf.Buffer{}
	c := startClient(t, p, client.Options{
		Transport:   client.TransportNone,
		BatchWindow: 50 * time.Millisecond,
		MinBackoff:  time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	var wg sync.WaitGroup
	for _, sc := range scopes {
		wg.Add(1)
		go func() { defer wg.Done(); fetch(t, c, sc) }()
	}
	wg.Wait()
	if got, want := p.batchRequests.Load(), int64(1); got != want {
		t.Errorf("batch requests = %d, want %d for one tick", got, want)
	}
	if got := num(c, "b.two"); got != 2 {
		t.Errorf("b.two = %d, want 2", got)
	}
	if v, _ := c.Value("bgroup"); string(v.Raw) != `{"bgroup.n":4}` {
		t.Errorf("bgroup = %s", v.Raw)
	}

	done := make(chan client.Value, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		v, err := c.Fetch(ctx, "late.x")
		if err != nil {
			t.Errorf("Fetch(late.x): %v", err)
		}
		done <- v
	}()
	waitFor(t, "a warning on the 5th attempt", func() bool { return strings.Contains(logs.String(), "attempts=5") })
	if strings.Contains(logs.String(), "attempts=4") {
		t.Errorf("warned before the 5th attempt:\n%s", logs)
	}
	p.activate("late.x", `{"n":9}`)
	select {
	case v := <-done:
		if v.Tier != client.TierRuntime || string(v.Raw) != `{"n":9}` {
			t.Errorf("late.x = %+v, want the runtime value", v)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Fetch of late.x never returned")
	}
}

func TestSDKPollsWithETags(t *testing.T) {
	for _, tt := range []struct {
		name string
		po   planeOptions
		tr   client.Transport
	}{
		{"poll transport", planeOptions{}, client.TransportPoll},
		{"fallback when the server has no stream", planeOptions{noWatch: true}, client.TransportSSE},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startPlane(t, tt.po)
			p.activate("poll.x", `{"n":1}`)
			c := startClient(t, p, client.Options{Transport: tt.tr, PollInterval: 10 * time.Millisecond}, "poll.x")
			waitFor(t, "first value", func() bool { return num(c, "poll.x") == 1 })
			waitFor(t, "a 304", func() bool { return p.notModified.Load() > 0 })
			p.activate("poll.x", `{"n":2}`)
			waitFor(t, "update", func() bool { return num(c, "poll.x") == 2 })
			p.deactivate("poll.x")
			waitFor(t, "removal", func() bool { _, ok := c.Value("poll.x"); return !ok })
		})
	}
}

func TestRPCSubscribe(t *testing.T) {
	p := startPlane(t, planeOptions{})
	p.activate("r.a", `{"n":1}`)
	p.activate("r", `{"r.n":1}`)
	p.activate("r.b", `{"n":1}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc := varplanev1connect.NewPushServiceClient(h2cClient(), p.rpc.URL(), connect.WithGRPC())
	ch, err := subscribeRPC(ctx, pc, &v1.SubscribeRequest{Prefixes: []string{"r"}, HeldGenerations: map[string]uint64{"r.a": 1}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(n int) string {
		t.Helper()
		var got []string
		for len(got) < n {
			select {
			case s, ok := <-ch:
				if !ok {
					t.Fatalf("stream ended after %v", got)
				}
				got = append(got, s)
			case <-time.After(10 * time.Second):
				t.Fatalf("timeout after %v", got)
			}
		}
		return strings.Join(got, " ")
	}
	if got, want := read(3), "r@1 r.b@1 snapshot"; got != want {
		t.Errorf("snapshot = %q, want %q (r.a is held)", got, want)
	}
	p.deactivate("r")
	if got, want := read(3), "r@2! r.a@2! r.b@2!"; got != want {
		t.Errorf("deactivation batch = %q, want %q", got, want)
	}

	// Errors map to gRPC codes.
	bad, err := subscribeRPC(ctx, pc, &v1.SubscribeRequest{})
	if err == nil {
		if _, ok := <-bad; ok {
			t.Error("an empty filter streamed")
		}
	}
}

func TestStopEndsEveryGoroutine(t *testing.T) {
	p := startPlane(t, planeOptions{})
	p.activate("leak.x", `{"n":1}`)
	tr := &http.Transport{}
	hc := &http.Client{Transport: tr}
	time.Sleep(50 * time.Millisecond) // let the plane's own goroutines settle
	before := runtime.NumGoroutine()
	c, err := client.New(p.url(), client.Options{HTTPClient: hc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register("leak.x"); err != nil {
		t.Fatal(err)
	}
	c.Start()
	fetch(t, c, "leak.x")
	waitFor(t, "connected", c.Connected)
	c.Stop()
	c.Stop() // idempotent
	tr.CloseIdleConnections()
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if got := num(c, "leak.x"); got != 1 {
		t.Errorf("after Stop: leak.x = %d, want the held value 1", got)
	}
	if _, err := c.Fetch(context.Background(), "other.y"); err == nil {
		t.Error("Fetch after Stop succeeded")
	}
}
