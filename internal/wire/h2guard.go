package wire

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// HTTP/2 connection policies that net/http's HTTP/2 server has no setting
// for, and that grpc-go's enforcement policy and MaxConnectionAge give its
// own transport only (they do nothing for a gRPC server reached through
// ServeHTTP).
const (
	// DefaultPingMinTime is the shortest interval between a client's
	// PINGs that the server accepts (etcd's default, and what grpc-go
	// clients' keepalive must stay above); see HTTP2Guard.
	DefaultPingMinTime = 5 * time.Second
	// DefaultMaxConnAgeGrace is how long an HTTP/2 connection sent GOAWAY
	// at its maximum age is given before it is closed.
	DefaultMaxConnAgeGrace = 10 * time.Second
	// pingStrikes is how many PINGs too early a connection may send
	// before GOAWAY: grpc-go's maxPingStrikes.
	pingStrikes = 2
	// calmClose is how long a connection sent GOAWAY ENHANCE_YOUR_CALM
	// stays open, so that the peer reads the frame before the close (a
	// close with unread data in the receive buffer sends a TCP RST, which
	// can destroy it); net/http's own GOAWAY timeout is the same second.
	calmClose = time.Second
)

// HTTP2GuardOptions tune an HTTP2Guard; the zero value selects the
// defaults and no maximum age.
type HTTP2GuardOptions struct {
	// PingMinTime: a client PING sooner than this after the previous one
	// is a strike; the server's own writes of HEADERS or DATA clear the
	// strikes (a client pinging because it receives data, as grpc-go's
	// bandwidth estimator does, is not flooding). Past pingStrikes
	// strikes the connection is sent GOAWAY ENHANCE_YOUR_CALM with debug
	// data "too_many_pings" (what grpc-go clients understand: they double
	// their keepalive time) and closed a second later. Default
	// DefaultPingMinTime; negative turns the policy off.
	PingMinTime time.Duration
	// MaxConnAge, when positive, sends an HTTP/2 connection GOAWAY
	// NO_ERROR that old (plus or minus a tenth, at random, so that the
	// connections of a fleet opened together do not all move at once),
	// with the last stream id 2³¹−1: the client opens no stream there any
	// more, and every stream it opened is still served. The Listener's
	// MaxConnAge (with the grace added) closes what is left.
	MaxConnAge time.Duration
}

// HTTP2GuardStats are an HTTP2Guard's counters.
type HTTP2GuardStats struct {
	TooManyPings uint64 // connections sent GOAWAY ENHANCE_YOUR_CALM
	AgedGoAways  uint64 // connections sent GOAWAY NO_ERROR at MaxConnAge
}

// HTTP2Guard adds a ping policy and a graceful maximum connection age to
// the HTTP/2 connections of an http.Server. net/http's HTTP/2 server
// answers every PING and offers no GOAWAY for one connection, so the guard
// works on the connection beneath it: Install takes the server's HTTP/2
// entry points (TLSNextProto "h2" and "unencrypted_http2") and serves each
// HTTP/2 connection through a net.Conn that follows the frame boundaries
// of both directions: it counts the client's PINGs as they are read and
// writes its own GOAWAY between two of the server's frames. HTTP/1.1
// connections are untouched. It is safe for concurrent use.
type HTTP2Guard struct {
	opts                    HTTP2GuardOptions
	tooManyPings, agedGoing atomic.Uint64
}

// NewHTTP2Guard returns a guard with opts.
func NewHTTP2Guard(opts HTTP2GuardOptions) *HTTP2Guard {
	if opts.PingMinTime == 0 {
		opts.PingMinTime = DefaultPingMinTime
	}
	return &HTTP2Guard{opts: opts}
}

// Stats returns the guard's counters.
func (g *HTTP2Guard) Stats() HTTP2GuardStats {
	return HTTP2GuardStats{TooManyPings: g.tooManyPings.Load(), AgedGoAways: g.agedGoing.Load()}
}

// nextProtoUnencryptedHTTP2 is net/http's TLSNextProto key of h2c
// connections with prior knowledge (the HTTP/2 preface already read).
const nextProtoUnencryptedHTTP2 = "unencrypted_http2"

