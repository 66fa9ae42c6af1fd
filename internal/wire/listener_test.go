package wire

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails its first n Accepts with err, then accepts from ln.
type flakyListener struct {
	net.Listener
	mu  sync.Mutex
	n   int
	err error
}

func (f *flakyListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return nil, f.err
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// An accept loop that meets EMFILE logs it, pauses and keeps serving.
func TestListenerSurvivesEMFILE(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	fl := &flakyListener{Listener: listen(t), n: 3, err: &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}}
	l := NewListener(fl, ListenerOptions{Logger: slog.New(slog.NewTextHandler(w, nil))})
	go func() {
		c, err := net.Dial("tcp", fl.Addr().String())
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	start := time.Now()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after EMFILE: %v", err)
	}
	_ = c.Close()
	// Three pauses of 5, 10 and 20 ms at least.
	if d := time.Since(start); d < 35*time.Millisecond {
		t.Errorf("Accept retried without pausing (%v)", d)
	}
	if got := l.Stats().AcceptErrors; got != 3 {
		t.Errorf("AcceptErrors = %d, want 3", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "accept failed"); n != 3 || !strings.Contains(logs.String(), "out_of_descriptors=true") {
		t.Errorf("logs = %q, want 3 accept failures out of descriptors", logs.String())
	}
	_ = l.Close()
	if _, err := l.Accept(); err == nil {
		t.Error("Accept on a closed listener succeeded")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The caps close connections past them at once and give slots back on Close.
func TestListenerCaps(t *testing.T) {
	for _, tc := range []struct {
		name          string
		opts          ListenerOptions
		total, byAddr uint64
	}{
		{"total", ListenerOptions{MaxConns: 2}, 1, 0},
		{"per address", ListenerOptions{MaxConns: 10, MaxConnsPerAddr: 2}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewListener(listen(t), tc.opts)
			accepted := make(chan net.Conn, 10)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			var clients []net.Conn
			for range 3 {
				c, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				clients = append(clients, c)
			}
			first, second := <-accepted, <-accepted
			// The third connection is closed by the server: its read ends.
			_ = clients[2].SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := clients[2].Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				t.Errorf("third connection read: %v, want EOF", err)
			}
			st := l.Stats()
			if st.Open != 2 || st.RefusedTotal != tc.total || st.RefusedPerAddr != tc.byAddr {
				t.Errorf("stats = %+v", st)
			}
			_ = first.Close()
			_ = first.Close() // twice gives back one slot
			if st := l.Stats(); st.Open != 1 {
				t.Errorf("open after a Close = %d, want 1", st.Open)
			}
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case got := <-accepted:
				_ = got.Close()
			case <-time.After(5 * time.Second):
				t.Error("no connection accepted after a slot was freed")
			}
			_ = second.Close()
			for _, c := range clients {
				_ = c.Close()
			}
			_ = l.Close()
		})
	}
}

// MaxConnAge closes a connection once it is that old.
func TestListenerMaxConnAge(t *testing.T) {
	l := NewListener(listen(t), ListenerOptions{MaxConnAge: 50 * time.Millisecond})
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			defer c.Close()
			time.Sleep(2 * time.Second)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("read on an aged connection: %v after %v, want it closed at 50ms", err, time.Since(start))
	}
	if st := l.Stats(); st.Expired != 1 || st.Open != 0 {
		t.Errorf("stats = %+v, want one expired, none open", st)
	}
}
