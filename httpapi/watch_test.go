package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/push/pushtest"
)

// The watch route over a hub of its own (watch.go), with push's fixtures.
var (
	newEngine   = pushtest.Engine
	newHub      = pushtest.Hub
	activate    = pushtest.Activate
	tryActivate = pushtest.TryActivate
	deactivate  = pushtest.Deactivate
)

type sseEvent struct {
	Event, ID, Data string
	Retry           string
	Comment         string
}

// String keeps failure messages short: data can be large.
func (ev sseEvent) String() string {
	data := ev.Data
	if len(data) > 80 {
		data = fmt.Sprintf("%s…(%d bytes)", data[:80], len(data))
	}
	return fmt.Sprintf("{event %q id %q data %q retry %q comment %q}", ev.Event, ev.ID, data, ev.Retry, ev.Comment)
}

type sseStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
}

// openSSE connects to the handler at srv with query q and header hdr.
func openSSE(t *testing.T, srv *httptest.Server, q url.Values, hdr http.Header) *sseStream {
	t.Helper()
	return openSSEWith(t, srv.Client(), srv.URL, q, hdr)
}

// openSSEWith connects with hc to the handler at base.
func openSSEWith(t *testing.T, hc *http.Client, base string, q url.Values, hdr http.Header) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/watch?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	s := &sseStream{t: t, resp: resp, events: make(chan sseEvent, 64)}
	if resp.StatusCode != http.StatusOK {
		return s
	}
	go readEvents(resp.Body, s.events)
	return s
}

// readEvents parses the stream from r into events, closing it at the end.
func readEvents(r io.Reader, events chan<- sseEvent) {
	defer close(events)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev != (sseEvent{}) {
				events <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"):
			ev.Comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "event: "):
			ev.Event = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			ev.Data = line[len("data: "):]
		case strings.HasPrefix(line, "retry: "):
			ev.Retry = line[len("retry: "):]
		}
	}
}

// next returns the next event that is not a heartbeat or retry hint.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				s.t.Fatal("stream ended")
			}
			if ev.Event == "" {
				continue
			}
			return ev
		case <-timeout:
			s.t.Fatal("no event within 5s")
		}
	}
}

// ended waits for the stream to end and returns the events it still
// carried, heartbeats aside.
func (s *sseStream) ended() []sseEvent {
	s.t.Helper()
	timeout := time.After(5 * time.Second)
	var rest []sseEvent
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return rest
			}
			if ev.Comment != "heartbeat" {
				rest = append(rest, ev)
			}
		case <-timeout:
			s.t.Fatal("stream still open after 5s")
		}
	}
}

// sseOptions are what a test sets of the handler serving the watch route.
type sseOptions struct {
	Heartbeat, WriteTimeout time.Duration
	Authorizer              varplane.Authorizer
	Logger                  *slog.Logger
}

// sseHandler is the handler of e serving h's watch route at /watch.
func sseHandler(t *testing.T, e *varplane.Engine, h *push.Hub, opts sseOptions) *httpapi.Handler {
	t.Helper()
	if opts.Authorizer == nil {
		opts.Authorizer = varplane.AllowAll
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	api := httpapi.NewHandler(e, httpapi.Options{Base: "/", Hub: h, Authorizer: opts.Authorizer, Logger: opts.Logger,
		Stream: httpapi.StreamOptions{Heartbeat: opts.Heartbeat, WriteTimeout: opts.WriteTimeout}})
	t.Cleanup(api.Close)
	return api
}

func newSSEServer(t *testing.T, e *varplane.Engine, h *push.Hub, opts sseOptions) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(sseHandler(t, e, h, opts))
	t.Cleanup(srv.Close)
	return srv
}

