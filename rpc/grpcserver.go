package rpc

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
)

// The fan-out gRPC server.
//
// The dedicated listener serves exactly one method, a server stream whose
// messages are, after the snapshot, the same bytes for every subscriber of a
// scope. A general HTTP/2 server pays per stream and per message for things
// this method does not need (a handler goroutine and a channel hand-off per
// message, a write scheduler walking every stream per frame, a flush per
// stream), which made a commit cost ~17 µs of server CPU per subscriber. So
// HTTP/2 connections on that listener are served here instead: one reader
// and one writer goroutine per connection; the hub notifies the writer
// (push.SubscribeOptions.Notify) of every stream that has something; the
// writer appends one DATA frame per ready stream, the gRPC message itself
// encoded once per commit and shared, and flushes the connection once.
// Framing and HPACK come from golang.org/x/net/http2; flow control,
// stream states, trailers and shutdown are implemented here (RFC 9113 and
// the gRPC over HTTP/2 protocol).

// grpcOptions are the limits of the fan-out server.
type grpcOptions struct {
	heartbeat     time.Duration // empty batch on an idle stream
	writeTimeout  time.Duration // a flush that does not finish in this long closes the connection
	idleTimeout   time.Duration // a connection without streams for this long is closed
	pingAfter     time.Duration // silence from the peer before the server pings it
	pingTimeout   time.Duration // further silence after the ping before the connection is closed
	maxStreams    uint32        // concurrent streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS)
	maxRequest    int           // bytes of request body
	maxHeaderList uint32        // bytes of decoded request headers
	// maxQueuedControl bounds the frames the reader has queued for the
	// writer (ping and settings acks, window updates, resets): a peer that
	// floods them while it does not read would otherwise grow the queue
	// without bound. Past it the connection ends with ENHANCE_YOUR_CALM.
	maxQueuedControl int
}

func defaultGRPCOptions() grpcOptions {
	return grpcOptions{
		heartbeat:     DefaultHeartbeat,
		writeTimeout:  30 * time.Second,
		idleTimeout:   2 * time.Minute,
		pingAfter:     30 * time.Second,
		pingTimeout:   15 * time.Second,
		maxStreams:    1000,
		maxRequest:    MaxRequestBytes,
		maxHeaderList: 16 << 10,

		maxQueuedControl: 10000,
	}
}

const (
	subscribePath = "/" + varplanev1connect.PushServiceName + "/Subscribe"
	// receive windows advertised to the client: a whole request fits in the
	// stream window, so the server never has to open a stream's window.
	recvStreamWindow = 1<<20 + 64<<10
	recvConnWindow   = 4 << 20
	defaultMaxFrame  = 16 << 10
)

// notGRPC is the grpcStatus code of a request that is not gRPC at all: it is
// answered with HTTP 415 and a plain-text hint instead of a gRPC status.
const notGRPC = -415

// grpcStatus is how a stream ends: a gRPC status, a message and the
// varplane error code carried as metadata.
type grpcStatus struct {
	code    int
	message string
	vpCode  varplane.Code
}

// statusOf maps an error to the status a stream ends with, through the same
// table Connect uses on the main port (CodeOf).
func statusOf(err error) *grpcStatus {
	code := varplane.ErrorCode(err)
	return &grpcStatus{code: int(CodeOf(code)), message: varplane.ErrorMessage(err), vpCode: code}
}

// grpcServer holds the connections served by the fan-out path.
type grpcServer struct {
	hub       *push.Hub
	authorize Authorizer
	opts      grpcOptions
	ctx       context.Context // ends with the server: every stream's context

	mu       sync.Mutex
	conns    map[*h2conn]struct{}
	stopping bool           // shutdown has begun: no connection is added
	wg       sync.WaitGroup // one per connection in conns; Server.Close waits on it
}

func newGRPCServer(ctx context.Context, hub *push.Hub, authorize Authorizer, opts grpcOptions) *grpcServer {
	return &grpcServer{hub: hub, authorize: authorize, opts: opts, ctx: ctx, conns: map[*h2conn]struct{}{}}
}

