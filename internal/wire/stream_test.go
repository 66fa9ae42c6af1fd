package wire

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A stream that lifts the server's deadlines outlives them; its own write
// deadline still cuts a peer that stops reading.
func TestStreamDeadline(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	cut := make(chan struct{}, 1) // a big stream's write failed
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := NewStreamDeadline(http.NewResponseController(w), 200*time.Millisecond)
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		for i := 0; ; i++ {
			d.Arm(time.Now())
			msg := "tick\n"
			if r.URL.Query().Get("big") != "" {
				msg = big
			}
			if _, err := io.WriteString(w, msg); err != nil || rc.Flush() != nil {
				if r.URL.Query().Get("big") != "" {
					cut <- struct{}{}
				}
				return
			}
			if i == 3 {
				if r.URL.Query().Get("big") == "" {
					return
				}
			}
			time.Sleep(150 * time.Millisecond)
		}
	}))
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	srv.Start()
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(b), "tick") != 4 {
		t.Fatalf("read %q, %v: want four ticks over 450ms, past the server's 100ms timeouts", b, err)
	}

	// A peer that never reads: the handler's writes block, then fail on
	// the stream's own deadline. (What the peer sees of the close depends
	// on the kernel's buffers, so the server side is what is checked.)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(8 << 10) // block the writes soon
	_, _ = io.WriteString(conn, "GET /?big=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream to a peer that does not read is still being written after 10s")
	}
}