// waitSubscribers waits until the hub serves n subscribers.
func waitSubscribers(t *testing.T, h *push.Hub, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.Stats().Subscribers != n {
		if time.Now().After(deadline) {
			t.Fatalf("hub has %d subscribers, want %d", h.Stats().Subscribers, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSSEStream(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "g.k1", `{"on":true}`)
	activate(t, e, "g", `{"g.x":1}`)
	srv := newSSEServer(t, e, h, sseOptions{})
	s := openSSE(t, srv, url.Values{"key": {"g.k1", "g.none"}, "group": {"g"}}, nil)

	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := s.resp.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	// The length of a stream is not known up front: HTTP/1.1 chunks it.
	if !slices.Equal(s.resp.TransferEncoding, []string{"chunked"}) {
		t.Errorf("transfer encoding = %v, want chunked", s.resp.TransferEncoding)
	}
	select {
	case ev := <-s.events:
		if ev.Retry != "1000" {
			t.Errorf("first event = %+v, want retry: 1000", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no retry hint")
	}
	ev := s.next()
	if ev.Event != "head" || ev.ID != "g.k1@1" {
		t.Fatalf("first event = %+v, want head g.k1@1", ev)
	}
	var body struct {
		Scope      string                     `json:"scope"`
		Generation uint64                     `json:"generation"`
		Revision   string                     `json:"revision"`
		Values     map[string]json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &body); err != nil {
		t.Fatalf("data %q: %v", ev.Data, err)
	}
	if body.Scope != "g.k1" || body.Generation != 1 || !strings.HasPrefix(body.Revision, "sha256:") || string(body.Values["g.k1"]) != `{"on":true}` {
		t.Errorf("data = %+v", body)
	}
	// Keys in request order, then groups.
	if ev := s.next(); ev.Event != "no-head" || ev.ID != "g.none@0" || ev.Data != `{"scope":"g.none","generation":0}` {
		t.Errorf("second event = %+v, want no-head g.none", ev)
	}
	if ev := s.next(); ev.Event != "head" || ev.ID != "g@1" {
		t.Errorf("third event = %+v, want head g@1", ev)
	}

	activate(t, e, "g.k1", `{"on":false}`)
	if ev := s.next(); ev.Event != "head" || ev.ID != "g.k1@2" || !strings.Contains(ev.Data, `"values":{"g.k1":{"on":false}}`) {
		t.Errorf("commit event = %+v", ev)
	}
	deactivate(t, e, "g")
	got := []string{s.next().ID, s.next().ID}
	if got[0] != "g@2" || got[1] != "g.k1@3" {
		t.Errorf("deactivation events = %v, want [g@2 g.k1@3]", got)
	}
}

func TestSSEResume(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "a.x", `1`)
	activate(t, e, "a.y", `1`)
	activate(t, e, "a.y", `2`)
	srv := newSSEServer(t, e, h, sseOptions{})

	tests := []struct {
		name string
		q    url.Values
		hdr  http.Header
		want string
	}{
		{"since holds everything current", url.Values{"prefix": {"a"}, "since": {"a.x@1", "a.y@2"}}, nil, ""},
		{"since holds an older a.y", url.Values{"prefix": {"a"}, "since": {"a.x@1", "a.y@1"}}, nil, "a.y@2"},
		{"since holds nothing", url.Values{"prefix": {"a"}}, nil, "a.x@1 a.y@2"},
		{"last-event-id holds a.x", url.Values{"key": {"a.x"}}, http.Header{"Last-Event-Id": {"a.x@1"}}, ""},
		{"last-event-id holds an older a.y", url.Values{"key": {"a.y"}}, http.Header{"Last-Event-Id": {"a.y@1"}}, "a.y@2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A marker commit tells "nothing was resent" apart from "not yet":
			// the client holds the marker's current generation, so only the
			// next one is sent, after everything the snapshot resent.
			st, err := e.Status(context.Background(), "m.marker")
			if err != nil {
				t.Fatal(err)
			}
			q := url.Values{"key": {"m.marker"}, "since": {push.EventID("m.marker", st.Generation)}}
			for k, v := range tt.q {
				q[k] = append(q[k], v...)
			}
			s := openSSE(t, srv, q, tt.hdr)
			activate(t, e, "m.marker", `1`)
			var got []string
			for ev := s.next(); !strings.HasPrefix(ev.ID, "m.marker@"); ev = s.next() {
				got = append(got, ev.ID)
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("resent = %q, want %q", g, tt.want)
			}
		})
	}
}

func TestSSEHeartbeat(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, e, h, sseOptions{Heartbeat: 10 * time.Millisecond})
	s := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil)
	// Several heartbeats, with an event between them: the timer keeps
	// running after a delivery.
	for beats := 0; beats < 3; {
		select {
		case ev := <-s.events:
			if ev.Comment == "heartbeat" {
				beats++
				if beats == 1 {
					activate(t, e, "a.x", `1`)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d heartbeats, want 3", beats)
		}
	}
}

func TestSSEErrors(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribers: 1})
	deny := varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
		if a.Kind != varplane.KindRead {
			return varplane.Identity{}, fmt.Errorf("kind %s", a.Kind) // fails closed as 500
		}
		if a.Scope == "secret.x" || (a.Scope == "secret" && a.Subtree) {
			return varplane.Identity{}, varplane.ErrForbidden
		}
		return varplane.Anonymous, nil
	})
	srv := newSSEServer(t, e, h, sseOptions{Authorizer: deny})
	keep := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil) // takes the only slot
	if keep.resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream status = %d", keep.resp.StatusCode)
	}
	tests := []struct {
		name   string
		q      url.Values
		status int
		code   string
	}{
		{"no filter", url.Values{}, 400, "bad-request"},
		{"bad scope", url.Values{"key": {"a..b"}}, 400, "bad-request"},
		{"bad since", url.Values{"key": {"a.x"}, "since": {"a.x"}}, 400, "bad-request"},
		{"denied", url.Values{"key": {"secret.x"}}, 403, "forbidden"},
		{"prefix denied as a subtree", url.Values{"prefix": {"secret"}}, 403, "forbidden"},
		{"group named as a key", url.Values{"key": {"a"}}, 400, "bad-request"},
		{"key named as a group", url.Values{"group": {"a.x"}}, 400, "bad-request"},
		{"full", url.Values{"key": {"a.x"}}, 503, "too-many-subscribers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openSSE(t, srv, tt.q, nil)
			if s.resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", s.resp.StatusCode, tt.status)
			}
			var body map[string]string
			if err := json.NewDecoder(s.resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if body["code"] != tt.code || body["error"] == "" {
				t.Errorf("body = %v, want code %q and a message", body, tt.code)
			}
		})
	}
}