// Install puts the guard in front of srv's HTTP/2 connections; call it
// before srv serves, with srv.Protocols set. net/http configures its
// HTTP/2 server only for a server whose TLSNextProto is unset, so Install
// has a scratch server configure it, takes its entry points and wraps them
// (the HTTP/2 settings still come from srv: net/http reads them from the
// server a connection belongs to). The scratch server holds the HTTP/2
// connections' graceful shutdown, so srv's Shutdown is made to run it.
func (g *HTTP2Guard) Install(srv *http.Server) error {
	if srv.TLSNextProto != nil {
		return errors.New("wire: HTTP2Guard: the server's TLSNextProto is already set")
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	scratch := &http.Server{Protocols: &protos, IdleTimeout: srv.IdleTimeout, ReadTimeout: srv.ReadTimeout}
	_ = scratch.Serve(failingListener{}) // configures HTTP/2, then returns at Accept
	h2, h2c := scratch.TLSNextProto["h2"], scratch.TLSNextProto[nextProtoUnencryptedHTTP2]
	if h2 == nil || h2c == nil {
		return errors.New("wire: HTTP2Guard: net/http did not configure HTTP/2")
	}
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		"h2": func(hs *http.Server, tc *tls.Conn, h http.Handler) {
			if !readPreface(tc) {
				_ = tc.Close()
				return
			}
			gc := g.guard(tc)
			defer gc.stop()
			h2c(hs, tls.Client(unencrypted{&tlsGuardConn{gc, tc}}, nil), h)
		},
		nextProtoUnencryptedHTTP2: func(hs *http.Server, fake *tls.Conn, h http.Handler) {
			u, ok := fake.NetConn().(interface{ UnencryptedNetConn() net.Conn })
			if !ok {
				_ = fake.Close()
				return
			}
			gc := g.guard(u.UnencryptedNetConn())
			defer gc.stop()
			h2c(hs, tls.Client(unencrypted{gc}, nil), h)
		},
	}
	srv.RegisterOnShutdown(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = scratch.Shutdown(ctx) // GOAWAY to every HTTP/2 connection
	})
	return nil
}

// readPreface reads the client preface of an HTTP/2 connection over TLS:
// the connection then goes through the h2c entry point, which expects it
// read (its "h2" twin reads it itself, but takes a *tls.Conn only, and the
// guard's connection is not one).
func readPreface(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(ServerReadHeaderTimeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var b [len(clientPreface)]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false
	}
	return string(b[:]) == clientPreface
}

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// unencrypted is how net/http hands a connection that is not TLS to its
// HTTP/2 server inside a *tls.Conn (the UnencryptedNetConn method).
type unencrypted struct{ c net.Conn }

func (u unencrypted) UnencryptedNetConn() net.Conn     { return u.c }
func (u unencrypted) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (u unencrypted) Write([]byte) (int, error)        { return 0, net.ErrClosed }
func (u unencrypted) Close() error                     { return u.c.Close() }
func (u unencrypted) LocalAddr() net.Addr              { return u.c.LocalAddr() }
func (u unencrypted) RemoteAddr() net.Addr             { return u.c.RemoteAddr() }
func (u unencrypted) SetDeadline(time.Time) error      { return nil }
func (u unencrypted) SetReadDeadline(time.Time) error  { return nil }
func (u unencrypted) SetWriteDeadline(time.Time) error { return nil }

type failingListener struct{}

