package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
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
	// keep asks roundTrip to keep the answer's body in body (reused from
	// one request to the next) instead of discarding it.
	keep bool
	body []byte
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
	r.body = r.body[:0]
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
			if err := r.take(int(sz)); err != nil {
				return 0, 0, err
			}
			if _, err := r.br.Discard(2); err != nil {
				return 0, 0, err
			}
			n += int(sz)
		}
	case clen >= 0:
		if err := r.take(clen); err != nil {
			return 0, 0, err
		}
		n = clen
	default:
		b, err := io.ReadAll(r.br)
		if err != nil {
			return 0, 0, err
		}
		n = len(b)
		if r.keep {
			r.body = append(r.body, b...)
		}
		closeConn = true
	}
	if closeConn {
		if err := r.redial(); err != nil {
			return status, n, err
		}
	}
	return status, n, nil
}

// take consumes n bytes of the body: appended to r.body when r.keep,
// discarded otherwise.
func (r *rawConn) take(n int) error {
	if !r.keep {
		_, err := r.br.Discard(n)
		return err
	}
	start := len(r.body)
	r.body = slices.Grow(r.body, n)[:start+n]
	_, err := io.ReadFull(r.br, r.body[start:])
	return err
}

// post sends a POST of a JSON body to path on the connection's host and
// returns the status and the answer's body, which stays valid until the
// next request on r. The request is built in buf (returned for reuse), so
// a writer's loop allocates nothing per request here. Like get, it redials
// and sends again once on a broken connection (a commit sent twice with
// its expected generation answers a conflict the second time, which its
// caller reports as an error).
func (r *rawConn) post(buf []byte, path string, body []byte) (int, []byte, []byte, error) {
	buf = append(buf[:0], "POST "...)
	buf = append(buf, path...)
	buf = append(buf, " HTTP/1.1\r\nHost: "...)
	buf = append(buf, r.addr...)
	buf = append(buf, "\r\nUser-Agent: varplane-bench\r\nContent-Type: application/json\r\nContent-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(body)), 10)
	buf = append(buf, "\r\n\r\n"...)
	buf = append(buf, body...)
	r.keep = true
	st, _, err := r.get(buf)
	return st, r.body, buf, err
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
