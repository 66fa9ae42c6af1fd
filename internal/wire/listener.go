package wire

import (
	"bufio"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

// Listener defaults: the connection caps of a server's listener.
const (
	// DefaultMaxConns is the most connections a listener holds open at once.
	DefaultMaxConns = 10000
	// DefaultMaxConnsPerAddr is the most connections one client address
	// (IP, without the port) holds open at once.
	DefaultMaxConnsPerAddr = 1000
	// AcceptBackoffMin and AcceptBackoffMax bound the pause after a failed
	// Accept (EMFILE, ENFILE, ENOBUFS…): it doubles from min to max while
	// the failures last, so that a full descriptor table slows the loop
	// down instead of spinning it or ending it.
	AcceptBackoffMin = 5 * time.Millisecond
	AcceptBackoffMax = time.Second
)

// ListenerOptions tune NewListener. A zero cap means no cap.
type ListenerOptions struct {
	// MaxConns caps the connections open at once; a connection past it is
	// closed as soon as it is accepted.
	MaxConns int
	// MaxConnsPerAddr caps the connections of one client IP address.
	MaxConnsPerAddr int
	// Logger receives the accept errors (slog.Default when nil).
	Logger *slog.Logger
}

// ListenerStats are a Listener's counters.
type ListenerStats struct {
	Open           int64  // connections open now
	Accepted       uint64 // connections accepted and kept
	RefusedTotal   uint64 // connections closed at once: MaxConns reached
	RefusedPerAddr uint64 // connections closed at once: MaxConnsPerAddr reached
	AcceptErrors   uint64 // failed Accept calls that were retried after a pause
}

// Listener is a net.Listener whose Accept survives transient failures and
// holds the connection caps. Accept retries every error but the listener's
// own closing: a process out of descriptors (EMFILE) logs the error, pauses
// (AcceptBackoffMin doubling to AcceptBackoffMax) and tries again, so that
// the port recovers as soon as descriptors are free instead of staying dead.
// It is safe for concurrent use.
type Listener struct {
	net.Listener
	opts ListenerOptions
	log  *slog.Logger

	mu     sync.Mutex
	open   int
	byAddr map[string]int

	accepted, refusedTotal, refusedAddr, acceptErrors atomic.Uint64
	closed                                            atomic.Bool
}

// NewListener wraps ln with the caps of opts.
func NewListener(ln net.Listener, opts ListenerOptions) *Listener {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Listener{Listener: ln, opts: opts, log: log, byAddr: make(map[string]int)}
}

// Accept returns the next connection within the caps. It returns an error
// only once the listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	pause := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			if pause == 0 {
				pause = AcceptBackoffMin
			} else if pause *= 2; pause > AcceptBackoffMax {
				pause = AcceptBackoffMax
			}
			l.acceptErrors.Add(1)
			l.log.Error("accept failed; retrying", "addr", l.Addr().String(), "err", err, "pause", pause, "out_of_descriptors", errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE))
			time.Sleep(pause)
			continue
		}
		pause = 0
		if conn, ok := l.admit(c); ok {
			return conn, nil
		}
	}
}

// admit counts c in, or closes it when a cap is reached.
func (l *Listener) admit(c net.Conn) (net.Conn, bool) {
	host := remoteHost(c)
	l.mu.Lock()
	switch {
	case l.opts.MaxConns > 0 && l.open >= l.opts.MaxConns:
		l.mu.Unlock()
		l.refusedTotal.Add(1)
		_ = c.Close()
		return nil, false
	case l.opts.MaxConnsPerAddr > 0 && l.byAddr[host] >= l.opts.MaxConnsPerAddr:
		l.mu.Unlock()
		l.refusedAddr.Add(1)
		_ = c.Close()
		return nil, false
	}
	l.open++
	l.byAddr[host]++
	l.mu.Unlock()
	l.accepted.Add(1)
	return &countedConn{Conn: c, l: l, host: host}, true
}

func (l *Listener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[host]--; l.byAddr[host] <= 0 {
		delete(l.byAddr, host)
	}
}

// Close closes the underlying listener; open connections stay open.
func (l *Listener) Close() error {
	l.closed.Store(true)
	return l.Listener.Close()
}

// Stats returns the listener's counters.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return ListenerStats{Open: int64(open), Accepted: l.accepted.Load(), RefusedTotal: l.refusedTotal.Load(),
		RefusedPerAddr: l.refusedAddr.Load(), AcceptErrors: l.acceptErrors.Load()}
}

func remoteHost(c net.Conn) string {
	a := c.RemoteAddr()
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// countedConn gives its slot back on the first Close.
type countedConn struct {
	net.Conn
	l    *Listener
	host string
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.release(c.host) })
	return c.Conn.Close()
}

// NetConn returns the wrapped connection (for crypto/tls and net/http,
// which look for it).
func (c *countedConn) NetConn() net.Conn { return c.Conn }

// PrefaceTimeout bounds how long SplitHTTP2 waits for a connection's first
// bytes before treating it as HTTP/1.1 (whose server then applies its own
// header timeout).
const PrefaceTimeout = ServerReadHeaderTimeout

// Split routes the connections of one listener to two: those that open
// with the HTTP/2 client preface (h2c with prior knowledge, how gRPC
// clients connect without TLS) to HTTP2, every other one to HTTP1. Each
// connection is told apart in its own goroutine, byte by byte, so that a
// short HTTP/1.1 request is routed as soon as it differs from the preface
// and a silent peer holds only itself (until PrefaceTimeout).
type Split struct {
	ln     net.Listener
	h1, h2 *chanListener
	once   sync.Once
}

// SplitHTTP2 starts routing ln's connections; close the Split (or ln) to
// stop. Serve both of its listeners: a connection waits until its side
// accepts it.
func SplitHTTP2(ln net.Listener) *Split {
	s := &Split{ln: ln, h1: newChanListener(ln.Addr()), h2: newChanListener(ln.Addr())}
	go s.run()
	return s
}

// HTTP1 is the listener of the connections that are not HTTP/2.
func (s *Split) HTTP1() net.Listener { return s.h1 }

// HTTP2 is the listener of the connections that open with the preface.
func (s *Split) HTTP2() net.Listener { return s.h2 }

// Close closes the underlying listener and both sides.
func (s *Split) Close() error {
	var err error
	s.once.Do(func() {
		err = s.ln.Close()
		s.h1.Close()
		s.h2.Close()
	})
	return err
}

func (s *Split) run() {
	defer s.Close()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.route(c)
	}
}

func (s *Split) route(c net.Conn) {
	br := bufio.NewReaderSize(c, len(http2.ClientPreface))
	_ = c.SetReadDeadline(time.Now().Add(PrefaceTimeout))
	h2 := true
	for n := 1; n <= len(http2.ClientPreface); n++ {
		b, err := br.Peek(n)
		if err != nil {
			if n == 1 {
				_ = c.Close()
				return
			}
			h2 = false
			break
		}
		if b[n-1] != http2.ClientPreface[n-1] {
			h2 = false
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	side := s.h1
	if h2 {
		side = s.h2
	}
	if !side.deliver(&peekedConn{Conn: c, r: br}) {
		_ = c.Close()
	}
}

// chanListener is a net.Listener fed with connections accepted elsewhere.
type chanListener struct {
	addr   net.Addr
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// peekedConn is a connection whose first bytes sit in r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *peekedConn) NetConn() net.Conn { return c.Conn }
