package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTCPFloorServesTheHarnessClient runs the hand-written floor on a
// loopback listener and posts through the harness's admin client: every
// body reaches commit whole and in order, each answer decodes, and one
// connection carries every request.
func TestTCPFloorServesTheHarnessClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var (
		mu    sync.Mutex
		got   []string
		conns int
	)
	go serveFloor(countConns(l, &mu, &conns), func(b []byte) error {
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		return nil
	})
	a := newAdmin("http://" + l.Addr().String() + "/vars")
	defer a.close()
	want := []string{`{"n":1}`, `{"n":22,"pad":"` + strings.Repeat("x", 20000) + `"}`, `{"n":3}`}
	for _, body := range want {
		var out struct {
			Generation uint64 `json:"generation"`
		}
		if err := a.post(context.Background(), "/admin/publish", []byte(body), &out); err != nil || out.Generation != 1 {
			t.Fatalf("post: generation %d, %v", out.Generation, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("commit saw %d bodies, not the %d sent", len(got), len(want))
	}
	if conns != 1 {
		t.Fatalf("%d connections, want 1 (keep-alive)", conns)
	}
}

// TestReadFloorRequestRefuses: what the floor does not read is refused
// with errFloorRequest (and answered 400 by its connection loop), never
// read as a body of some other length.
func TestReadFloorRequestRefuses(t *testing.T) {
	for _, tc := range []struct{ name, req string }{
		{"no content-length", "POST /x HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"chunked", "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"},
		{"two lengths", "POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"},
		{"negative length", "POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n"},
		{"huge length", "POST /x HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"},
		{"not HTTP/1.1", "POST /x HTTP/1.0\r\nContent-Length: 3\r\n\r\n"},
		{"header without colon", "POST /x HTTP/1.1\r\nContent-Length 3\r\n\r\n"},
		{"too many headers", "POST /x HTTP/1.1\r\n" + strings.Repeat("A: b\r\n", 65) + "Content-Length: 1\r\n\r\n"},
		{"line over the buffer", "POST /" + strings.Repeat("a", 20<<10) + " HTTP/1.1\r\n\r\n"},
		{"cut in the head", "POST /x HTTP/1.1\r\nContent-Len"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readFloorRequest(bufio.NewReaderSize(strings.NewReader(tc.req), 16<<10))
			if !errors.Is(err, errFloorRequest) {
				t.Fatalf("err = %v, want errFloorRequest", err)
			}
		})
	}
	if _, err := readFloorRequest(bufio.NewReader(strings.NewReader(""))); err != io.EOF {
		t.Fatalf("a connection closed between requests: %v, want io.EOF", err)
	}
	n, err := readFloorRequest(bufio.NewReader(strings.NewReader("POST /x HTTP/1.1\r\ncontent-LENGTH:  12 \r\n\r\n")))
	if err != nil || n != 12 {
		t.Fatalf("a good head: %d, %v", n, err)
	}
}

// TestTCPFloorAnswers400 checks the connection loop: a request it does not
// read is answered 400 and the connection closed, and nothing is committed.
func TestTCPFloorAnswers400(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	committed := make(chan []byte, 1)
	go serveFloor(l, func(b []byte) error { committed <- b; return nil })
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"))
	b, _ := io.ReadAll(c) // until the floor closes the connection
	if !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
		t.Fatalf("answer %q, want a 400", b)
	}
	select {
	case got := <-committed:
		t.Fatalf("committed %q", got)
	default:
	}
}

// countConns counts the connections accepted through l.
func countConns(l net.Listener, mu *sync.Mutex, n *int) net.Listener {
	return &countingListener{Listener: l, mu: mu, n: n}
}

type countingListener struct {
	net.Listener
	mu *sync.Mutex
	n  *int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		*l.n++
		l.mu.Unlock()
	}
	return c, err
}
