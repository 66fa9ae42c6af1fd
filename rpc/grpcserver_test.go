package rpc

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
	"github.com/varplane/varplane/store/memory"
)

// These tests speak HTTP/2 frame by frame to the fan-out server, to check
// what a stock client cannot show: windows, resets, refused streams and
// trailers. rpc_test.go covers the same listener with a stock gRPC client.

type fastFixture struct {
	engine *varplane.Engine
	hub    *push.Hub
	srv    *Server
}

func startFast(t *testing.T, popts push.Options, tune func(*grpcOptions)) *fastFixture {
	t.Helper()
	e, h, srv := StartTestServer(t, popts, nil, tune)
	return &fastFixture{engine: e, hub: h, srv: srv}
}

// StartTestServer opens a Server on a free loopback port over an engine on
// a memory store, all closed when t ends; tune, when set, changes the
// fan-out server's limits first. Exported for the external tests.
func StartTestServer(t *testing.T, popts push.Options, auth Authorizer, tune func(*grpcOptions)) (*varplane.Engine, *push.Hub, *Server) {
	t.Helper()
	st := memory.New()
	// Room for the 16 MiB documents of the flow-control tests.
	e := varplane.NewEngine(st, varplane.Options{Limits: varplane.Limits{MaxBodyBytes: 32 << 20, MaxStringBytes: 32 << 20}})
	popts.Logger = slog.New(slog.DiscardHandler)
	h := push.New(e, popts)
	srv := NewServer("127.0.0.1:0", h, auth)
	if tune != nil {
		tune(&srv.opts)
	}
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		h.Close()
		e.Close()
		_ = st.Close()
	})
	return e, h, srv
}

func (f *fastFixture) activate(t *testing.T, scope varplane.Scope, doc string) varplane.Generation {
	t.Helper()
	return ActivateForTest(t, f.engine, scope, doc)
}

// ActivateForTest stores doc as a revision of scope and activates it,
// returning the new generation. Exported for the external tests.
func ActivateForTest(t *testing.T, e *varplane.Engine, scope varplane.Scope, doc string) varplane.Generation {
	t.Helper()
	ctx := context.Background()
	rev, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(doc)})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := e.Status(ctx, scope)
	res, err := e.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev.Revision, ExpectedGeneration: st.Generation})
	if err != nil {
		t.Fatal(err)
	}
	return res.Generation
}

// waitSubscribers waits until the hub counts n subscribers.
func (f *fastFixture) waitSubscribers(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.hub.Stats().Subscribers != n {
		if time.Now().After(deadline) {
			t.Fatalf("subscribers = %d, want %d", f.hub.Stats().Subscribers, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// h2client is a minimal HTTP/2 client over one connection.
type h2client struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
	next uint32
	// what read saw, per stream, for the waits to consume
	msgs  map[uint32][]byte // DATA bytes
	ended map[uint32]streamEnd
}

// streamEnd is how a stream ended: its final HEADERS, or a reset.
type streamEnd struct {
	trailers *http2.MetaHeadersFrame
	reset    http2.ErrCode
}

func dialH2(t *testing.T, addr string, settings ...http2.Setting) *h2client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &h2client{t: t, nc: nc, fr: http2.NewFramer(nc, nc), next: 1, msgs: map[uint32][]byte{}, ended: map[uint32]streamEnd{}}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// open starts a request on a new stream; body nil sends headers only.
func (c *h2client) open(path, contentType string, body []byte, extra ...hpack.HeaderField) uint32 {
	c.t.Helper()
	id := c.next
	c.next += 2
	c.hbuf.Reset()
	for _, hf := range append([]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: "test"},
		{Name: "content-type", Value: contentType}, {Name: "te", Value: "trailers"},
	}, extra...) {
		_ = c.henc.WriteField(hf)
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: body == nil}); err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		if err := c.fr.WriteData(id, true, body); err != nil {
			c.t.Fatal(err)
		}
	}
	return id
}

