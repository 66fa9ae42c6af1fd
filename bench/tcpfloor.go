package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/gctune"
)

// tcpFloorMain is the child process "bench durable-floor-tcp ADDR LOGFILE":
// the durable ceiling's work (the body written into space allocated and
// zeroed ahead, one fdatasync, the same fixed answer) behind a hand-written
// HTTP/1.1 responder instead of net/http. It reads a request line, headers
// and a Content-Length body on a keep-alive connection, and answers from
// the goroutine that read the request: no other goroutine takes part in a
// request, so a lone writer's commit wakes no thread but its own.
//
// It is a measuring instrument, not a server to copy: it knows only what
// the harness's client sends (no chunked bodies, no Expect, no pipelining
// beyond what the buffer holds). Against http-fdatasync-prealloc, in the
// same run, it shows what net/http's way of serving a request costs a lone
// writer on this machine, apart from varplane's work and from the disk.
func tcpFloorMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bench durable-floor-tcp ADDR LOGFILE")
		return 2
	}
	dl, err := openDurableLog(args[1], true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer dl.close()
	return acceptUntilSignal(args[0], func(c net.Conn) { serveFloorConn(c, dl.append) })
}

// acceptUntilSignal listens on addr and serves each connection with serve
// on a goroutine of its own until SIGTERM or an interrupt (0), or until
// listening or accepting fails (1).
func acceptUntilSignal(addr string, serve func(net.Conn)) int {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	err = acceptEach(l, serve) // returns once l is closed, or fails
	if ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// acceptEach accepts connections on l, each served by serve on a goroutine
// of its own, until Accept fails (l closed); it returns that error.
func acceptEach(l net.Listener, serve func(net.Conn)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go serve(c)
	}
}

// floorAnswer is what the durable floors answer a commit: the bytes of the
// net/http ceiling's answer, with the head net/http writes for it.
var floorAnswer = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Length: " +
	strconv.Itoa(len(durableAnswer)) + "\r\n\r\n" + durableAnswer)

// floorMaxBody bounds a request body, as the servers measured beside it do.
const floorMaxBody = 1 << 20

// serveFloor accepts connections on l, each served by serveFloorConn with
// commit, until Accept fails (l closed); it returns that error.
func serveFloor(l net.Listener, commit func([]byte) error) error {
	return acceptEach(l, func(c net.Conn) { serveFloorConn(c, commit) })
}

// serveFloorConn answers the requests of one keep-alive connection, one at
// a time, until the client closes it, sends something it does not read
// (answered 400 and closed), or stays silent for a minute.
func serveFloorConn(c net.Conn, commit func([]byte) error) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 16<<10)
	var body []byte
	for {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		n, err := readFloorRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}
			return
		}
		if cap(body) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		if err := commit(body); err != nil {
			c.Write([]byte("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			return
		}
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(floorAnswer); err != nil {
			return
		}
	}
}

var errFloorRequest = errors.New("request the floor does not read")

// readFloorRequest reads a request's line and headers from br and returns
// its Content-Length. A line longer than br's buffer, more than 64 headers,
// a missing or bad Content-Length, one over floorMaxBody or a chunked body
// are errFloorRequest; a connection closed between requests is io.EOF.
func readFloorRequest(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("%w: request line: %v", errFloorRequest, err)
	}
	if !bytes.HasSuffix(bytes.TrimRight(line, "\r\n"), []byte(" HTTP/1.1")) {
		return 0, fmt.Errorf("%w: request line %q", errFloorRequest, line)
	}
	clen := -1
	for i := 0; ; i++ {
		if i == 64 {
			return 0, fmt.Errorf("%w: more than 64 headers", errFloorRequest)
		}
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, fmt.Errorf("%w: header: %v", errFloorRequest, err)
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, fmt.Errorf("%w: header %q", errFloorRequest, h)
		}
		switch {
		case asciiEqualFold(k, "content-length"):
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n < 0 || n > floorMaxBody || clen >= 0 {
				return 0, fmt.Errorf("%w: content-length %q", errFloorRequest, v)
			}
			clen = n
		case asciiEqualFold(k, "transfer-encoding"):
			return 0, fmt.Errorf("%w: transfer-encoding", errFloorRequest)
		}
	}
	if clen < 0 {
		return 0, fmt.Errorf("%w: no content-length", errFloorRequest)
	}
	return clen, nil
}

