package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// env holds what several scenarios share: the built varplane binary and
// what its serve command supports.
type env struct {
	cfg *config

	buildOnce sync.Once
	bin       string
	buildErr  error
	serveHelp string
}

func newEnv(cfg *config) *env { return &env{cfg: cfg} }

func (e *env) close() {}

// varplaneBin builds ../cmd/varplane once into the temp dir.
func (e *env) varplaneBin() (string, error) {
	e.buildOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(e.cfg.repo, "cmd", "varplane")); err != nil {
			e.buildErr = fmt.Errorf("cmd/varplane not present")
			return
		}
		out := filepath.Join(e.cfg.tmp, "varplane")
		t0 := time.Now()
		// A tree that is being edited may fail to build for a moment: try
		// a few times before reporting every varplane side as unmeasured.
		for attempt := 1; ; attempt++ {
			cmd := exec.Command("go", "build", "-o", out, "./cmd/varplane")
			cmd.Dir = e.cfg.repo
			b, err := cmd.CombinedOutput()
			if err == nil {
				break
			}
			if attempt == 4 {
				e.buildErr = fmt.Errorf("go build ./cmd/varplane: %v: %s", err, lastLines(string(b), 8))
				return
			}
			logf("go build ./cmd/varplane failed (attempt %d), retrying in 10s: %s", attempt, lastLines(string(b), 2))
			time.Sleep(10 * time.Second)
		}
		logf("built varplane in %.1fs", time.Since(t0).Seconds())
		help, _ := exec.Command(out, "serve", "--help").CombinedOutput()
		e.serveHelp = string(help)
		if !e.hasFlag("addr") || !e.hasFlag("store") {
			e.buildErr = fmt.Errorf("varplane serve lacks --addr/--store flags yet")
			return
		}
		e.bin = out
	})
	return e.bin, e.buildErr
}

func (e *env) hasFlag(name string) bool {
	return strings.Contains(e.serveHelp, "-"+name+" ") || strings.Contains(e.serveHelp, "-"+name+"\n") ||
		strings.Contains(e.serveHelp, "-"+name+"=") || strings.Contains(e.serveHelp, "-"+name+"\t")
}

// vpServer is one running "varplane serve".
type vpServer struct {
	p       *proc
	addr    string // host:port of the HTTP API
	base    string // http://addr/vars
	rpcAddr string // host:port of gRPC, "" when not served
	// hasWatch: the binary serves the multiplexed gRPC Watch (it has
	// --grpc-max-watches).
	hasWatch bool
	log      string
}

