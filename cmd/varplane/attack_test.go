package main

// The attack suite: each case of issue 11's findings, driven against the
// real binary as an attacker would drive it, checking the answer, that
// nothing stored changed, and that the server's peak resident memory stayed
// bounded. It runs in the README's test command (and so in .ci/run), each
// case bounded in time.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	bin "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// maxAttackRSS bounds the peak resident memory (VmHWM) of a server under
// attack. An idle server holds about 20 MiB; every finding this suite
// replays took it past a gigabyte.
const maxAttackRSS = 256 << 20

// peakRSS returns the server process's peak resident set size in bytes.
func (s *server) peakRSS(t testing.TB) int64 {
	t.Helper()
	return s.memory(t, "VmHWM")
}

// memory returns a memory figure of the server process's status (VmHWM,
// VmRSS) in bytes.
func (s *server) memory(t testing.TB, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc to read the server's memory from: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal(field + " not found")
	return 0
}

// checkRSS fails when the server's peak memory passed maxAttackRSS.
func (s *server) checkRSS(t testing.TB) {
	t.Helper()
	if rss := s.peakRSS(t); rss > maxAttackRSS {
		t.Fatalf("server peak RSS %d MiB, bound %d MiB", rss>>20, maxAttackRSS>>20)
	} else {
		t.Logf("server peak RSS %d MiB", rss>>20)
	}
}

// attackTarget is a server on a file store with one live scope, and what it
// held before the attack.
type attackTarget struct {
	*server
	log     string
	before  []byte
	history []byte
}

func startTarget(t *testing.T, args ...string) *attackTarget {
	t.Helper()
	log := filepath.Join(t.TempDir(), "var-log.jsonl")
	s := startServer(t, append([]string{"--store", "file:" + log}, args...)...)
	rev := createRev(t, s.Base, "safe.scope", map[string]any{"v": 1})
	activate(t, s.Base, "safe.scope", rev, 0)
	before, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return &attackTarget{server: s, log: log, before: before, history: call(t, "GET", s.Base+"/admin/history?scope=safe.scope", nil).body}
}

// unchanged fails when the log or the live scope's history changed.
func (a *attackTarget) unchanged(t *testing.T) {
	t.Helper()
	after, err := os.ReadFile(a.log)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, a.before) {
		t.Fatalf("the attack reached the log:\n%.300s", after[len(a.before):])
	}
	if h := call(t, "GET", a.Base+"/admin/history?scope=safe.scope", nil).body; !bytes.Equal(h, a.history) {
		t.Fatalf("history changed:\n%s", h)
	}
}

// TestAttackDeepDocumentSurvivesRestart: a document one level past the
// depth limit is refused before anything is stored, and one at the limit is
// stored, acknowledged and read back after a restart (the file store's
// reader once stopped short of what the API accepted, and the next restart
// refused the log or cut the acknowledged line).
func TestAttackDeepDocumentSurvivesRestart(t *testing.T) {
	a := startTarget(t)
	deep := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	expect(t, call(t, "POST", a.Base+"/admin/revisions", `{"scope":"deep.doc","document":`+deep(65)+`}`), 400, "limit-exceeded")
	expect(t, call(t, "POST", a.Base+"/admin/revisions", `{"scope":"deep.doc","document":`+deep(1002)+`}`), 400, "limit-exceeded")
	a.unchanged(t)
	a.checkRSS(t)
	rev := createRev(t, a.Base, "deep.doc", json64(64))
	activate(t, a.Base, "deep.doc", rev, 0)
	a.stop()
	s := startServer(t, "--store", "file:"+a.log)
	got := expect(t, call(t, "GET", s.Base+"?key=deep.doc", nil), 200, "")
	if str(t, got, "revision") != rev {
		t.Fatalf("after restart the head is %v", got)
	}
}

func json64(depth int) any {
	var v any = 1
	for i := 0; i < depth; i++ {
		v = []any{v}
	}
	return v
}

// TestAttackForgedActor: the actor a client writes never replaces who its
// token says it is.
func TestAttackForgedActor(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops-secret-token id=ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--tokens", tokens)
	auth := []string{"Authorization", "Bearer ops-secret-token"}
	a := call(t, "POST", s.Base+"/admin/revisions", map[string]any{"scope": "a.b", "document": 1, "actor": "root"}, auth...)
	if a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	h := call(t, "GET", s.Base+"/admin/history?scope=a.b", nil, auth...)
	if !bytes.Contains(h.body, []byte(`"actor":"ops","onBehalfOf":"root"`)) {
		t.Fatalf("history %s", h.body)
	}
	if bytes.Contains(h.body, []byte("ops-secret-token")) {
		t.Fatal("the history holds the token")
	}
}

