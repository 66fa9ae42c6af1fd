package rpc

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Write coalescing for the RPC listener.
//
// net/http's HTTP/2 server flushes its connection buffer whenever its frame
// queue runs empty, and a stream handler's Flush hands over one frame and
// waits for it, so a commit delivered to 100 streams of one connection
// becomes 100 write system calls: the goroutine that flushed is scheduled
// before the next handler has queued its frame. A write on loopback costs
// about as much as everything else a delivery does. coalescingConn makes
// the server's flush an append to a buffer and moves the system call to a
// writer goroutine started on demand, so every frame flushed while a write
// is in flight (or while the writer waits to run) leaves in the next single
// write. Order is preserved; the buffer is bounded (a Write waits while
// maxCoalesced bytes are pending), so a peer that stops reading still
// pushes back on the server exactly as before, only maxCoalesced later.

// maxCoalesced bounds the bytes a coalescingConn accepts before the peer
// has taken them. HTTP/2 flow control already bounds what the server sends
// per connection; this only has to cover a burst of frames.
const maxCoalesced = 1 << 20

// closeGrace bounds how long a closed connection keeps writing what was
// accepted before Close.
const closeGrace = 5 * time.Second

type coalescingListener struct{ net.Listener }

func (l coalescingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newCoalescingConn(c), nil
}

type coalescingConn struct {
	net.Conn

	mu      sync.Mutex
	cond    sync.Cond // broadcast when the writer takes or finishes a buffer
	pending []byte    // accepted, not yet handed to the kernel
	spare   []byte    // the buffer of the previous write, reused
	writing bool      // a writer goroutine owns the flushing
	err     error     // the first write error; every later Write returns it
	closed  bool
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c}
	cc.cond.L = &cc.mu
	return cc
}

var errConnClosed = errors.New("rpc: write on closed connection")

// Write accepts p for the writer goroutine and returns without a system
// call unless maxCoalesced bytes are already pending, in which case it
// waits for the peer to take some. It returns the error of an earlier write.
func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closed && len(c.pending) >= maxCoalesced {
		c.cond.Wait()
	}
	switch {
	case c.err != nil:
		return 0, c.err
	case c.closed:
		return 0, errConnClosed
	}
	c.pending = append(c.pending, p...)
	if !c.writing {
		c.writing = true
		go c.flushLoop()
	}
	return len(p), nil
}

// flushLoop writes whatever is pending, as one write, until nothing is.
func (c *coalescingConn) flushLoop() {
	c.mu.Lock()
	for len(c.pending) > 0 && c.err == nil {
		buf := c.pending
		c.pending = c.spare[:0]
		c.mu.Unlock()
		_, err := c.Conn.Write(buf)
		c.mu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.err = err
			c.pending = nil
		}
		c.cond.Broadcast()
	}
	c.writing = false
	closed := c.closed
	c.cond.Broadcast()
	c.mu.Unlock()
	if closed {
		_ = c.Conn.Close()
	}
}

// Close closes the connection once what Write accepted is written (within
// closeGrace); it does not wait for that.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.cond.Broadcast()
	if c.writing {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeGrace))
		c.mu.Unlock()
		return nil // flushLoop closes it
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite shuts the sending side down after what is pending has been
// written, for servers that half-close before closing.
func (c *coalescingConn) CloseWrite() error {
	c.mu.Lock()
	for c.writing {
		c.cond.Wait()
	}
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