func TestSSEClosedWithReason(t *testing.T) {
	t.Run("shutdown", func(t *testing.T) {
		e := newEngine(t)
		h := push.New(e, push.Options{})
		srv := newSSEServer(t, e, h, sseOptions{})
		s := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil)
		if ev := s.next(); ev.Event != "no-head" {
			t.Fatalf("first event = %+v", ev)
		}
		h.Close()
		if ev := s.next(); ev.Event != "close" || ev.Data != `{"reason":"shutdown"}` {
			t.Errorf("event = %+v, want close with reason shutdown", ev)
		}
		if rest := s.ended(); len(rest) > 0 {
			t.Errorf("after the close event: %v", rest)
		}
	})
	t.Run("slow subscriber", func(t *testing.T) {
		// The hub sees a stall when a commit finds the previous one still
		// queued past StallTimeout: the client stops reading until the
		// writer blocks, and the fake clock makes every wait a long one.
		e := newEngine(t)
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Hour))) }
		h := newHub(t, e, push.Options{StallTimeout: time.Minute, Now: clock})
		srv := newSSEServer(t, e, h, sseOptions{})
		c := dialRawSSE(t, srv, url.Values{"key": {"big.x"}})
		for i := 0; h.Stats().Disconnects == 0; i++ {
			if i == 500 {
				t.Fatal("the hub never found the stream stalled")
			}
			activate(t, e, "big.x", bigDoc(i))
		}
		// Reading again lets the blocked write finish; the stream then
		// tells why it ends.
		if ev := c.last(t); ev.Event != "close" || ev.Data != `{"reason":"slow-subscriber"}` {
			t.Errorf("last event = %+v, want close with reason slow-subscriber", ev)
		}
		waitSubscribers(t, h, 0)
	})
}

// rawSSE is a stream read straight off a TCP connection with a small
// receive buffer, so that the server's writes block soon after the client
// stops reading.
type rawSSE struct {
	conn net.Conn
	resp *http.Response
}

func dialRawSSE(t *testing.T, srv *httptest.Server, q url.Values) *rawSSE {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A fixed receive buffer stops the kernel from growing it: what the
	// server can queue stays bounded. Much smaller would make loopback's
	// 64 KiB segments crawl.
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(256 << 10)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/watch?"+q.Encode(), nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return &rawSSE{conn: conn, resp: resp}
}

// last reads the rest of the stream and returns its last event.
func (c *rawSSE) last(t *testing.T) sseEvent {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	events := make(chan sseEvent, 16)
	go readEvents(c.resp.Body, events)
	var last sseEvent
	for ev := range events {
		if ev.Event != "" {
			last = ev
		}
	}
	return last
}

// bigDoc is a 256 KiB document, distinct for each i.
func bigDoc(i int) string {
	return fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", 256<<10))
}

func TestSSEClientGoneUnsubscribes(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, e, h, sseOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/watch?key=a.x", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan sseEvent, 16)
	go readEvents(resp.Body, events)
	waitSubscribers(t, h, 1)
	cancel() // the client goes away without a word
	resp.Body.Close()
	waitSubscribers(t, h, 0)
	// The hub still serves others.
	s := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil)
	activate(t, e, "a.x", `1`)
	for ev := s.next(); ev.ID != "a.x@1"; ev = s.next() {
	}
}