// TestAttackCrossSiteWrites: with no tokens configured, a page on another
// site cannot create or activate: not with a form, not with text/plain,
// not with a rebound host name.
func TestAttackCrossSiteWrites(t *testing.T) {
	a := startTarget(t)
	body := `{"scope":"evil.write","document":{"x":1}}`
	for _, c := range []struct {
		header []string
		status int
	}{
		{[]string{"Content-Type", "text/plain"}, 415},
		{[]string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{[]string{"Content-Type", "application/json", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403},
	} {
		got := rawPost(t, a.URL, "/vars/admin/revisions", "127.0.0.1", body, c.header...)
		if got != c.status {
			t.Errorf("headers %v: %d, want %d", c.header, got, c.status)
		}
	}
	if got := rawPost(t, a.URL, "/vars/admin/revisions", "rebound.evil.example", body, "Content-Type", "application/json"); got != 421 {
		t.Errorf("rebound host: %d, want 421", got)
	}
	a.unchanged(t)
}

// rawPost sends one POST over a fresh connection with the given Host and
// returns the status.
func rawPost(t *testing.T, root, path, host, body string, header ...string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(root, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n", path, host, len(body))
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read status: %v", err)
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("status line %q", line)
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestAttackWholeBodyBeforeReading: a client that writes an over-limit body
// whole before it reads gets the 413, every time, not a broken pipe.
func TestAttackWholeBodyBeforeReading(t *testing.T) {
	a := startTarget(t)
	body := `{"scope":"big.one","document":"` + strings.Repeat("x", 1<<20+100<<10) + `"}`
	for i := 0; i < 8; i++ {
		conn, err := net.Dial("tcp", strings.TrimPrefix(a.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		tc := conn.(*net.TCPConn)
		_ = tc.SetWriteBuffer(32 << 10)
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		req := fmt.Sprintf("POST /vars/admin/revisions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatalf("attempt %d: the server reset the connection while the body was sent: %v", i, err)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil || !strings.Contains(line, " 413 ") {
			t.Fatalf("attempt %d: %q %v", i, line, err)
		}
	}
	a.unchanged(t)
	a.checkRSS(t)
}

// TestAttackConnectGzipBomb: a Connect Subscribe of 512 KiB that inflates to
// 512 MiB, sent without a token, is refused without the server's memory
// following it.
func TestAttackConnectGzipBomb(t *testing.T) {
	a := startTarget(t)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zero := make([]byte, 1<<20)
	for i := 0; i < 512; i++ {
		_, _ = zw.Write(zero)
	}
	_ = zw.Close()
	env := make([]byte, 5, 5+zipped.Len())
	env[0] = 1 // compressed
	bin.BigEndian.PutUint32(env[1:], uint32(zipped.Len()))
	env = append(env, zipped.Bytes()...)
	req, err := http.NewRequest("POST", a.URL+"/varplane.v1.PushService/Subscribe", bytes.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+proto")
	req.Header.Set("Connect-Content-Encoding", "gzip")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if !bytes.Contains(body, []byte("resource_exhausted")) && resp.StatusCode < 400 {
		t.Fatalf("the bomb was not refused: %d %s", resp.StatusCode, body)
	}
	a.unchanged(t)
	a.checkRSS(t)
}

// TestAttackSubscriberSlots: one read token opening stream after stream
// meets its own cap, and another token still subscribes.
func TestAttackSubscriberSlots(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("greedy-token id=greedy kinds=read\nother-token id=other kinds=read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Every client here shares the loopback address: the per-address cap
	// (a quarter of --max-subscribers by default) is TestAttackStreamCaps' case.
	s := startServer(t, "--tokens", tokens, "--max-subscribers", "20", "--max-subscribers-per-token", "5", "--max-subscribers-per-addr", "20")
	open := func(token string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", s.Base+"/watch?key=a.b", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return (&http.Client{}).Do(req)
	}
	var held []*http.Response
	defer func() {
		for _, r := range held {
			r.Body.Close()
		}
	}()
	for i := 0; i < 5; i++ {
		r, err := open("greedy-token")
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("stream %d of the greedy token: %v %v", i, err, r)
		}
		held = append(held, r)
	}
	r, err := open("greedy-token")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 503 || !bytes.Contains(body, []byte("too-many-subscribers")) {
		t.Fatalf("the sixth stream of one token: %d %s", r.StatusCode, body)
	}
	r, err = open("other-token")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("another token is locked out: %v %v", err, r)
	}
	held = append(held, r)
}