func (c *h2client) subscribe(req *v1.SubscribeRequest, extra ...hpack.HeaderField) uint32 {
	c.t.Helper()
	wire, err := proto.Marshal(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.open(subscribePath, "application/grpc", grpcMessage(wire), extra...)
}

// read returns the next frame that is not connection housekeeping
// (SETTINGS, PING acks, WINDOW_UPDATE), acknowledging SETTINGS.
func (c *h2client) read() http2.Frame {
	c.t.Helper()
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.fr.WriteSettingsAck()
			}
			continue
		case *http2.WindowUpdateFrame:
			continue
		case *http2.DataFrame:
			// Data is valid until the next ReadFrame: keep a copy.
			c.msgs[f.StreamID] = append(c.msgs[f.StreamID], f.Data()...)
			if f.StreamEnded() {
				c.ended[f.StreamID] = streamEnd{}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				c.ended[f.StreamID] = streamEnd{trailers: f}
			}
		case *http2.RSTStreamFrame:
			c.ended[f.StreamID] = streamEnd{reset: f.ErrCode}
		}
		return f
	}
}

// message pops one whole gRPC message of stream id from what was read.
func (c *h2client) message(id uint32) (*v1.SnapshotBatch, bool) {
	b := c.msgs[id]
	if len(b) < 5 || len(b) < 5+int(binary.BigEndian.Uint32(b[1:5])) {
		return nil, false
	}
	n := 5 + int(binary.BigEndian.Uint32(b[1:5]))
	m := new(v1.SnapshotBatch)
	if err := proto.Unmarshal(b[5:n], m); err != nil {
		c.t.Fatalf("stream %d: bad message: %v", id, err)
	}
	c.msgs[id] = b[n:]
	return m, true
}

// next reads until stream id has a whole message.
func (c *h2client) nextMessage(id uint32) *v1.SnapshotBatch {
	c.t.Helper()
	for {
		if m, ok := c.message(id); ok {
			return m
		}
		if e, ok := c.ended[id]; ok {
			if e.trailers != nil {
				c.t.Fatalf("stream %d ended (grpc-status %s %q) while a message was awaited", id, header(e.trailers, "grpc-status"), header(e.trailers, "grpc-message"))
			}
			c.t.Fatalf("stream %d was reset (%v) while a message was awaited", id, e.reset)
		}
		c.read()
	}
}

// ending reads until stream id ends and returns its last HEADERS frame (nil
// when it was reset, with the reset code).
func (c *h2client) ending(id uint32) (*http2.MetaHeadersFrame, http2.ErrCode) {
	c.t.Helper()
	for {
		if e, ok := c.ended[id]; ok {
			return e.trailers, e.reset
		}
		c.read()
	}
}