func TestSSEWriteTimeout(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, e, h, sseOptions{WriteTimeout: 100 * time.Millisecond})
	c := dialRawSSE(t, srv, url.Values{"key": {"big.x"}})
	// The client never reads again: once the socket buffers are full the
	// next write waits, and the write timeout cuts the stream.
	for i := 0; h.Stats().Subscribers != 0; i++ {
		if i == 1000 {
			t.Fatal("a client that does not read was never disconnected")
		}
		activate(t, e, "big.x", bigDoc(i))
		time.Sleep(5 * time.Millisecond)
	}
	// net/http does not reuse a connection whose write failed: the server
	// closed it, so reading reaches its end instead of the read deadline.
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c.conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection is still open: %v", err)
	}
}

// A client that pauses reading gets everything once it reads again, in
// order and whole, and the stream goes on afterwards.
func TestSSESlowReaderCatchesUp(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	// The writes block until the reader starts; on a loaded machine (the
	// race detector, a busy CI) the commits alone can outlast the default
	// write timeout, which this test is not about.
	srv := newSSEServer(t, e, h, sseOptions{WriteTimeout: 5 * time.Minute})
	c := dialRawSSE(t, srv, url.Values{"prefix": {"big"}})
	// Distinct scopes are not coalesced: the server has more to write than
	// the socket buffers hold.
	const n = 40
	for i := 0; i < n; i++ {
		activate(t, e, varplane.Scope(fmt.Sprintf("big.s%02d", i)), bigDoc(i))
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	events := make(chan sseEvent, 16)
	go readEvents(c.resp.Body, events)
	next := func() sseEvent {
		for ev := range events {
			if ev.Event != "" {
				return ev
			}
		}
		t.Fatal("stream ended")
		return sseEvent{}
	}
	for i := 0; i < n; i++ {
		ev := next()
		var body struct {
			Values map[string]struct {
				I   int    `json:"i"`
				Pad string `json:"pad"`
			} `json:"values"`
		}
		sc := fmt.Sprintf("big.s%02d", i)
		if err := json.Unmarshal([]byte(ev.Data), &body); err != nil || ev.ID != sc+"@1" {
			t.Fatalf("event %d = %s (%d bytes of data): %v", i, ev.ID, len(ev.Data), err)
		}
		if v := body.Values[sc]; v.I != i || len(v.Pad) != 256<<10 {
			t.Fatalf("event %d carries i=%d and %d bytes of padding", i, v.I, len(v.Pad))
		}
	}
	activate(t, e, "big.s00", `{"i":-1}`)
	if ev := next(); ev.ID != "big.s00@2" {
		t.Errorf("after catching up: %+v, want big.s00@2", ev)
	}
}

func TestSSEHead(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, e, h, sseOptions{})
	resp, err := srv.Client().Head(srv.URL + "/watch?key=a.x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || len(body) != 0 {
		t.Errorf("HEAD = %d %q with %d bytes of body", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	waitSubscribers(t, h, 0)
}

// Over HTTP/2 the stream carries the same events, and the hub's close
// event ends it.
func TestSSEHTTP2(t *testing.T) {
	e := newEngine(t)
	h := push.New(e, push.Options{})
	defer h.Close()
	srv := httptest.NewUnstartedServer(sseHandler(t, e, h, sseOptions{}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil)
	if s.resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", s.resp.Proto)
	}
	if ev := s.next(); ev.ID != "a.x@0" {
		t.Fatalf("first event = %+v", ev)
	}
	activate(t, e, "a.x", `1`)
	if ev := s.next(); ev.ID != "a.x@1" {
		t.Errorf("commit event = %+v", ev)
	}
	h.Close()
	if ev := s.next(); ev.Event != "close" || ev.Data != `{"reason":"shutdown"}` {
		t.Errorf("event = %+v, want close with reason shutdown", ev)
	}
}

// openFDs counts this process's open file descriptors, -1 where that is
// not known.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// Closing the hub (the server stopping) must end every stream with its
// close event and return its handler, so that nothing (goroutine,
// descriptor) is left once the clients close their connections.
func TestSSEHubCloseReleasesStreams(t *testing.T) {
	e := newEngine(t)
	h := push.New(e, push.Options{})
	defer h.Close()
	srv := newSSEServer(t, e, h, sseOptions{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	goroutines, fds := runtime.NumGoroutine(), openFDs()

	const n = 20
	var streams []chan sseEvent
	var bodies []io.Closer
	for i := 0; i < n; i++ {
		resp, err := hc.Get(srv.URL + "/watch?key=a.x")
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
		ch := make(chan sseEvent, 16)
		go readEvents(resp.Body, ch)
		streams = append(streams, ch)
	}
	waitSubscribers(t, h, n)
	activate(t, e, "a.x", `1`)
	h.Close()
	for i, ch := range streams {
		var got []string
		for ev := range ch { // the response ends: its handler returned
			if ev.Event != "" {
				got = append(got, ev.Event+" "+ev.ID+ev.Data)
			}
		}
		if len(got) == 0 || got[len(got)-1] != `close {"reason":"shutdown"}` {
			t.Errorf("stream %d: %q, want it to end with the close event", i, got)
		}
	}
	if n := h.Stats().Subscribers; n != 0 {
		t.Errorf("%d subscribers after the hub closed", n)
	}
	// The connections outlive their responses (keep-alive): closing them
	// ends the server's connection goroutines too.
	for _, b := range bodies {
		b.Close()
	}
	tr.CloseIdleConnections()
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines })
	if fds >= 0 {
		waitFor(t, "descriptors to close", func() bool { return openFDs() <= fds })
	}
}

// waitFor polls cond until it holds or 5s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Many streams, commits from several goroutines, clients leaving midway:
// every stream that stays sees each scope's generations only ever grow and
// ends at the final ones, and every stream that left is unsubscribed.
func TestSSEManyStreamsConverge(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, e, h, sseOptions{})
	scopes := []varplane.Scope{"m.a", "m.b", "m.c", "m.d"}
	const streams, leavers, commits = 40, 10, 25
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var all []*sseStream
	for i := 0; i < streams; i++ {
		all = append(all, openSSEWith(t, hc, srv.URL, url.Values{"prefix": {"m"}}, nil))
	}
	waitSubscribers(t, h, streams)
	final := map[string]uint64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sc := range scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var g varplane.Generation
			for i := 0; i < commits; i++ {
				var err error
				if g, err = tryActivate(e, sc, fmt.Sprint(i)); err != nil {
					t.Error(err)
					return
				}
			}
			mu.Lock()
			final[string(sc)] = uint64(g)
			mu.Unlock()
		}()
	}
	for _, s := range all[:leavers] { // leave while the commits flow
		s.resp.Body.Close()
	}
	wg.Wait()
	waitSubscribers(t, h, streams-leavers)
	for i, s := range all[leavers:] {
		held := map[string]uint64{}
		for !maps.Equal(held, final) {
			ev := s.next()
			at := strings.LastIndexByte(ev.ID, '@')
			sc, gen := ev.ID[:at], ev.ID[at+1:]
			g, err := strconv.ParseUint(gen, 10, 64)
			if err != nil || g <= held[sc] && held[sc] != 0 {
				t.Fatalf("stream %d: %s after generation %d", i, ev.ID, held[sc])
			}
			held[sc] = g
		}
	}
}