func (failingListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (failingListener) Close() error              { return nil }
func (failingListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// tlsGuardConn is a guarded TLS connection: the HTTP/2 server reads its
// TLS state (r.TLS, the version and cipher checks of RFC 9113 §9.2) from
// ConnectionState.
type tlsGuardConn struct {
	*guardConn
	tc *tls.Conn
}

func (c *tlsGuardConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// HTTP/2 frame types and flags the guard looks at (RFC 9113 §6).
const (
	frameData    = 0x0
	frameHeaders = 0x1
	framePing    = 0x6
	frameGoAway  = 0x7
	flagAck      = 0x1

	errCodeNo              = 0x0
	errCodeEnhanceYourCalm = 0xb
)

// frameWalker follows frame boundaries across reads or writes of any
// size, calling onHeader with each complete frame header.
type frameWalker struct {
	hdr  [9]byte
	hn   int // header bytes held
	left int // payload bytes of the current frame still to pass
}

func (w *frameWalker) walk(p []byte, onHeader func(typ, flags byte, stream uint32)) {
	for len(p) > 0 {
		if w.left > 0 {
			n := min(w.left, len(p))
			w.left -= n
			p = p[n:]
			continue
		}
		n := copy(w.hdr[w.hn:], p)
		w.hn += n
		p = p[n:]
		if w.hn < len(w.hdr) {
			return
		}
		w.hn = 0
		w.left = int(w.hdr[0])<<16 | int(w.hdr[1])<<8 | int(w.hdr[2])
		onHeader(w.hdr[3], w.hdr[4], binary.BigEndian.Uint32(w.hdr[5:])&(1<<31-1))
	}
}

// atBoundary reports whether the next byte starts a frame.
func (w *frameWalker) atBoundary() bool { return w.hn == 0 && w.left == 0 }

// guardConn is one HTTP/2 connection under the guard.
type guardConn struct {
	net.Conn
	g *HTTP2Guard

	rd       frameWalker // the reading goroutine's
	lastPing time.Time
	strikes  atomic.Int32
	maxID    atomic.Uint32 // highest client stream id seen
	calmed   atomic.Bool

	wmu     sync.Mutex // serializes writes and injected frames
	wr      frameWalker
	pending [][]byte // frames to write at the next frame boundary

	aged *time.Timer
}

func (g *HTTP2Guard) guard(c net.Conn) *guardConn {
	gc := &guardConn{Conn: c, g: g}
	if age := g.opts.MaxConnAge; age > 0 {
		jitter := time.Duration(rand.Int64N(int64(age)/5+1)) - age/10
		gc.aged = time.AfterFunc(age+jitter, func() {
			g.agedGoing.Add(1)
			gc.inject(goAway(1<<31-1, errCodeNo, nil))
		})
	}
	return gc
}

func (c *guardConn) stop() {
	if c.aged != nil {
		c.aged.Stop()
	}
}

// NetConn returns the connection beneath (for net/http and crypto/tls,
// which look for it).
func (c *guardConn) NetConn() net.Conn { return c.Conn }

func (c *guardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.rd.walk(p[:n], c.onRead)
	}
	return n, err
}

// onRead sees each frame header the client sends.
func (c *guardConn) onRead(typ, flags byte, stream uint32) {
	switch typ {
	case frameHeaders:
		if stream%2 == 1 && stream > c.maxID.Load() {
			c.maxID.Store(stream)
		}
	case framePing:
		if flags&flagAck != 0 || c.g.opts.PingMinTime < 0 || c.calmed.Load() {
			return
		}
		now := time.Now()
		early := !c.lastPing.IsZero() && now.Sub(c.lastPing) < c.g.opts.PingMinTime
		c.lastPing = now
		if early && c.strikes.Add(1) > pingStrikes && c.calmed.CompareAndSwap(false, true) {
			c.g.tooManyPings.Add(1)
			c.inject(goAway(c.maxID.Load(), errCodeEnhanceYourCalm, []byte("too_many_pings")))
			time.AfterFunc(calmClose, func() { _ = c.Conn.Close() })
		}
	}
}

func (c *guardConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wr.walk(p, c.onWrite)
	n, err := c.Conn.Write(p)
	if err == nil {
		err = c.flushPending()
	}
	return n, err
}

// onWrite sees each frame header the server writes: its HEADERS and DATA
// clear the client's ping strikes.
func (c *guardConn) onWrite(typ, _ byte, _ uint32) {
	if typ == frameData || typ == frameHeaders {
		c.strikes.Store(0)
	}
}

// inject writes frame between two of the server's frames: now, when no
// frame is half written, else right after the write that completes it.
// It never waits for the server's writer (which may be stuck on a peer
// that does not read): it runs on a goroutine of its own.
func (c *guardConn) inject(frame []byte) {
	go func() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		c.pending = append(c.pending, frame)
		_ = c.flushPending()
	}()
}

// flushPending writes the pending frames if at a frame boundary; wmu held.
func (c *guardConn) flushPending() error {
	if len(c.pending) == 0 || !c.wr.atBoundary() {
		return nil
	}
	for _, f := range c.pending {
		if _, err := c.Conn.Write(f); err != nil {
			return err
		}
	}
	c.pending = nil
	return nil
}

// goAway encodes a GOAWAY frame.
func goAway(last uint32, code uint32, debug []byte) []byte {
	f := make([]byte, 9, 9+8+len(debug))
	n := 8 + len(debug)
	f[0], f[1], f[2] = byte(n>>16), byte(n>>8), byte(n)
	f[3] = frameGoAway
	f = binary.BigEndian.AppendUint32(f, last&(1<<31-1))
	f = binary.BigEndian.AppendUint32(f, code)
	return append(f, debug...)
}