// serve runs one connection whose client preface is buffered in br; it
// returns when the connection is closed.
func (s *grpcServer) serve(nc net.Conn, br *bufio.Reader) {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &h2conn{
		srv: s, nc: nc, br: br, ctx: ctx, cancel: cancel,
		bw:         bufio.NewWriterSize(nc, 64<<10),
		streams:    map[uint32]*h2stream{},
		reqs:       map[uint32]*requestState{},
		idleSince:  time.Now(),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		connWindow: 65535, initialWindow: 65535, maxFrame: defaultMaxFrame,
	}
	c.fr = http2.NewFramer(c.bw, br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = s.opts.maxHeaderList
	c.fr.SetMaxReadFrameSize(defaultMaxFrame)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.lastRead.Store(time.Now().UnixNano())
	s.mu.Lock()
	if s.stopping || s.ctx.Err() != nil {
		s.mu.Unlock()
		_ = nc.Close()
		cancel()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	go c.writeLoop()
	c.readLoop()
	c.close()
	<-c.done
}

// shutdown asks every connection to end its streams as unavailable, send
// GOAWAY and close, and refuses connections from then on, so that wg only
// counts down after it.
func (s *grpcServer) shutdown() {
	s.mu.Lock()
	s.stopping = true
	conns := make([]*h2conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
}

func (s *grpcServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
}

// h2conn is one HTTP/2 connection. The reader goroutine owns the read side
// of the framer; the writer goroutine owns the write side, the HPACK
// encoder, the send windows and every stream's send state. They meet under
// mu: the stream table, the ready list and the control queue.
type h2conn struct {
	srv    *grpcServer
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	fr     *http2.Framer
	henc   *hpack.Encoder
	hbuf   bytes.Buffer
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{} // closed when the writer has exited

	lastRead atomic.Int64 // unix nanos of the last frame read

	mu        sync.Mutex
	streams   map[uint32]*h2stream
	reqs      map[uint32]*requestState // streams whose request is still arriving
	starting  int                      // streams subscribing (startStream goroutines)
	ready     []*h2stream
	ctrl      []ctrlEvent
	closed    bool
	goingAway bool
	lastID    uint32 // highest client stream id seen
	idleSince time.Time

	// writer-owned
	connWindow    int64
	initialWindow int64
	maxFrame      int
	pingSent      bool
	goAwaySent    bool
}

// h2stream is one Subscribe call.
type h2stream struct {
	id   uint32
	gzip bool // the client accepts gzip-compressed messages

	// under h2conn.mu
	deadline *time.Timer // grpc-timeout
	queued   bool
	sub      *push.Subscription
	end      *grpcStatus // set to end the stream with this status
	reset    bool        // the client reset the stream, or the connection ended

	// writer-owned
	window      int64
	pending     []byte // unsent part of the message in flight
	headersSent bool
	finished    bool
	lastSend    time.Time
}

// stopDeadline stops the grpc-timeout timer; h2conn.mu held.
func (st *h2stream) stopDeadline() {
	if st.deadline != nil {
		st.deadline.Stop()
	}
}

type ctrlKind uint8

const (
	ctrlSettingsAck ctrlKind = iota
	ctrlPingAck
	ctrlWindow        // peer opened a send window (stream 0: the connection)
	ctrlInitialWindow // peer changed SETTINGS_INITIAL_WINDOW_SIZE
	ctrlMaxFrame      // peer changed SETTINGS_MAX_FRAME_SIZE
	ctrlTableSize     // peer changed SETTINGS_HEADER_TABLE_SIZE
	ctrlRecvWindow    // give the peer back this much connection receive window
	ctrlReset         // send RST_STREAM
	ctrlPingReceived  // a PING ack: the peer is alive
	ctrlGoAway        // fatal connection error: GOAWAY with this code, then close
	ctrlShutdown      // the server stops: end every stream, GOAWAY NO_ERROR
)

type ctrlEvent struct {
	kind   ctrlKind
	stream uint32
	n      uint32
	data   [8]byte
}

// push queues a control event for the writer.
func (c *h2conn) push(ev ctrlEvent) {
	c.mu.Lock()
	c.ctrl = append(c.ctrl, ev)
	c.mu.Unlock()
	c.signal()
}

func (c *h2conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// markReady puts st on the ready list: the hub notified it, or its window
// opened, or it is to end.
func (c *h2conn) markReady(st *h2stream) {
	c.mu.Lock()
	if !st.queued {
		st.queued = true
		c.ready = append(c.ready, st)
	}
	c.mu.Unlock()
	c.signal()
}

func (c *h2conn) goAway() { c.push(ctrlEvent{kind: ctrlShutdown}) }

// close tears the connection down: no frame is read or written after it.
func (c *h2conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	var subs []*push.Subscription
	for _, st := range c.streams {
		st.reset = true
		if st.sub != nil {
			subs = append(subs, st.sub)
		}
		st.stopDeadline()
	}
	c.streams = nil
	c.mu.Unlock()
	c.cancel()
	_ = c.nc.Close()
	c.signal()
	for _, sub := range subs {
		sub.Close() // its notification finds the connection closed
	}
}

// readLoop reads frames until the connection fails or closes.
func (c *h2conn) readLoop() {
	// The client preface and its SETTINGS must arrive promptly.
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	first := true
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var ce http2.ConnectionError
			var se http2.StreamError
			switch {
			case errors.As(err, &se):
				c.push(ctrlEvent{kind: ctrlReset, stream: se.StreamID, n: uint32(se.Code)})
				c.resetStream(se.StreamID)
				continue
			case errors.As(err, &ce):
				c.fail(http2.ErrCode(ce))
			case errors.Is(err, http2.ErrFrameTooLarge):
				c.fail(http2.ErrCodeFrameSize)
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if first {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				c.fail(http2.ErrCodeProtocol)
				return
			}
			first = false
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		if !c.handle(f) {
			return
		}
		c.mu.Lock()
		flooded := len(c.ctrl) > c.srv.opts.maxQueuedControl
		c.mu.Unlock()
		if flooded {
			c.fail(http2.ErrCodeEnhanceYourCalm)
			return
		}
	}
}

// fail ends the connection with a connection error.
func (c *h2conn) fail(code http2.ErrCode) {
	c.push(ctrlEvent{kind: ctrlGoAway, n: uint32(code)})
	// Give the writer a moment to send GOAWAY; the deferred close follows.
	select {
	case <-c.done:
	case <-time.After(time.Second):
	}
}

// handle processes one frame; false ends the connection.
func (c *h2conn) handle(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return true
		}
		bad := false
		_ = f.ForeachSetting(func(s http2.Setting) error {
			if s.Valid() != nil {
				bad = true
				return nil
			}
			switch s.ID {
			case http2.SettingInitialWindowSize:
				c.mu.Lock()
				c.ctrl = append(c.ctrl, ctrlEvent{kind: ctrlInitialWindow, n: s.Val})
				c.mu.Unlock()
			case http2.SettingMaxFrameSize:
				c.mu.Lock()
				c.ctrl = append(c.ctrl, ctrlEvent{kind: ctrlMaxFrame, n: s.Val})
				c.mu.Unlock()
			case http2.SettingHeaderTableSize:
				c.mu.Lock()
				c.ctrl = append(c.ctrl, ctrlEvent{kind: ctrlTableSize, n: s.Val})
				c.mu.Unlock()
			}
			return nil
		})
		if bad {
			c.fail(http2.ErrCodeProtocol)
			return false
		}
		c.push(ctrlEvent{kind: ctrlSettingsAck})
	case *http2.PingFrame:
		if f.IsAck() {
			c.push(ctrlEvent{kind: ctrlPingReceived})
			return true
		}
		c.push(ctrlEvent{kind: ctrlPingAck, data: f.Data})
	case *http2.WindowUpdateFrame:
		if f.Increment == 0 {
			if f.StreamID == 0 {
				c.fail(http2.ErrCodeProtocol)
				return false
			}
			c.push(ctrlEvent{kind: ctrlReset, stream: f.StreamID, n: uint32(http2.ErrCodeProtocol)})
			c.resetStream(f.StreamID)
			return true
		}
		c.push(ctrlEvent{kind: ctrlWindow, stream: f.StreamID, n: f.Increment})
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.RSTStreamFrame:
		c.resetStream(f.StreamID)
	case *http2.GoAwayFrame:
		// The client opens no more streams; the open ones go on.
	case *http2.PushPromiseFrame:
		c.fail(http2.ErrCodeProtocol)
		return false
	}
	return true
}

// resetStream forgets a stream the client reset (or that failed) and ends
// its subscription.
func (c *h2conn) resetStream(id uint32) {
	c.mu.Lock()
	st := c.streams[id]
	var sub *push.Subscription
	if st != nil {
		delete(c.streams, id)
		delete(c.reqs, id)
		st.reset = true
		sub = st.sub
		st.stopDeadline()
		c.noteIdle()
	}
	c.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
}

// noteIdle records when the connection lost its last stream; c.mu held.
func (c *h2conn) noteIdle() {
	if len(c.streams) == 0 {
		c.idleSince = time.Now()
	}
}

func (c *h2conn) onHeaders(f *http2.MetaHeadersFrame) bool {
	id := f.StreamID
	c.mu.Lock()
	if id%2 == 0 || id <= c.lastID {
		known := c.streams[id] != nil
		c.mu.Unlock()
		if known { // trailers from the client: a Subscribe request has none
			c.push(ctrlEvent{kind: ctrlReset, stream: id, n: uint32(http2.ErrCodeProtocol)})
			c.resetStream(id)
			return true
		}
		c.fail(http2.ErrCodeProtocol)
		return false
	}
	c.lastID = id
	// Streams still subscribing count too, reset or not: opening and
	// resetting streams in a loop must not start subscriptions without
	// bound.
	if c.goingAway || c.closed || uint32(len(c.streams)) >= c.srv.opts.maxStreams || uint32(c.starting) >= c.srv.opts.maxStreams {
		c.mu.Unlock()
		c.push(ctrlEvent{kind: ctrlReset, stream: id, n: uint32(http2.ErrCodeRefusedStream)})
		return true
	}
	st := &h2stream{id: id}
	c.streams[id] = st
	c.mu.Unlock()

	if f.Truncated {
		c.endStream(st, &grpcStatus{code: int(connect.CodeResourceExhausted), message: "request headers too large"})
		return true
	}
	method, path := f.PseudoValue("method"), f.PseudoValue("path")
	var contentType, auth, timeout, acceptEnc, reqEnc string
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "content-type":
			contentType = hf.Value
		case "authorization":
			auth = hf.Value
		case "grpc-timeout":
			timeout = hf.Value
		case "grpc-accept-encoding":
			acceptEnc = hf.Value
		case "grpc-encoding":
			reqEnc = hf.Value
		}
	}
	switch {
	case method != "POST":
		c.endStream(st, &grpcStatus{code: int(connect.CodeUnimplemented), message: "gRPC requests use POST"})
		return true
	case contentType != "application/grpc" && contentType != "application/grpc+proto":
		msg := "this listener serves gRPC (application/grpc); Connect and gRPC-Web are served on the main port"
		if !strings.HasPrefix(contentType, "application/grpc") || strings.HasPrefix(contentType, "application/grpc-web") {
			c.endStream(st, &grpcStatus{code: notGRPC, message: msg})
		} else {
			c.endStream(st, &grpcStatus{code: int(connect.CodeUnimplemented), message: "only the proto codec is served"})
		}
		return true
	case path != subscribePath:
		c.endStream(st, &grpcStatus{code: int(connect.CodeUnimplemented), message: "unknown method " + path})
		return true
	case reqEnc != "" && reqEnc != "identity":
		c.endStream(st, &grpcStatus{code: int(connect.CodeUnimplemented), message: "compressed requests are not accepted"})
		return true
	}
	for _, e := range strings.Split(acceptEnc, ",") {
		if strings.TrimSpace(e) == "gzip" {
			st.gzip = true
		}
	}
	if timeout != "" {
		d, ok := parseTimeout(timeout)
		if !ok {
			c.endStream(st, &grpcStatus{code: int(connect.CodeInvalidArgument), message: "malformed grpc-timeout"})
			return true
		}
		t := time.AfterFunc(d, func() {
			c.endStream(st, &grpcStatus{code: int(connect.CodeDeadlineExceeded), message: "deadline exceeded"})
		})
		c.mu.Lock()
		st.deadline = t
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.reqs[id] = &requestState{st: st, auth: auth}
	c.mu.Unlock()
	if f.StreamEnded() {
		c.startStream(st)
	}
	return true
}

func (c *h2conn) onData(f *http2.DataFrame) bool {
	if n := f.Length; n > 0 {
		c.push(ctrlEvent{kind: ctrlRecvWindow, n: n})
	}
	c.mu.Lock()
	rs := c.reqs[f.StreamID]
	c.mu.Unlock()
	if rs == nil {
		c.mu.Lock()
		answered := f.StreamID%2 == 1 && f.StreamID <= c.lastID
		c.mu.Unlock()
		if answered { // a stream already answered or reset: the rest is moot
			return true
		}
		c.fail(http2.ErrCodeProtocol) // DATA on a stream never opened
		return false
	}
	if len(rs.body)+len(f.Data()) > c.srv.opts.maxRequest+5 {
		c.mu.Lock()
		delete(c.reqs, f.StreamID)
		c.mu.Unlock()
		c.endStream(rs.st, &grpcStatus{code: int(connect.CodeResourceExhausted), message: "request too large"})
		return true
	}
	rs.body = append(rs.body, f.Data()...)
	if f.StreamEnded() {
		c.startStream(rs.st)
	}
	return true
}

// requestState is a stream's request while its body arrives.
type requestState struct {
	st   *h2stream
	body []byte
	auth string
}

// startStream decodes the request and subscribes, off the reader goroutine:
// authorizing and reading the snapshot may wait on the store.
func (c *h2conn) startStream(st *h2stream) {
	c.mu.Lock()
	rs := c.reqs[st.id]
	delete(c.reqs, st.id)
	c.mu.Unlock()
	if rs == nil {
		return
	}
	c.mu.Lock()
	c.starting++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.starting--
			c.mu.Unlock()
		}()
		msg, err := decodeRequest(rs.body)
		if err != nil {
			c.endStream(st, &grpcStatus{code: int(connect.CodeInvalidArgument), message: err.Error()})
			return
		}
		sub, err := subscribe(c.ctx, c.srv.hub, c.srv.authorize, msg, wire.Bearer(rs.auth), push.SubscribeOptions{Notify: func() { c.markReady(st) }})
		if err != nil {
			c.endStream(st, statusOf(err))
			return
		}
		c.mu.Lock()
		gone := st.reset || st.end != nil
		if !gone {
			st.sub = sub
		}
		c.mu.Unlock()
		if gone {
			sub.Close()
			return
		}
		c.markReady(st)
	}()
}