func header(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func TestFastSnapshotCommitAndTrailers(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	f.activate(t, "a.x", `{"on":true}`)
	c := dialH2(t, f.srv.ln.Addr().String())
	id := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	m := c.nextMessage(id)
	if !m.GetSnapshot() || len(m.GetHeads()) != 1 || m.GetHeads()[0].GetGeneration() != 1 {
		t.Fatalf("snapshot = %v", m)
	}
	g := f.activate(t, "a.x", `{"on":false}`)
	if m := c.nextMessage(id); m.GetSnapshot() || len(m.GetHeads()) != 1 || m.GetHeads()[0].GetGeneration() != uint64(g) {
		t.Fatalf("commit = %v", m)
	}
	// A server stop ends the stream with trailers (UNAVAILABLE) and GOAWAY.
	go func() { _ = f.srv.Close(context.Background()) }()
	end, code := c.ending(id)
	if end == nil {
		t.Fatalf("stream reset (%v) instead of trailers", code)
	}
	if header(end, "grpc-status") != strconv.Itoa(int(connect.CodeUnavailable)) || header(end, "varplane-code") != "store-unavailable" {
		t.Errorf("trailers = %v", end.Fields)
	}
	for {
		if ga, ok := c.read().(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != id {
				t.Errorf("GOAWAY %v last %d", ga.ErrCode, ga.LastStreamID)
			}
			break
		}
	}
}

func TestFastRejects(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	good, _ := proto.Marshal(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	compressed := grpcMessage(good)
	compressed[0] = 1
	tests := []struct {
		name        string
		path, ctype string
		body        []byte
		extra       []hpack.HeaderField
		status      string // :status
		grpcStatus  connect.Code
	}{
		{"unknown method", "/varplane.v1.PushService/Nope", "application/grpc", grpcMessage(good), nil, "200", connect.CodeUnimplemented},
		{"not gRPC", subscribePath, "application/json", []byte("{}"), nil, "415", 0},
		{"gRPC-Web", subscribePath, "application/grpc-web", grpcMessage(good), nil, "415", 0},
		{"JSON codec", subscribePath, "application/grpc+json", grpcMessage(good), nil, "200", connect.CodeUnimplemented},
		{"no message", subscribePath, "application/grpc", nil, nil, "200", connect.CodeInvalidArgument},
		{"two messages", subscribePath, "application/grpc", append(grpcMessage(good), grpcMessage(good)...), nil, "200", connect.CodeInvalidArgument},
		{"not protobuf", subscribePath, "application/grpc", grpcMessage([]byte{0xff, 0xff}), nil, "200", connect.CodeInvalidArgument},
		{"compressed message", subscribePath, "application/grpc", compressed, nil, "200", connect.CodeInvalidArgument},
		{"compressed request", subscribePath, "application/grpc", grpcMessage(good), []hpack.HeaderField{{Name: "grpc-encoding", Value: "gzip"}}, "200", connect.CodeUnimplemented},
		{"bad timeout", subscribePath, "application/grpc", grpcMessage(good), []hpack.HeaderField{{Name: "grpc-timeout", Value: "soon"}}, "200", connect.CodeInvalidArgument},
		{"bad filter", subscribePath, "application/grpc", grpcMessage(nil), nil, "200", connect.CodeInvalidArgument},
	}
	c := dialH2(t, f.srv.ln.Addr().String())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			id := c.open(tt.path, tt.ctype, tt.body, tt.extra...)
			var first *http2.MetaHeadersFrame
			for first == nil {
				if h, ok := c.read().(*http2.MetaHeadersFrame); ok && h.StreamID == id {
					first = h
				}
			}
			if got := first.PseudoValue("status"); got != tt.status {
				t.Fatalf(":status = %s, want %s", got, tt.status)
			}
			if tt.status != "200" {
				return
			}
			if !first.StreamEnded() {
				t.Fatal("an error answer must be trailers-only")
			}
			if got := header(first, "grpc-status"); got != strconv.Itoa(int(tt.grpcStatus)) {
				t.Errorf("grpc-status = %s (%s), want %d", got, header(first, "grpc-message"), tt.grpcStatus)
			}
		})
	}
	if n := f.hub.Stats().Subscribers; n != 0 {
		t.Errorf("%d subscribers left by rejected requests", n)
	}
}