// Over SSE: one token at its cap is refused 503 while another still
// subscribes; a client that disconnects frees its slot.
func TestSSEPerTokenCap(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribers: 100, MaxSubscribersPerToken: 3})
	srv := newSSEServer(t, e, h, sseOptions{})
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	q := url.Values{"key": {"a.x"}}
	var greedy []*sseStream
	for range 3 {
		s := openSSE(t, srv, q, bearer("greedy"))
		if s.resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", s.resp.StatusCode)
		}
		greedy = append(greedy, s)
	}
	refused := openSSE(t, srv, q, bearer("greedy"))
	if refused.resp.StatusCode != http.StatusServiceUnavailable || refused.resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d (Retry-After %q), want 503 with Retry-After", refused.resp.StatusCode, refused.resp.Header.Get("Retry-After"))
	}
	if err := wire.ResponseError(refused.resp); err.Code != varplane.CodeTooManyRequests || err.Limit != push.LimitSubscribersPerToken {
		t.Errorf("refusal = %#v", err)
	}
	if s := openSSE(t, srv, q, bearer("modest")); s.resp.StatusCode != http.StatusOK {
		t.Fatalf("another token: status %d", s.resp.StatusCode)
	}
	waitSubscribers(t, h, 4)
	greedy[0].resp.Body.Close() // the client goes away
	waitSubscribers(t, h, 3)
	if s := openSSE(t, srv, q, bearer("greedy")); s.resp.StatusCode != http.StatusOK {
		t.Fatalf("after a disconnect: status %d, want the freed slot", s.resp.StatusCode)
	}
}