// decodeRequest reads the one gRPC message of a request body.
func decodeRequest(body []byte) (*v1.SubscribeRequest, error) {
	if len(body) < 5 {
		return nil, errors.New("the request carries no message")
	}
	if body[0] != 0 {
		return nil, errors.New("compressed requests are not accepted")
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(n) != uint64(len(body)-5) {
		return nil, errors.New("the request must carry exactly one whole message")
	}
	msg := new(v1.SubscribeRequest)
	if err := proto.Unmarshal(body[5:], msg); err != nil {
		return nil, fmt.Errorf("malformed request message: %v", err)
	}
	return msg, nil
}

// parseTimeout reads a grpc-timeout value: at most 8 digits and a unit.
func parseTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	unit := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second, 'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}[v[len(v)-1]]
	if unit == 0 {
		return 0, false
	}
	if n > int64((1<<63-1)/unit) {
		return 1<<63 - 1, true
	}
	return time.Duration(n) * unit, true
}

// endStream asks the writer to end st with status.
func (c *h2conn) endStream(st *h2stream, status *grpcStatus) {
	c.mu.Lock()
	if st.end == nil && !st.reset {
		st.end = status
	}
	c.mu.Unlock()
	c.markReady(st)
}

// writeLoop is the writer goroutine.
func (c *h2conn) writeLoop() {
	defer close(c.done)
	defer c.close()
	// Server preface: our settings, and a larger connection receive window.
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.srv.opts.maxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvStreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.srv.opts.maxHeaderList},
	)
	_ = c.fr.WriteWindowUpdate(0, recvConnWindow-65535)
	if !c.flush() {
		return
	}
	// Heartbeats, pings and the idle check are due to the second; a
	// shorter heartbeat (tests) ticks faster.
	tick := time.NewTicker(min(time.Second, max(c.srv.opts.heartbeat/2, time.Millisecond)))
	defer tick.Stop()
	var ready []*h2stream
	var ctrl []ctrlEvent
	for {
		select {
		case <-c.wake:
		case <-c.ctx.Done():
			// The server stops (or the connection closed, and these writes
			// fail harmlessly): end the streams as a shutdown does.
			c.apply(&ctrlEvent{kind: ctrlShutdown}, time.Now())
			c.flush()
			return
		case <-tick.C:
			if !c.onTick() {
				return
			}
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		ready, c.ready = c.ready, ready[:0]
		ctrl, c.ctrl = c.ctrl, ctrl[:0]
		for _, st := range ready {
			st.queued = false
		}
		c.mu.Unlock()
		now := time.Now()
		for i := range ctrl {
			if !c.apply(&ctrl[i], now) {
				c.flush()
				return
			}
		}
		for _, st := range ready {
			c.serveStream(st, now)
		}
		clear(ready)
		if !c.flush() {
			return
		}
	}
}