func TestFastFlowControl(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	doc := `{"pad":"` + string(bytes.Repeat([]byte("x"), 40<<10)) + `"}`
	f.activate(t, "a.x", doc)
	// Every stream starts with a 10-byte window; the connection keeps 64 KiB.
	c := dialH2(t, f.srv.ln.Addr().String(), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	id := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	granted, got := 10, 0
	var msg *v1.SnapshotBatch
	for msg == nil {
		switch fr := c.read().(type) {
		case *http2.DataFrame:
			if fr.StreamID != id {
				continue
			}
			got += len(fr.Data())
			if got > granted {
				t.Fatalf("server sent %d bytes on a stream window of %d", got, granted)
			}
			if len(fr.Data()) > 16<<10 {
				t.Fatalf("DATA frame of %d bytes exceeds the 16 KiB frame size", len(fr.Data()))
			}
			if got == granted { // window spent: grant a little more
				inc := 1000 + granted/2
				granted += inc
				if err := c.fr.WriteWindowUpdate(id, uint32(inc)); err != nil {
					t.Fatal(err)
				}
			}
			msg, _ = c.message(id)
		}
	}
	if !msg.GetSnapshot() || len(msg.GetHeads()) != 1 || len(msg.GetHeads()[0].GetValues()) < 40<<10 {
		t.Fatalf("reassembled snapshot is wrong: %d heads", len(msg.GetHeads()))
	}
}

func TestFastConnectionWindow(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	f.activate(t, "a.x", `{"pad":"`+strings.Repeat("c", 100<<10)+`"}`)
	// Streams may take everything; the connection keeps its first 64 KiB.
	c := dialH2(t, f.srv.ln.Addr().String(), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	id := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	granted, got := 65535, 0
	var msg *v1.SnapshotBatch
	for msg == nil {
		if fr, ok := c.read().(*http2.DataFrame); ok && fr.StreamID == id {
			got += len(fr.Data())
			if got > granted {
				t.Fatalf("server sent %d bytes on a connection window of %d", got, granted)
			}
			if got == granted {
				granted += 20000
				if err := c.fr.WriteWindowUpdate(0, 20000); err != nil {
					t.Fatal(err)
				}
			}
			msg, _ = c.message(id)
		}
	}
	if len(msg.GetHeads()) != 1 || len(msg.GetHeads()[0].GetValues()) < 100<<10 {
		t.Fatalf("reassembled snapshot is wrong: %d heads", len(msg.GetHeads()))
	}
}

func TestFastStalledStreamDoesNotHoldOthers(t *testing.T) {
	f := startFast(t, push.Options{StallTimeout: 20 * time.Millisecond}, nil)
	f.activate(t, "a.x", `{"n":0}`)
	// Windows start at zero: a stream gets bytes only once granted.
	c := dialH2(t, f.srv.ln.Addr().String(), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	stalled := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	live := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	if err := c.fr.WriteWindowUpdate(live, 1<<30); err != nil {
		t.Fatal(err)
	}
	if m := c.nextMessage(live); !m.GetSnapshot() {
		t.Fatalf("live snapshot = %v", m)
	}
	var last varplane.Generation
	for i := 1; i <= 5; i++ {
		last = f.activate(t, "a.x", `{"n":`+strconv.Itoa(i)+`}`)
		if m := c.nextMessage(live); m.GetHeads()[0].GetGeneration() != uint64(last) {
			t.Fatalf("live stream got %v, want generation %d", m, last)
		}
		time.Sleep(10 * time.Millisecond) // let the stalled queue age past StallTimeout
	}
	if n := len(c.msgs[stalled]); n != 0 {
		t.Fatalf("stalled stream received %d bytes without a window", n)
	}
	// The hub gives up on the stalled subscriber; the server resets that
	// stream (its snapshot is half-sent) and the live one goes on.
	if _, code := c.ending(stalled); code != http2.ErrCodeCancel {
		t.Fatalf("stalled stream ended with %v, want RST_STREAM CANCEL", code)
	}
	if d := f.hub.Stats().Disconnects; d != 1 {
		t.Errorf("hub disconnects = %d, want 1", d)
	}
	g := f.activate(t, "a.x", `{"n":99}`)
	if m := c.nextMessage(live); m.GetHeads()[0].GetGeneration() != uint64(g) {
		t.Fatalf("live stream after the reset got %v", m)
	}
}

func TestFastResetAndCloseEndSubscriptions(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	c := dialH2(t, f.srv.ln.Addr().String())
	ids := []uint32{
		c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}}),
		c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.y"}}),
		c.subscribe(&v1.SubscribeRequest{Prefixes: []string{"a"}}),
	}
	for _, id := range ids {
		c.nextMessage(id)
	}
	f.waitSubscribers(t, 3)
	if err := c.fr.WriteRSTStream(ids[0], http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	f.waitSubscribers(t, 2)
	_ = c.nc.Close()
	f.waitSubscribers(t, 0)
}

func TestFastDeadline(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	c := dialH2(t, f.srv.ln.Addr().String())
	id := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}}, hpack.HeaderField{Name: "grpc-timeout", Value: "30m"})
	c.nextMessage(id)
	end, code := c.ending(id)
	if end == nil {
		t.Fatalf("reset %v, want trailers", code)
	}
	if got := header(end, "grpc-status"); got != strconv.Itoa(int(connect.CodeDeadlineExceeded)) {
		t.Errorf("grpc-status = %s, want DEADLINE_EXCEEDED", got)
	}
	f.waitSubscribers(t, 0)
}

