package wire

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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
	// MaxConnAge, when positive, closes a connection that old plus
	// MaxConnAgeGrace (its streams end; clients reconnect, and so spread
	// over servers added since). An HTTP2Guard with the same MaxConnAge
	// sends HTTP/2 connections GOAWAY at MaxConnAge, so that their clients
	// move during the grace. Zero keeps connections as long as they live.
	MaxConnAge, MaxConnAgeGrace time.Duration
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
	Expired        uint64 // connections closed at MaxConnAge (and its grace)
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

	accepted, refusedTotal, refusedAddr, acceptErrors, expired atomic.Uint64
	closed                                                     atomic.Bool
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
	cc := &countedConn{Conn: c, l: l, host: host}
	if l.opts.MaxConnAge > 0 {
		cc.aged.Store(time.AfterFunc(l.opts.MaxConnAge+l.opts.MaxConnAgeGrace, func() {
			l.expired.Add(1)
			cc.release()
			_ = cc.Conn.Close()
		}))
	}
	return cc, true
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
		RefusedPerAddr: l.refusedAddr.Load(), AcceptErrors: l.acceptErrors.Load(), Expired: l.expired.Load()}
}

func remoteHost(c net.Conn) string {
	a := c.RemoteAddr()
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if a == nil {
		return ""
	}
	return AddrHost(a.String())
}

// AddrHost returns the host of a remote address ("192.0.2.1:5000" gives
// "192.0.2.1"), or addr itself when it has no port: the key the
// per-address caps count a client under (the listener's connections, the
// push hub's subscriptions).
func AddrHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// countedConn gives its slot back on the first Close.
type countedConn struct {
	net.Conn
	l    *Listener
	host string
	aged atomic.Pointer[time.Timer] // MaxConnAge's, nil without
	once sync.Once
}

func (c *countedConn) Close() error {
	if t := c.aged.Load(); t != nil {
		t.Stop()
	}
	c.release()
	return c.Conn.Close()
}

// release gives the connection's slot back, once.
func (c *countedConn) release() { c.once.Do(func() { c.l.release(c.host) }) }

// NetConn returns the wrapped connection (for crypto/tls and net/http,
// which look for it).
func (c *countedConn) NetConn() net.Conn { return c.Conn }