// flush writes out what the loop produced, bounded by the write timeout.
func (c *h2conn) flush() bool {
	if c.bw.Buffered() == 0 {
		return true
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.writeTimeout))
	return c.bw.Flush() == nil
}

// apply carries out one control event; false ends the connection.
func (c *h2conn) apply(ev *ctrlEvent, now time.Time) bool {
	switch ev.kind {
	case ctrlSettingsAck:
		_ = c.fr.WriteSettingsAck()
	case ctrlPingAck:
		_ = c.fr.WritePing(true, ev.data)
	case ctrlPingReceived:
		c.pingSent = false
	case ctrlRecvWindow:
		_ = c.fr.WriteWindowUpdate(0, ev.n)
	case ctrlReset:
		_ = c.fr.WriteRSTStream(ev.stream, http2.ErrCode(ev.n))
	case ctrlTableSize:
		c.henc.SetMaxDynamicTableSizeLimit(ev.n)
	case ctrlMaxFrame:
		c.maxFrame = int(ev.n)
	case ctrlInitialWindow:
		delta := int64(ev.n) - c.initialWindow
		c.initialWindow = int64(ev.n)
		// A stream's window starts when its headers go out (writeHeaders
		// adds the initial size then); only those already started move.
		for _, st := range c.streamList() {
			if !st.headersSent {
				continue
			}
			st.window += delta
			if delta > 0 && len(st.pending) > 0 {
				c.markReady(st)
			}
		}
	case ctrlWindow:
		if ev.stream == 0 {
			// sendPending stops only at a window of zero, so streams wait
			// on the connection's window only when it was spent; the walk
			// is skipped on the frequent updates that arrive before.
			wasSpent := c.connWindow <= 0
			c.connWindow += int64(ev.n)
			if c.connWindow > 1<<31-1 {
				c.writeGoAway(http2.ErrCodeFlowControl)
				return false
			}
			if !wasSpent {
				return true
			}
			for _, st := range c.streamList() {
				if len(st.pending) > 0 {
					c.markReady(st)
				}
			}
			return true
		}
		c.mu.Lock()
		st := c.streams[ev.stream]
		c.mu.Unlock()
		if st == nil {
			return true
		}
		st.window += int64(ev.n)
		if st.window > 1<<31-1 {
			_ = c.fr.WriteRSTStream(st.id, http2.ErrCodeFlowControl)
			c.resetStream(st.id)
			return true
		}
		if len(st.pending) > 0 {
			c.markReady(st)
		}
	case ctrlGoAway:
		c.writeGoAway(http2.ErrCode(ev.n))
		return false
	case ctrlShutdown:
		c.mu.Lock()
		c.goingAway = true
		c.mu.Unlock()
		for _, st := range c.streamList() {
			c.finish(st, &grpcStatus{code: int(connect.CodeUnavailable), message: "the server is shutting down", vpCode: varplane.CodeStoreUnavailable}, now)
		}
		c.writeGoAway(http2.ErrCodeNo)
		return false
	}
	return true
}