func TestFastHeartbeatAndPing(t *testing.T) {
	f := startFast(t, push.Options{}, func(o *grpcOptions) { o.heartbeat = 20 * time.Millisecond })
	c := dialH2(t, f.srv.ln.Addr().String())
	id := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	if m := c.nextMessage(id); !m.GetSnapshot() {
		t.Fatalf("first = %v", m)
	}
	if m := c.nextMessage(id); m.GetSnapshot() || len(m.GetHeads())+len(m.GetNoHead()) != 0 {
		t.Fatalf("heartbeat = %v, want an empty batch", m)
	}
	data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := c.fr.WritePing(false, data); err != nil {
		t.Fatal(err)
	}
	for {
		if p, ok := c.read().(*http2.PingFrame); ok {
			if !p.IsAck() || p.Data != data {
				t.Fatalf("ping answer %v %v", p.IsAck(), p.Data)
			}
			return
		}
	}
}

func TestFastStreamLimit(t *testing.T) {
	f := startFast(t, push.Options{}, func(o *grpcOptions) { o.maxStreams = 2 })
	c := dialH2(t, f.srv.ln.Addr().String())
	a := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	b := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	c.nextMessage(a)
	c.nextMessage(b)
	third := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	if end, code := c.ending(third); end != nil || code != http2.ErrCodeRefusedStream {
		t.Fatalf("third stream: %v %v, want REFUSED_STREAM", end, code)
	}
}

func TestFastGzipLargeMessages(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	c := dialH2(t, f.srv.ln.Addr().String())
	gz := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.big"}}, hpack.HeaderField{Name: "grpc-accept-encoding", Value: "identity, gzip"})
	plain := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.big"}})
	c.nextMessage(gz) // small snapshots go uncompressed
	c.nextMessage(plain)
	g := f.activate(t, "a.big", `{"pad":"`+strings.Repeat("q", 40<<10)+`"}`)
	// The stream that accepts gzip gets the commit compressed (flag 1); the
	// other one plain.
	for {
		if b := c.msgs[gz]; len(b) >= 5 && len(b) >= 5+int(binary.BigEndian.Uint32(b[1:5])) {
			break
		}
		c.read()
	}
	b := c.msgs[gz]
	n := 5 + int(binary.BigEndian.Uint32(b[1:5]))
	if b[0] != 1 || n > 8<<10 {
		t.Fatalf("flag %d, %d bytes: want a compressed message well under the 40 KiB document", b[0], n)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b[5:n]))
	if err != nil {
		t.Fatal(err)
	}
	wire, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	m := new(v1.SnapshotBatch)
	if err := proto.Unmarshal(wire, m); err != nil || m.GetHeads()[0].GetGeneration() != uint64(g) {
		t.Fatalf("decompressed commit: %v %v", m, err)
	}
	if m := c.nextMessage(plain); m.GetHeads()[0].GetGeneration() != uint64(g) {
		t.Fatalf("plain stream got %v", m)
	}
}

