package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// rawConn is a minimal HTTP/1.1 keep-alive client for GET requests: it writes
// a prebuilt request and reads the status, headers and body (Content-Length
// or chunked) without allocating per request. Both the varplane server and
// the net/http ceiling are read through it, so the load generator costs the
// same on both sides and as little as possible on this 2-core machine.
type rawConn struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
}

func dialRaw(addr string) (*rawConn, error) {
	r := &rawConn{addr: addr}
	return r, r.redial()
}

func (r *rawConn) redial() error {
	if r.c != nil {
		r.c.Close()
	}
	c, err := net.DialTimeout("tcp", r.addr, 2*time.Second)
	if err != nil {
		return err
	}
	r.c = c
	r.br = bufio.NewReaderSize(c, 32<<10)
	return nil
}

func (r *rawConn) close() {
	if r.c != nil {
		r.c.Close()
	}
}

var errBadResponse = errors.New("malformed HTTP response")

// get sends req and returns the status and the body length. On a broken
// connection it redials once and retries.
func (r *rawConn) get(req []byte) (int, int, error) {
	st, n, err := r.roundTrip(req)
	if err != nil && !errors.Is(err, errBadResponse) {
		if rerr := r.redial(); rerr != nil {
			return 0, 0, rerr
		}
		return r.roundTrip(req)
	}
	return st, n, err
}

func (r *rawConn) roundTrip(req []byte) (int, int, error) {
	r.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.c.Write(req); err != nil {
		return 0, 0, err
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return 0, 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, 0, fmt.Errorf("%w: status line %q", errBadResponse, line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: status %q", errBadResponse, line)
	}
	clen, chunked, closeConn := -1, false, false
	for {
		h, err := r.br.ReadSlice('\n')
		if err != nil {
			return 0, 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case asciiEqualFold(k, "content-length"):
			clen, _ = strconv.Atoi(string(v))
		case asciiEqualFold(k, "transfer-encoding"):
			chunked = bytes.Contains(bytes.ToLower(v), []byte("chunked"))
		case asciiEqualFold(k, "connection"):
			closeConn = bytes.EqualFold(v, []byte("close"))
		}
	}
	n := 0
	switch {
	case status == 304 || status == 204:
	case chunked:
		for {
			l, err := r.br.ReadSlice('\n')
			if err != nil {
				return 0, 0, err
			}
			l = bytes.TrimRight(l, "\r\n")
			if i := bytes.IndexByte(l, ';'); i >= 0 {
				l = l[:i]
			}
			sz, err := strconv.ParseInt(string(l), 16, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("%w: chunk size %q", errBadResponse, l)
			}
			if sz == 0 {
				// trailers end with an empty line
				for {
					t, err := r.br.ReadSlice('\n')
					if err != nil {
						return 0, 0, err
					}
					if len(bytes.TrimRight(t, "\r\n")) == 0 {
						break
					}
				}
				break
			}
			if _, err := r.br.Discard(int(sz)); err != nil {
				return 0, 0, err
			}
			if _, err := r.br.Discard(2); err != nil {
				return 0, 0, err
			}
			n += int(sz)
		}
	case clen >= 0:
		if _, err := r.br.Discard(clen); err != nil {
			return 0, 0, err
		}
		n = clen
	default:
		b, err := io.ReadAll(r.br)
		if err != nil {
			return 0, 0, err
		}
		n = len(b)
		closeConn = true
	}
	if closeConn {
		if err := r.redial(); err != nil {
			return status, n, err
		}
	}
	return status, n, nil
}

func asciiEqualFold(b []byte, s string) bool {
	return bytes.EqualFold(b, []byte(s))
}

// getRequest builds a GET request for path on host, with an If-None-Match
// header when inm is not empty.
func getRequest(host, path, inm string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: varplane-bench\r\nAccept: application/json\r\n", path, host)
	if inm != "" {
		fmt.Fprintf(&b, "If-None-Match: %s\r\n", inm)
	}
	b.WriteString("\r\n")
	return b.Bytes()
}