func (c *h2conn) writeGoAway(code http2.ErrCode) {
	if c.goAwaySent {
		return
	}
	c.goAwaySent = true
	c.mu.Lock()
	last := c.lastID
	c.mu.Unlock()
	_ = c.fr.WriteGoAway(last, code, nil)
}

// streamList returns the open streams.
func (c *h2conn) streamList() []*h2stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*h2stream, 0, len(c.streams))
	for _, st := range c.streams {
		out = append(out, st)
	}
	return out
}

// onTick sends heartbeats on idle streams, pings a silent peer and closes
// an idle or dead connection; false ends the connection.
func (c *h2conn) onTick() bool {
	now := time.Now()
	silent := now.Sub(time.Unix(0, c.lastRead.Load()))
	switch {
	case c.pingSent && silent > c.srv.opts.pingAfter+c.srv.opts.pingTimeout:
		return false // the peer answers nothing, not even a ping
	case !c.pingSent && silent > c.srv.opts.pingAfter:
		c.pingSent = true
		_ = c.fr.WritePing(false, [8]byte{'v', 'a', 'r', 'p', 'l', 'a', 'n', 'e'})
	}
	c.mu.Lock()
	idle := len(c.streams) == 0 && !c.idleSince.IsZero() && now.Sub(c.idleSince) > c.srv.opts.idleTimeout
	c.mu.Unlock()
	if idle {
		c.writeGoAway(http2.ErrCodeNo)
		c.flush()
		return false
	}
	for _, st := range c.streamList() {
		if st.headersSent && len(st.pending) == 0 && !st.finished && now.Sub(st.lastSend) >= c.srv.opts.heartbeat {
			st.pending = emptyBatch
			c.sendPending(st, now)
		}
	}
	return c.flush()
}

