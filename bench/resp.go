package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// respConn is a tiny Redis client (RESP2) for what the harness itself needs:
// PING, INFO cpu and deleting its own key prefix afterwards.
type respConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRESP(addr string) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, br: bufio.NewReader(c)}, nil
}

func (r *respConn) close() { r.c.Close() }

func (r *respConn) do(args ...string) (any, error) {
	r.c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := r.c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return r.read()
}

func (r *respConn) read() (any, error) {
	line, err := r.br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("resp: empty line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New("redis: " + line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r.br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		out := make([]any, 0, max(n, 0))
		for i := 0; i < n; i++ {
			v, err := r.read()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("resp: unexpected %q", line)
}

func ioReadFull(br *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := br.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// cpuSeconds returns used_cpu_user + used_cpu_sys of the Redis server.
func (r *respConn) cpuSeconds() (float64, error) {
	v, err := r.do("INFO", "cpu")
	if err != nil {
		return 0, err
	}
	s, _ := v.(string)
	var total float64
	for _, line := range strings.Split(s, "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(val, 64)
			total += f
		}
	}
	return total, nil
}

// deletePrefix removes every key that starts with prefix+":" and returns
// how many it deleted.
func (r *respConn) deletePrefix(prefix string) (int, error) {
	cursor, deleted := "0", 0
	for {
		v, err := r.do("SCAN", cursor, "MATCH", prefix+":*", "COUNT", "1000")
		if err != nil {
			return deleted, err
		}
		arr, ok := v.([]any)
		if !ok || len(arr) != 2 {
			return deleted, errors.New("resp: bad SCAN reply")
		}
		cursor, _ = arr[0].(string)
		keys, _ := arr[1].([]any)
		if len(keys) > 0 {
			args := []string{"DEL"}
			for _, k := range keys {
				if s, ok := k.(string); ok {
					args = append(args, s)
				}
			}
			n, err := r.do(args...)
			if err != nil {
				return deleted, err
			}
			if c, ok := n.(int64); ok {
				deleted += int(c)
			}
		}
		if cursor == "0" {
			return deleted, nil
		}
	}
}