// startTCPFloor runs the durable floor without net/http as a child process
// of this binary, its log in the run's temporary directory; it returns its
// address.
func startTCPFloor(ctx context.Context, cfg *config) (*proc, string, error) {
	return startChild(ctx, cfg, "durable-floor-tcp", filepath.Join(cfg.tmp, "durable-floor-tcp.jsonl"))
}

// tcpVarplaneMain is the child process "bench varplane-tcp ADDR LOG": the
// varplane library (file store, engine, httpapi handler, as the embedded
// child wires it, with no push hub, and the collector's headroom floor of
// varplane serve) behind the same hand-written
// connection loop as durable-floor-tcp. Requests are parsed by net/http's
// own parser (http.ReadRequest) and answered by varplane's handler into a
// buffer, from the goroutine that read them; only net/http's server, and
// the goroutines it starts per request, are left out. Against
// varplane-publish in the same run it shows what a lone writer's publish
// would reach behind a server that wakes no other thread per request. Like
// the floor it is an instrument the harness starts on a loopback port for
// the length of a scenario: it bounds a request only as varplane's handler
// and net/http's parser do, and has none of varplane serve's timeouts,
// connection limits or Host checks.
func tcpVarplaneMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bench varplane-tcp ADDR LOG")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The collector's headroom floor that varplane serve sets by default,
	// so that the two servers differ by net/http's server alone.
	if stopGC, ok := gctune.Start(64 << 20); ok {
		defer stopGC()
	}
	engine, log, closeEngine, err := openEngine(ctx, args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeEngine()
	api := httpapi.NewHandler(engine, httpapi.Options{Base: "/vars", Logger: log, Authorizer: varplane.AllowAll})
	defer api.Close()
	return acceptUntilSignal(args[0], func(c net.Conn) { serveHandlerConn(ctx, c, api) })
}

// serveHandlerConn answers the requests of one keep-alive connection with
// h, one at a time, each into a buffer written whole with its length.
func serveHandlerConn(ctx context.Context, c net.Conn, h http.Handler) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 16<<10)
	var out bytes.Buffer
	w := &bufferedResponse{}
	for {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		req.RemoteAddr = c.RemoteAddr().String()
		w.reset()
		h.ServeHTTP(w, req.WithContext(ctx))
		if _, err := io.Copy(io.Discard, io.LimitReader(req.Body, floorMaxBody)); err != nil {
			return
		}
		out.Reset()
		fmt.Fprintf(&out, "HTTP/1.1 %d %s\r\n", w.status, http.StatusText(w.status))
		w.header.Del("Content-Length")
		w.header.Write(&out)
		fmt.Fprintf(&out, "Content-Length: %d\r\n\r\n", w.body.Len())
		out.Write(w.body.Bytes())
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(out.Bytes()); err != nil {
			return
		}
	}
}

// bufferedResponse is an http.ResponseWriter that keeps the answer for
// serveHandlerConn to write.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *bufferedResponse) reset() {
	w.header, w.status = http.Header{}, 0
	w.body.Reset()
}

func (w *bufferedResponse) Header() http.Header { return w.header }

func (w *bufferedResponse) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *bufferedResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// startTCPVarplane runs varplane behind the hand-written loop as a child
// process of this binary, over a fresh log; it returns it as a vpServer.
func startTCPVarplane(ctx context.Context, cfg *config) (*vpServer, error) {
	p, addr, err := startChild(ctx, cfg, "varplane-tcp", filepath.Join(cfg.tmp, "varplane-tcp.jsonl"))
	if err != nil {
		return nil, err
	}
	return &vpServer{p: p, addr: addr, base: "http://" + addr + "/vars"}, nil
}