// emptyBatch is the gRPC message of an empty SnapshotBatch: the heartbeat.
var emptyBatch = []byte{0, 0, 0, 0, 0}

// serveStream moves one ready stream forward: its end, the rest of a
// message the windows held back, or its next batch.
func (c *h2conn) serveStream(st *h2stream, now time.Time) {
	c.mu.Lock()
	reset, end, sub := st.reset, st.end, st.sub
	c.mu.Unlock()
	if reset || st.finished {
		return
	}
	if end != nil {
		c.finish(st, end, now)
		return
	}
	if sub == nil {
		return // still subscribing; it is marked ready once it has
	}
	if len(st.pending) > 0 {
		select {
		case <-sub.Done(): // the hub gave up on it while its window was shut
			c.finish(st, &grpcStatus{code: int(connect.CodeUnavailable), message: "subscription ended: " + push.Reason(sub.Err()), vpCode: varplane.CodeStoreUnavailable}, now)
		default:
			c.sendPending(st, now)
		}
		return
	}
	b, ok, err := sub.TryNext(c.ctx)
	if err != nil {
		if e := sub.Err(); e != nil {
			if errors.Is(e, push.ErrUnsubscribed) {
				return
			}
			c.finish(st, &grpcStatus{code: int(connect.CodeUnavailable), message: "subscription ended: " + push.Reason(e), vpCode: varplane.CodeStoreUnavailable}, now)
			return
		}
		if c.ctx.Err() != nil {
			return
		}
		c.finish(st, statusOf(err), now)
		return
	}
	if !ok {
		return
	}
	msg, err := c.message(st, b)
	if err != nil {
		// Every field is built by this package from validated input, so
		// this is a bug; the stream ends visibly rather than skip a batch.
		c.finish(st, &grpcStatus{code: int(connect.CodeInternal), message: "cannot encode the batch", vpCode: varplane.CodeInternal}, now)
		return
	}
	st.pending = msg
	c.sendPending(st, now)
}