func TestFastResetLoopIsBounded(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	slow := varplane.AuthorizerFunc(func(ctx context.Context, _ varplane.Access) (varplane.Identity, error) {
		calls.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return varplane.Anonymous, nil
	})
	_, h, srv := StartTestServer(t, push.Options{}, slow, func(o *grpcOptions) { o.maxStreams = 2 })
	c := dialH2(t, srv.ln.Addr().String())
	var ids []uint32
	for i := 0; i < 6; i++ {
		id := c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.x"}})
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Every stream was reset at once, yet two are still subscribing (held
	// by the authorizer): the rest are refused instead of started.
	refused := 0
	for _, id := range ids[2:] {
		if _, code := c.ending(id); code == http2.ErrCodeRefusedStream {
			refused++
		}
	}
	if refused != 4 || calls.Load() > 2 {
		t.Fatalf("%d of 4 streams refused, %d subscriptions started; want 4 and at most 2", refused, calls.Load())
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for h.Stats().Subscribers != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := h.Stats().Subscribers; n != 0 {
		t.Fatalf("%d subscriptions outlive their reset streams", n)
	}
}

func TestFastControlFloodEndsConnection(t *testing.T) {
	f := startFast(t, push.Options{}, func(o *grpcOptions) { o.maxQueuedControl = 16 })
	f.activate(t, "a.big", `{"pad":"`+strings.Repeat("z", 16<<20)+`"}`)
	// Open every window, ask for 16 MiB and read nothing: the server's
	// writer blocks on a full socket, and the acks of the pings that follow
	// pile up behind it.
	c := dialH2(t, f.srv.ln.Addr().String(), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	if err := c.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	c.subscribe(&v1.SubscribeRequest{Keys: []string{"a.big"}})
	f.waitSubscribers(t, 1)
	for i := 0; i < 10000; i++ {
		_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := c.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server closed the connection
		}
	}
	f.waitSubscribers(t, 0)
}

func TestHTTP1ConnectOnTheSameListener(t *testing.T) {
	f := startFast(t, push.Options{}, nil)
	f.activate(t, "a.x", `{"on":true}`)
	// The Connect protocol over HTTP/1.1 goes to the Connect handler.
	client := varplanev1connect.NewPushServiceClient(http.DefaultClient, f.srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := client.Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"a.x"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || len(stream.Msg().GetHeads()) != 1 {
		t.Fatalf("first message: %v %v", stream.Msg(), stream.Err())
	}
}

func TestParseTimeout(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1S", time.Second, true},
		{"250m", 250 * time.Millisecond, true},
		{"99999999H", 1<<63 - 1, true},
		{"5u", 5 * time.Microsecond, true},
		{"0n", 0, true},
		{"S", 0, false},
		{"123456789S", 0, false},
		{"-1S", 0, false},
		{"1s", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseTimeout(tt.in)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseTimeout(f *testing.F) {
	for _, s := range []string{"1S", "250m", "99999999H", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := parseTimeout(s); ok && d < 0 {
			t.Fatalf("parseTimeout(%q) = %v", s, d)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	good, _ := proto.Marshal(&v1.SubscribeRequest{Keys: []string{"a.x"}, HeldGenerations: map[string]uint64{"a.x": 3}})
	f.Add(grpcMessage(good))
	f.Add([]byte{0, 0, 0, 0, 1})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeRequest(body)
		if err != nil {
			return
		}
		// What decodes was one whole message: re-encoding gives one too.
		wire, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeRequest(grpcMessage(wire)); err != nil {
			t.Fatalf("re-encoded request does not decode: %v", err)
		}
	})
}

// FuzzConn feeds arbitrary bytes after the client preface to a connection
// and checks that the server neither panics nor hangs: it answers or
// closes, and once the peer is gone the connection ends.
func FuzzConn(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	_ = fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: subscribePath}, {Name: "content-type", Value: "application/grpc"}} {
		_ = enc.WriteField(hf)
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	good, _ := proto.Marshal(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	_ = fr.WriteData(1, true, grpcMessage(good))
	_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	_ = fr.WritePing(false, [8]byte{})
	_ = fr.WriteWindowUpdate(0, 1)
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, 1, 5, 0, 0, 0, 3})
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	hub := push.New(e, push.Options{Logger: slog.New(slog.DiscardHandler)})
	f.Cleanup(func() { hub.Close(); e.Close(); _ = st.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		g := newGRPCServer(context.Background(), hub, nil, defaultGRPCOptions())
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			g.serve(server, bufio.NewReader(server))
		}()
		go func() { // drain what the server writes
			buf := make([]byte, 4096)
			for {
				if _, err := client.Read(buf); err != nil {
					return
				}
			}
		}()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(append([]byte(http2.ClientPreface), data...))
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end after its peer closed")
		}
		if n := hub.Stats().Subscribers; n != 0 {
			// subscriptions end with their connection (asynchronously for
			// streams still subscribing)
			deadline := time.Now().Add(5 * time.Second)
			for hub.Stats().Subscribers != 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := hub.Stats().Subscribers; n != 0 {
				t.Fatalf("%d subscriptions outlive their connection", n)
			}
		}
	})
}
