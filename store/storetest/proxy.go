package storetest

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy relays TCP connections to a server, for the tests of a shared
// store whose commit is sent and whose answer is lost: once armed, the
// first request that holds a given byte string trips it, and from then on
// the answers of that connection are dropped (the server still gets and
// runs the request, the client never hears back), until the proxy closes.
// A tripped connection's side towards the server stays open, so the server
// does not see its client go away.
type Proxy struct {
	tb     testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	match  []byte
	onTrip func()
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// StartProxy listens on a loopback port and relays every connection to
// target; the test's cleanup closes it.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{tb: tb, ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the next request that holds match (within one read of the
// client's bytes) trip: onTrip, when not nil, runs before that request is
// passed on, and its connection's answers are dropped from then on.
func (p *Proxy) Arm(match []byte, onTrip func()) {
	p.mu.Lock()
	p.match, p.onTrip = bytes.Clone(match), onTrip
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection it relays.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			return
		}
		var mu sync.Mutex
		tripped := false
		p.wg.Add(2)
		go func() { // client → server
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					p.mu.Lock()
					trip := p.match != nil && bytes.Contains(buf[:n], p.match)
					onTrip := p.onTrip
					if trip {
						p.match, p.onTrip = nil, nil
					}
					p.mu.Unlock()
					if trip {
						mu.Lock()
						tripped = true
						mu.Unlock()
						if onTrip != nil {
							onTrip()
						}
					}
					if _, err := server.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					mu.Lock()
					keep := tripped
					mu.Unlock()
					if !keep {
						_ = server.Close()
					}
					return
				}
			}
		}()
		go func() { // server → client
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := server.Read(buf)
				mu.Lock()
				drop := tripped
				mu.Unlock()
				if n > 0 && !drop {
					if _, werr := client.Write(buf[:n]); werr != nil {
						_, _ = io.Copy(io.Discard, server)
						return
					}
				}
				if err != nil {
					_ = client.Close()
					return
				}
			}
		}()
	}
}