// message returns the gRPC message (the 5-byte prefix and the protobuf
// encoding) for b on st: the shared bytes of a single-update commit batch,
// or a message encoded for this stream.
func (c *h2conn) message(st *h2stream, b push.Batch) ([]byte, error) {
	m := streamBatch(b)
	compress := func(n int) bool { return st.gzip && n >= CompressMinBytes }
	if sb := sharedOf(m); sb != nil {
		if compress(len(sb.wire)) {
			return sb.gzipped(), nil
		}
		return sb.grpc, nil
	}
	wire, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	if compress(len(wire)) {
		return gzipMessage(wire), nil
	}
	return grpcMessage(wire), nil
}

// gzipMessage returns wire gzip-compressed behind the gRPC message prefix
// whose flag says so.
func gzipMessage(wire []byte) []byte {
	var zb bytes.Buffer
	zb.Write([]byte{1, 0, 0, 0, 0})
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write(wire) // a bytes.Buffer does not fail
	_ = zw.Close()
	out := zb.Bytes()
	binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-5))
	return out
}

// grpcMessage prefixes wire with the uncompressed gRPC message header.
func grpcMessage(wire []byte) []byte {
	out := make([]byte, 5, 5+len(wire))
	binary.BigEndian.PutUint32(out[1:5], uint32(len(wire)))
	return append(out, wire...)
}