// startVarplane runs "varplane serve" on a free loopback port over store
// (e.g. "file:/tmp/x/log.jsonl"), with gRPC on a second port when the
// binary supports --rpc-addr, and waits until the HTTP API answers.
func (e *env) startVarplane(ctx context.Context, name, store string, extra ...string) (*vpServer, error) {
	bin, err := e.varplaneBin()
	if err != nil {
		return nil, err
	}
	s := &vpServer{addr: fmt.Sprintf("127.0.0.1:%d", mustFreePort()), log: filepath.Join(e.cfg.tmp, "varplane-"+name+".log")}
	s.base = "http://" + s.addr + "/vars"
	args := []string{"serve", "--addr", s.addr, "--store", store}
	if e.hasFlag("rpc-addr") {
		s.rpcAddr = fmt.Sprintf("127.0.0.1:%d", mustFreePort())
		args = append(args, "--rpc-addr", s.rpcAddr)
		s.hasWatch = e.hasFlag("grpc-max-watches")
	}
	args = append(args, extra...)
	s.p, err = startProc("varplane-"+name, s.log, bin, args...)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		s.p.stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls a read until the server answers with any HTTP status.
func (s *vpServer) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: time.Second}
	for {
		if s.p.exited() {
			return fmt.Errorf("varplane exited: %v: %s", s.p.err, lastLines(readFile(s.log), 6))
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"?key=bench.ready", nil)
		resp, err := hc.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("varplane not ready after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *vpServer) stop() {
	if s != nil {
		s.p.stop()
	}
}

// admin is a keep-alive HTTP/1.1 client of the admin API, one connection
// per admin value, on the harness's minimal client (rawhttp.go) rather than
// net/http's: net/http's Transport hands each request to a writing and a
// reading goroutine of its own, which on this 2-core machine cost a
// one-writer commit about 0.2 ms of latency and every commit CPU that the
// servers under test share (etcd's side has clientv3 for the same part).
// Not safe for concurrent use.
type admin struct {
	base string // http://host:port/prefix
	addr string // host:port
	path string // the prefix of base, e.g. /vars
	raw  *rawConn
	buf  []byte
}

func newAdmin(base string) *admin {
	u, err := url.Parse(base)
	if err != nil {
		panic(fmt.Sprintf("admin base %q: %v", base, err))
	}
	return &admin{base: base, addr: u.Host, path: u.Path}
}

func (a *admin) close() {
	if a.raw != nil {
		a.raw.close()
		a.raw = nil
	}
}

// apiError is a non-2xx answer of the admin API.
type apiError struct {
	Status            int
	Code              string  `json:"code"`
	Message           string  `json:"error"`
	CurrentGeneration *uint64 `json:"currentGeneration"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// post sends body to path (under the base's prefix) and decodes a 2xx
// answer into out; any other status is an *apiError. ctx is checked before
// the request; the connection's own deadline (10 s) bounds the request.
func (a *admin) post(ctx context.Context, path string, body []byte, out any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.raw == nil {
		r, err := dialRaw(a.addr)
		if err != nil {
			return err
		}
		a.raw = r
	}
	status, b, buf, err := a.raw.post(a.buf, a.path+path, body)
	a.buf = buf
	if err != nil {
		return err
	}
	if status/100 != 2 {
		ae := &apiError{Status: status}
		_ = json.Unmarshal(b, ae)
		return ae
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// create stores doc as a revision of scope and returns the revision.
func (a *admin) create(ctx context.Context, scope string, doc []byte) (string, error) {
	body := make([]byte, 0, len(doc)+len(scope)+32)
	body = append(body, `{"scope":"`...)
	body = append(body, scope...)
	body = append(body, `","document":`...)
	body = append(body, doc...)
	body = append(body, '}')
	var out struct {
		Revision string `json:"revision"`
	}
	if err := a.post(ctx, "/admin/revisions", body, &out); err != nil {
		return "", fmt.Errorf("create %s: %w", scope, err)
	}
	return out.Revision, nil
}

// activate makes rev the head of scope if its generation is expected. On a
// conflict it returns conflict=true and the current generation.
func (a *admin) activate(ctx context.Context, scope, rev string, expected uint64) (gen uint64, conflict bool, err error) {
	body := fmt.Appendf(nil, `{"scope":%q,"revision":%q,"expectedGeneration":%d}`, scope, rev, expected)
	var out struct {
		Generation uint64 `json:"generation"`
	}
	err = a.post(ctx, "/admin/activate", body, &out)
	if ae, ok := err.(*apiError); ok && ae.Status == http.StatusConflict {
		if ae.CurrentGeneration != nil {
			return *ae.CurrentGeneration, true, nil
		}
		return 0, true, fmt.Errorf("409 without currentGeneration")
	}
	if err != nil {
		return 0, false, fmt.Errorf("activate %s: %w", scope, err)
	}
	return out.Generation, false, nil
}

// commit creates doc and activates it at expected+1.
func (a *admin) commit(ctx context.Context, scope string, doc []byte, expected uint64) (uint64, error) {
	rev, err := a.create(ctx, scope, doc)
	if err != nil {
		return 0, err
	}
	gen, conflict, err := a.activate(ctx, scope, rev, expected)
	if err == nil && conflict {
		err = fmt.Errorf("unexpected conflict on %s: current %d, expected %d", scope, gen, expected)
	}
	return gen, err
}

// makeDoc returns a JSON object of exactly size bytes, distinct per (tag, n).
// Its keys are in canonical (RFC 8785) order and it holds only an integer and
// plain ASCII strings, so the document is its own canonical form.
func makeDoc(size int, tag string, n int) []byte {
	head := fmt.Sprintf(`{"n":%d,"pad":"`, n)
	tail := fmt.Sprintf(`","tag":%q}`, tag)
	pad := size - len(head) - len(tail)
	if pad < 0 {
		pad = 0
	}
	b := make([]byte, 0, size)
	b = append(b, head...)
	for i := 0; i < pad; i++ {
		b = append(b, 'a'+byte(i%26))
	}
	return append(b, tail...)
}

// waitStatus polls GET base+query until it answers want.
func (s *vpServer) waitStatus(ctx context.Context, query string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 5 * time.Second}
	last := 0
	for {
		if s.p.exited() {
			return fmt.Errorf("varplane exited: %v: %s", s.p.err, lastLines(readFile(s.log), 6))
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", s.base+query, nil)
		if resp, err := hc.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.StatusCode
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("GET %s: want %d, last %d after %v", query, want, last, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