// sendPending writes as much of st's message as the windows allow, in DATA
// frames of at most the peer's frame size.
func (c *h2conn) sendPending(st *h2stream, now time.Time) {
	if !st.headersSent {
		c.writeHeaders(st)
	}
	for len(st.pending) > 0 {
		n := min(len(st.pending), c.maxFrame, int(max(0, min(st.window, c.connWindow))))
		if n == 0 {
			return // a WINDOW_UPDATE marks it ready again
		}
		c.writeData(st.id, st.pending[:n])
		st.pending = st.pending[n:]
		st.window -= int64(n)
		c.connWindow -= int64(n)
	}
	st.pending = nil
	st.lastSend = now
}

// writeData appends one DATA frame without copying the payload first.
func (c *h2conn) writeData(id uint32, p []byte) {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
	h[3] = byte(http2.FrameData)
	binary.BigEndian.PutUint32(h[5:], id)
	_, _ = c.bw.Write(h[:])
	_, _ = c.bw.Write(p)
}

func (c *h2conn) writeHeaders(st *h2stream) {
	c.hbuf.Reset()
	c.hf(":status", "200")
	c.hf("content-type", "application/grpc")
	if st.gzip {
		c.hf("grpc-encoding", "gzip")
	}
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
	st.headersSent = true
	st.window += c.initialWindow
}

func (c *h2conn) hf(name, value string) {
	_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// finish ends st with status: trailers after its messages, or a
// trailers-only response when nothing was sent. A message the windows
// still hold back cannot be cut short in a well-formed stream, so such a
// stream is reset instead.
func (c *h2conn) finish(st *h2stream, status *grpcStatus, now time.Time) {
	if st.finished {
		return
	}
	st.finished = true
	c.mu.Lock()
	delete(c.streams, st.id)
	c.noteIdle()
	sub := st.sub
	st.stopDeadline()
	c.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
	switch {
	case len(st.pending) > 0:
		_ = c.fr.WriteRSTStream(st.id, http2.ErrCodeCancel)
		return
	case status.code == notGRPC:
		c.hbuf.Reset()
		c.hf(":status", "415")
		c.hf("content-type", "text/plain; charset=utf-8")
		_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
		_ = c.fr.WriteData(st.id, true, []byte(status.message+"\n"))
		return
	}
	c.hbuf.Reset()
	if !st.headersSent {
		c.hf(":status", "200")
		c.hf("content-type", "application/grpc")
	}
	c.hf("grpc-status", strconv.Itoa(status.code))
	if status.message != "" {
		c.hf("grpc-message", percentEncode(status.message))
	}
	if status.vpCode != "" {
		c.hf(strings.ToLower(CodeHeader), string(status.vpCode))
	}
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: true})
	st.lastSend = now
}

// percentEncode encodes a grpc-message value: printable ASCII except '%'
// passes, every other byte becomes %XX.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 0x20 && ch <= 0x7e && ch != '%' {
			b.WriteByte(ch)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", ch)
	}
	return b.String()
}
