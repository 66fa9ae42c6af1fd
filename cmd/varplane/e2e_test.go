package main

// End-to-end tests: the real binary, built once in TestMain, started on a
// free port and driven over HTTP and through its own client commands.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the varplane binary under test, built by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "varplane-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "varplane")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build varplane:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one running `varplane serve` process.
type server struct {
	t    testing.TB
	cmd  *exec.Cmd
	URL  string // root URL, e.g. http://127.0.0.1:41234
	Base string // the var API's base URL, e.g. http://127.0.0.1:41234/vars
	done chan struct{}

	mu     sync.Mutex
	stderr bytes.Buffer
	exit   error
}

var listenRE = regexp.MustCompile(`msg="varplane listening" url=(\S+) base=(\S*)`)

// startServer runs `varplane serve --addr 127.0.0.1:0 args…` and waits for
// the URL it logs. The process is stopped (SIGTERM) at cleanup.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	return startServe(t, append([]string{"--addr", "127.0.0.1:0", "--rpc-addr", "127.0.0.1:0"}, args...)...)
}

// startServe runs `varplane serve args…` (and nothing else) as startServer
// does.
func startServe(t testing.TB, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	cmd.Dir = t.TempDir()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, done: make(chan struct{})}
	found := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case found <- [2]string{m[1], m[2]}:
				default:
				}
			}
		}
		err := cmd.Wait()
		s.mu.Lock()
		s.exit = err
		s.mu.Unlock()
		close(s.done)
	}()
	select {
	case m := <-found:
		s.URL, s.Base = m[0], m[0]+m[1]
	case <-s.done:
		t.Fatalf("varplane serve exited before listening:\n%s", s.logs())
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("varplane serve did not log its URL:\n%s", s.logs())
	}
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// stop sends SIGTERM and waits for the process; it reports a non-zero exit.
func (s *server) stop() {
	s.t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("varplane serve did not stop on SIGTERM:\n%s", s.logs())
		return
	}
	s.mu.Lock()
	err := s.exit
	s.mu.Unlock()
	if err != nil {
		s.t.Errorf("varplane serve exited with %v after SIGTERM:\n%s", err, s.logs())
	}
}

// answer is one HTTP response, body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body as an object.
func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, a.body)
	}
	return m
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// call sends one request; body may be a string, []byte or nil. Header pairs
// follow as name, value.
func call(t testing.TB, method, target string, body any, header ...string) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// expect checks the status and, when code is not empty, the error code.
func expect(t testing.TB, a answer, status int, code string) map[string]any {
	t.Helper()
	if a.status != status {
		t.Fatalf("status = %d, want %d; body %s", a.status, status, a.body)
	}
	if status == http.StatusNotModified {
		if len(a.body) != 0 {
			t.Fatalf("304 has a body: %q", a.body)
		}
		return nil
	}
	m := a.json(t)
	if code != "" {
		if got := m["code"]; got != code {
			t.Fatalf("code = %v, want %s; body %s", got, code, a.body)
		}
		if msg, _ := m["error"].(string); msg == "" {
			t.Fatalf("error body has no message: %s", a.body)
		}
	}
	return m
}

func q(scope string) string { return url.QueryEscape(scope) }

// num returns a JSON number field as an int.
func num(t testing.TB, m map[string]any, field string) int {
	t.Helper()
	f, ok := m[field].(float64)
	if !ok {
		t.Fatalf("field %s = %v (%T), want a number", field, m[field], m[field])
	}
	return int(f)
}

func str(t testing.TB, m map[string]any, field string) string {
	t.Helper()
	s, ok := m[field].(string)
	if !ok {
		t.Fatalf("field %s = %v (%T), want a string", field, m[field], m[field])
	}
	return s
}

// createRev creates doc in scope and returns its revision.
func createRev(t testing.TB, base, scope string, doc any, extra ...string) string {
	t.Helper()
	body := map[string]any{"scope": scope, "document": doc}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i]] = extra[i+1]
	}
	a := call(t, "POST", base+"/admin/revisions", body)
	if a.status != http.StatusCreated && a.status != http.StatusOK {
		t.Fatalf("create %s: %d %s", scope, a.status, a.body)
	}
	return str(t, a.json(t), "revision")
}

func activate(t testing.TB, base, scope, rev string, expected int) map[string]any {
	t.Helper()
	a := call(t, "POST", base+"/admin/activate", map[string]any{"scope": scope, "revision": rev, "expectedGeneration": expected})
	return expect(t, a, http.StatusOK, "")
}

// TestRouteTable drives every row of the route table over HTTP, under the
// reference system's base path.
func TestRouteTable(t *testing.T) {
	schemas := t.TempDir()
	if err := os.MkdirAll(filepath.Join(schemas, "agentic-lanes"), 0o755); err != nil {
		t.Fatal(err)
	}
	schema := `{"type":"object","properties":{"enabled":{"type":"boolean"}},"required":["enabled"],"additionalProperties":false}`
	if err := os.WriteFile(filepath.Join(schemas, "agentic-lanes", "v1.json"), []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--base", "/cnos/vars", "--store", "file:"+filepath.Join(t.TempDir(), "log.jsonl"), "--documents", schemas)
	b := s.Base
	if !strings.HasSuffix(b, "/cnos/vars") {
		t.Fatalf("base URL %s does not end in /cnos/vars", b)
	}
	const key = "agentic.lanes.vinci"
	doc1 := map[string]any{"enabled": true, "model_target_ref": "secret.ops.model"}
	doc2 := map[string]any{"enabled": false}
	var rev1, rev2 string

	t.Run("read before any activation is no-head", func(t *testing.T) {
		expect(t, call(t, "GET", b+"?key="+q(key), nil), 404, "no-head")
		expect(t, call(t, "GET", b+"?group=agentic", nil), 404, "no-head")
	})
	t.Run("read with a bad scope is bad-request", func(t *testing.T) {
		for _, query := range []string{"", "?key=", "?key=a..b", "?key=" + q(key) + "&key=" + q(key), "?key=a.b&group=a", "?group=a.b", "?key=agentic"} {
			expect(t, call(t, "GET", b+query, nil), 400, "bad-request")
		}
	})
	t.Run("revisions: 201 then 200 for the same content", func(t *testing.T) {
		a := call(t, "POST", b+"/admin/revisions", map[string]any{"scope": key, "document": doc1, "actor": "ops", "reason": "first"})
		m := expect(t, a, 201, "")
		rev1 = str(t, m, "revision")
		if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(rev1) {
			t.Fatalf("revision %q is not a sha256 digest", rev1)
		}
		if m["scope"] != key || m["created"] != true || num(t, m, "generation") != 0 {
			t.Fatalf("create answer = %s", a.body)
		}
		// The same document with its keys in another order is the same revision.
		a = call(t, "POST", b+"/admin/revisions", `{"scope":"`+key+`","document":{"model_target_ref":"secret.ops.model","enabled":true}}`)
		m = expect(t, a, 200, "")
		if m["created"] != false || m["revision"] != rev1 {
			t.Fatalf("re-create answer = %s, want created false and %s", a.body, rev1)
		}
		rev2 = createRev(t, b, key, doc2)
	})
	t.Run("revisions: invalid documents are 422 with issues", func(t *testing.T) {
		cases := []struct {
			name, body, issue string
		}{
			{"group shape", `{"scope":"agentic","document":{"other.x":1}}`, "var.group-scope-shape"},
			{"unknown schema", `{"scope":"` + key + `","document":{"enabled":true},"schemaId":"nope/v9"}`, "document.unknown-schema"},
			{"schema violation", `{"scope":"` + key + `","document":{"enabled":"yes"},"schemaId":"agentic-lanes/v1"}`, ""},
			{"unsafe integer", `{"scope":"` + key + `","document":{"n":9007199254740993}}`, "document.number-precision"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				m := expect(t, call(t, "POST", b+"/admin/revisions", c.body), 422, "revision-invalid")
				issues, _ := m["issues"].([]any)
				if len(issues) == 0 {
					t.Fatalf("no issues in %v", m)
				}
				first, _ := issues[0].(map[string]any)
				if c.issue != "" && first["code"] != c.issue {
					t.Fatalf("issue code = %v, want %s", first["code"], c.issue)
				}
			})
		}
		// A valid document against the schema is accepted.
		expect(t, call(t, "POST", b+"/admin/revisions", `{"scope":"agentic.lanes.schema","document":{"enabled":true},"schemaId":"agentic-lanes/v1"}`), 201, "")
	})
	t.Run("validate", func(t *testing.T) {
		m := expect(t, call(t, "POST", b+"/admin/validate", `{"document":{"enabled":true},"schemaId":"agentic-lanes/v1"}`), 200, "")
		if m["valid"] != true {
			t.Fatalf("valid = %v", m["valid"])
		}
		if issues, ok := m["issues"].([]any); !ok || len(issues) != 0 {
			t.Fatalf("issues = %v, want []", m["issues"])
		}
		m = expect(t, call(t, "POST", b+"/admin/validate", `{"document":{"wrong":1},"scope":"agentic"}`), 200, "")
		if m["valid"] != false || len(m["issues"].([]any)) == 0 {
			t.Fatalf("group shape not reported: %v", m)
		}
	})
	t.Run("activate: 200, 409 with generations, 404 for an unknown revision", func(t *testing.T) {
		m := activate(t, b, key, rev1, 0)
		if m["scope"] != key || num(t, m, "generation") != 1 || m["revision"] != rev1 {
			t.Fatalf("activate answer = %v", m)
		}
		if _, err := time.Parse(time.RFC3339Nano, str(t, m, "effectiveAt")); err != nil {
			t.Fatalf("effectiveAt: %v", err)
		}
		m = expect(t, call(t, "POST", b+"/admin/activate", map[string]any{"scope": key, "revision": rev2, "expectedGeneration": 0}), 409, "revision-conflict")
		if num(t, m, "expectedGeneration") != 0 || num(t, m, "currentGeneration") != 1 {
			t.Fatalf("conflict details = %v", m)
		}
		unknown := "sha256:" + strings.Repeat("0", 64)
		expect(t, call(t, "POST", b+"/admin/activate", map[string]any{"scope": key, "revision": unknown, "expectedGeneration": 1}), 404, "not-found")
		for _, body := range []string{
			`{"scope":"` + key + `","revision":"` + rev2 + `","expectedGeneraton":1}`,
			`{"scope":"` + key + `","revision":"` + rev2 + `","expectedGeneration":-1}`,
			`{"scope":"` + key + `","revision":"` + rev2 + `","expectedGeneration":"1"}`,
			`{"scope":"` + key + `","revision":"` + rev2 + `","expectedGeneration":1.5}`,
		} {
			expect(t, call(t, "POST", b+"/admin/activate", body), 400, "bad-request")
		}
	})
	t.Run("read: values keying, ETag and 304", func(t *testing.T) {
		a := call(t, "GET", b+"?key="+q(key), nil)
		m := expect(t, a, 200, "")
		if got, want := a.header.Get("ETag"), `"`+rev1+`"`; got != want {
			t.Fatalf("ETag = %s, want %s", got, want)
		}
		if num(t, m, "generation") != 1 || m["revision"] != rev1 || m["effectiveAt"] == nil {
			t.Fatalf("read = %s", a.body)
		}
		values, _ := m["values"].(map[string]any)
		inner, _ := values[key].(map[string]any)
		if len(values) != 1 || inner["enabled"] != true || inner["model_target_ref"] != "secret.ops.model" {
			t.Fatalf("values = %v, want {%q: doc}", m["values"], key)
		}
		for _, inm := range []string{`"` + rev1 + `"`, rev1, `"sha256:x", "` + rev1 + `"`, "*"} {
			expect(t, call(t, "GET", b+"?key="+q(key), nil, "If-None-Match", inm), 304, "")
		}
		expect(t, call(t, "GET", b+"?key="+q(key), nil, "If-None-Match", `"`+rev2+`"`), 200, "")

		// A group passes its document through.
		grev := createRev(t, b, "agentic", map[string]any{"agentic.a": 1, "agentic.b": map[string]any{"c": true}})
		activate(t, b, "agentic", grev, 0)
		m = expect(t, call(t, "GET", b+"?group=agentic", nil), 200, "")
		values, _ = m["values"].(map[string]any)
		if len(values) != 2 || values["agentic.a"] != float64(1) {
			t.Fatalf("group values = %v", m["values"])
		}
	})
	t.Run("rollback: 200 as a new generation, 409, 404", func(t *testing.T) {
		activate(t, b, key, rev2, 1)
		m := expect(t, call(t, "POST", b+"/admin/rollback", map[string]any{"scope": key, "expectedGeneration": 2}), 200, "")
		if num(t, m, "generation") != 3 || m["revision"] != rev1 || m["scope"] != key || m["effectiveAt"] == nil {
			t.Fatalf("rollback = %v", m)
		}
		m = expect(t, call(t, "POST", b+"/admin/rollback", map[string]any{"scope": key, "expectedGeneration": 2}), 409, "revision-conflict")
		if num(t, m, "currentGeneration") != 3 {
			t.Fatalf("conflict = %v", m)
		}
		m = expect(t, call(t, "POST", b+"/admin/rollback", map[string]any{"scope": key, "expectedGeneration": 3, "toGeneration": 2}), 200, "")
		if num(t, m, "generation") != 4 || m["revision"] != rev2 {
			t.Fatalf("rollback toGeneration = %v", m)
		}
		m = expect(t, call(t, "POST", b+"/admin/rollback", map[string]any{"scope": key, "expectedGeneration": 4, "toRevision": rev1}), 200, "")
		if num(t, m, "generation") != 5 || m["revision"] != rev1 {
			t.Fatalf("rollback toRevision = %v", m)
		}
		expect(t, call(t, "POST", b+"/admin/rollback", map[string]any{"scope": key, "expectedGeneration": 5, "toRevision": "sha256:" + strings.Repeat("1", 64)}), 404, "not-found")
		expect(t, call(t, "POST", b+"/admin/rollback", map[string]any{"scope": key, "expectedGeneration": 5, "toGeneration": 99}), 404, "not-found")
	})
	t.Run("status", func(t *testing.T) {
		m := expect(t, call(t, "GET", b+"/admin/status?scope="+q(key), nil), 200, "")
		if m["scope"] != key || m["active"] != true || num(t, m, "generation") != 5 || m["revision"] != rev1 || m["source"] != "file" {
			t.Fatalf("status = %v", m)
		}
		// The rejected group document above is the group's last rejection.
		m = expect(t, call(t, "GET", b+"/admin/status?scope=agentic", nil), 200, "")
		if m["lastRejected"] == nil {
			t.Fatalf("status of agentic has no lastRejected: %v", m)
		}
		expect(t, call(t, "GET", b+"/admin/status", nil), 400, "bad-request")
		expect(t, call(t, "GET", b+"/admin/status?scope=a..b", nil), 400, "bad-request")
		expect(t, call(t, "GET", b+"/admin/status?scope=a&scope=b", nil), 400, "bad-request")
	})
	t.Run("deactivate: 200 with active false, cascade, 409", func(t *testing.T) {
		child := createRev(t, b, "agentic.lanes", map[string]any{"x": 1})
		activate(t, b, "agentic.lanes", child, 0)
		m := expect(t, call(t, "POST", b+"/admin/deactivate", map[string]any{"scope": "agentic.lanes", "expectedGeneration": 1, "reason": "pause"}), 200, "")
		if m["scope"] != "agentic.lanes" || m["active"] != false || num(t, m, "generation") != 2 {
			t.Fatalf("deactivate = %v", m)
		}
		// The descendant agentic.lanes.vinci went with it, at its own next generation.
		expect(t, call(t, "GET", b+"?key="+q(key), nil), 404, "no-head")
		st := expect(t, call(t, "GET", b+"/admin/status?scope="+q(key), nil), 200, "")
		if st["active"] != false || num(t, st, "generation") != 6 {
			t.Fatalf("descendant status = %v", st)
		}
		m = expect(t, call(t, "POST", b+"/admin/deactivate", map[string]any{"scope": "agentic.lanes", "expectedGeneration": 1}), 409, "revision-conflict")
		if num(t, m, "currentGeneration") != 2 {
			t.Fatalf("conflict = %v", m)
		}
	})
	t.Run("history", func(t *testing.T) {
		m := expect(t, call(t, "GET", b+"/admin/history?scope="+q(key), nil), 200, "")
		events, _ := m["events"].([]any)
		var kinds []string
		for _, e := range events {
			kinds = append(kinds, e.(map[string]any)["kind"].(string))
		}
		want := "revision-created revision-created rejected rejected rejected activated activated activated activated activated deactivated"
		if got := strings.Join(kinds, " "); got != want {
			t.Fatalf("history kinds:\n got %s\nwant %s", got, want)
		}
		last := events[len(events)-1].(map[string]any)
		if last["reason"] != "cascade:agentic.lanes" {
			t.Fatalf("cascade entry reason = %v", last["reason"])
		}
		rollback := events[7].(map[string]any)
		if r, _ := rollback["reason"].(string); !strings.HasPrefix(r, "rollback to ") {
			t.Fatalf("rollback reason = %q", r)
		}
		expect(t, call(t, "GET", b+"/admin/history", nil), 400, "bad-request")
	})
	t.Run("replay", func(t *testing.T) {
		m := expect(t, call(t, "GET", b+"/admin/replay?scope="+q(key)+"&toGeneration=2", nil), 200, "")
		if m["scope"] != key || num(t, m, "generation") != 2 || m["revision"] != rev2 || m["active"] != true {
			t.Fatalf("replay = %v", m)
		}
		m = expect(t, call(t, "GET", b+"/admin/replay?scope="+q(key)+"&toGeneration=6", nil), 200, "")
		if m["active"] != false {
			t.Fatalf("replay after the cascade = %v, want inactive", m)
		}
		expect(t, call(t, "GET", b+"/admin/replay?scope="+q(key)+"&toGeneration=99", nil), 404, "not-found")
		for _, query := range []string{"?scope=" + q(key), "?toGeneration=1", "?scope=" + q(key) + "&toGeneration=-1", "?scope=" + q(key) + "&toGeneration=x"} {
			expect(t, call(t, "GET", b+"/admin/replay"+query, nil), 400, "bad-request")
		}
	})
	t.Run("unknown route 404, wrong method 405", func(t *testing.T) {
		expect(t, call(t, "GET", b+"/admin/nope", nil), 404, "")
		a := call(t, "GET", b+"/admin/activate", nil)
		if a.status != 405 || a.header.Get("Allow") == "" {
			t.Fatalf("GET activate = %d (Allow %q), want 405 with Allow", a.status, a.header.Get("Allow"))
		}
		expect(t, call(t, "DELETE", b+"?key="+q(key), nil), 405, "")
	})
	t.Run("health, readiness, metrics", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			if a := call(t, "GET", s.URL+p, nil); a.status != 200 {
				t.Fatalf("%s = %d %s", p, a.status, a.body)
			}
		}
		a := call(t, "GET", s.URL+"/metrics", nil)
		if a.status != 200 || !bytes.Contains(a.body, []byte("varplane_")) {
			t.Fatalf("/metrics = %d, no varplane_ series", a.status)
		}
	})
}

// TestRestartKeepsHeadHistoryAndIdempotency stops the server in the middle
// and starts it again on the same log.
func TestRestartKeepsHeadHistoryAndIdempotency(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "var-log.jsonl")
	s := startServer(t, "--store", "file:"+logPath)
	const key = "svc.checkout.flags"
	rev := createRev(t, s.Base, key, map[string]any{"beta": true})
	actBody := map[string]any{"scope": key, "revision": rev, "expectedGeneration": 0, "idempotencyKey": "deploy-42", "actor": "ci"}
	first := expect(t, call(t, "POST", s.Base+"/admin/activate", actBody), 200, "")
	read := call(t, "GET", s.Base+"?key="+q(key), nil)
	history := call(t, "GET", s.Base+"/admin/history?scope="+q(key), nil)
	s.stop()
	logBefore, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}

	s2 := startServer(t, "--store", "file:"+logPath)
	if got := call(t, "GET", s2.Base+"?key="+q(key), nil); got.status != 200 || !bytes.Equal(got.body, read.body) || got.header.Get("ETag") != read.header.Get("ETag") {
		t.Fatalf("read after restart = %d %s, want %s", got.status, got.body, read.body)
	}
	if got := call(t, "GET", s2.Base+"/admin/history?scope="+q(key), nil); !bytes.Equal(got.body, history.body) {
		t.Fatalf("history after restart:\n got %s\nwant %s", got.body, history.body)
	}
	// The replayed activation answers the original result and appends nothing.
	again := expect(t, call(t, "POST", s2.Base+"/admin/activate", actBody), 200, "")
	for _, f := range []string{"scope", "generation", "revision", "effectiveAt"} {
		if fmt.Sprint(again[f]) != fmt.Sprint(first[f]) {
			t.Fatalf("replayed %s = %v, want %v", f, again[f], first[f])
		}
	}
	// The same key for a different request is refused.
	other := map[string]any{"scope": key, "revision": rev, "expectedGeneration": 1, "idempotencyKey": "deploy-42"}
	expect(t, call(t, "POST", s2.Base+"/admin/activate", other), 422, "idempotency-key-reused")
	if got := call(t, "GET", s2.Base+"/admin/history?scope="+q(key), nil); !bytes.Equal(got.body, history.body) {
		t.Fatalf("history grew after an idempotent replay:\n got %s\nwant %s", got.body, history.body)
	}
	st := expect(t, call(t, "GET", s2.Base+"/admin/status?scope="+q(key), nil), 200, "")
	if num(t, st, "generation") != 1 {
		t.Fatalf("generation after replay = %v, want 1", st["generation"])
	}
	s2.stop()
	logAfter, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(logBefore, logAfter) {
		t.Fatalf("the log changed after the restart:\n%s", logAfter[len(logBefore):])
	}
}

// TestMemoryStoreReplayUnsupported: the memory store keeps no log.
func TestMemoryStoreReplayUnsupported(t *testing.T) {
	s := startServer(t, "--store", "memory:")
	rev := createRev(t, s.Base, "a.b", map[string]any{"x": 1})
	activate(t, s.Base, "a.b", rev, 0)
	expect(t, call(t, "GET", s.Base+"/admin/replay?scope=a.b&toGeneration=1", nil), 400, "store-unsupported")
	m := expect(t, call(t, "GET", s.Base+"/admin/status?scope=a.b", nil), 200, "")
	if m["source"] != "memory" {
		t.Fatalf("source = %v, want memory", m["source"])
	}
}

// TestHostileInput sends malformed and oversized requests and checks that
// each is refused with the right 4xx and that nothing reaches the log.
func TestHostileInput(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "var-log.jsonl")
	s := startServer(t, "--store", "file:"+logPath)
	b := s.Base
	const key = "safe.scope"
	rev := createRev(t, b, key, map[string]any{"v": 1})
	activate(t, b, key, rev, 0)
	status := call(t, "GET", b+"/admin/status?scope="+q(key), nil).body
	history := call(t, "GET", b+"/admin/history?scope="+q(key), nil).body
	logBefore, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}

	huge := `{"scope":"` + key + `","document":{"blob":"` + strings.Repeat("x", 2<<20) + `"}}`
	deep := `{"scope":"` + key + `","document":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
	deepObj := `{"scope":"` + key + `","document":` + strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000) + `}`
	posts := []struct {
		name, path string
		body       []byte
		status     int
		code       string
	}{
		{"2 MiB body", "/admin/revisions", []byte(huge), 413, "payload-too-large"},
		{"2 MiB activate", "/admin/activate", []byte(huge), 413, "payload-too-large"},
		{"truncated JSON", "/admin/revisions", []byte(`{"scope":"` + key + `","document":{"v":`), 400, "bad-request"},
		{"truncated activate", "/admin/activate", []byte(`{"scope":"` + key + `","revision":"` + rev), 400, "bad-request"},
		{"empty body", "/admin/revisions", nil, 400, "bad-request"},
		{"not an object", "/admin/revisions", []byte(`[1,2]`), 400, "bad-request"},
		{"trailing garbage", "/admin/revisions", []byte(`{"scope":"` + key + `","document":{}} {}`), 400, "bad-request"},
		{"100k-deep arrays", "/admin/revisions", []byte(deep), 0, ""},
		{"100k-deep objects", "/admin/revisions", []byte(deepObj), 0, ""},
		{"non-UTF-8 document", "/admin/revisions", []byte("{\"scope\":\"" + key + "\",\"document\":{\"v\":\"\xff\xfe\"}}"), 400, "bad-request"},
		{"non-UTF-8 scope", "/admin/revisions", []byte("{\"scope\":\"a.\xff\",\"document\":{}}"), 400, "bad-request"},
		{"unknown field", "/admin/revisions", []byte(`{"scope":"` + key + `","document":{},"schemaID":"x"}`), 400, "bad-request"},
		{"duplicate field", "/admin/activate", []byte(`{"scope":"` + key + `","scope":"x.y","revision":"` + rev + `","expectedGeneration":1}`), 400, "bad-request"},
		{"document missing", "/admin/revisions", []byte(`{"scope":"` + key + `"}`), 400, "bad-request"},
		{"bad revision", "/admin/activate", []byte(`{"scope":"` + key + `","revision":"md5:00","expectedGeneration":1}`), 400, "bad-request"},
		{"huge generation", "/admin/activate", []byte(`{"scope":"` + key + `","revision":"` + rev + `","expectedGeneration":1e400}`), 400, "bad-request"},
	}
	oddScopes := []string{"", ".", "a..b", "a b", "\x00", "a.", ".a", "a\tb", "a\nb", "a\u00a0b", strings.Repeat("s", 300), strings.Repeat("a.", 200) + "a"}
	for _, sc := range oddScopes {
		body, _ := json.Marshal(map[string]any{"scope": sc, "document": map[string]any{"v": 1}})
		posts = append(posts, struct {
			name, path string
			body       []byte
			status     int
			code       string
		}{fmt.Sprintf("create scope %q", trimTo(sc, 20)), "/admin/revisions", body, 400, "bad-request"})
		body, _ = json.Marshal(map[string]any{"scope": sc, "revision": rev, "expectedGeneration": 1})
		posts = append(posts, struct {
			name, path string
			body       []byte
			status     int
			code       string
		}{fmt.Sprintf("activate scope %q", trimTo(sc, 20)), "/admin/activate", body, 400, "bad-request"})
	}
	for _, p := range posts {
		t.Run(p.name, func(t *testing.T) {
			var body any
			if p.body != nil {
				body = p.body
			}
			a := call(t, "POST", b+p.path, body)
			if p.status == 0 { // deep nesting: any 4xx, never 5xx nor success
				if a.status < 400 || a.status >= 500 {
					t.Fatalf("status = %d, want 4xx; body %.200s", a.status, a.body)
				}
				if a.status == 422 {
					t.Fatalf("deep nesting reached validation (422) instead of being refused as malformed")
				}
				return
			}
			expect(t, a, p.status, p.code)
		})
	}
	gets := []string{
		"?key=" + q(key) + "&key=" + q(key),
		"?key=a&key=b",
		"?group=safe&group=safe",
		"?key=%ff.x",
		"?key=a%00.b",
		"?key=%zz",
		"?key=" + strings.Repeat("k", 300) + ".x",
		"/admin/status?scope=" + q(key) + "&scope=" + q(key),
		"/admin/history?scope=a%20b",
		"/admin/replay?scope=" + q(key) + "&toGeneration=1&toGeneration=1",
	}
	for _, g := range gets {
		t.Run("GET "+trimTo(g, 40), func(t *testing.T) {
			expect(t, call(t, "GET", b+g, nil), 400, "bad-request")
		})
	}

	if got := call(t, "GET", b+"/admin/status?scope="+q(key), nil).body; !bytes.Equal(got, status) {
		t.Fatalf("status changed:\n got %s\nwant %s", got, status)
	}
	if got := call(t, "GET", b+"/admin/history?scope="+q(key), nil).body; !bytes.Equal(got, history) {
		t.Fatalf("history changed:\n got %s\nwant %s", got, history)
	}
	logAfter, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(logBefore, logAfter) {
		t.Fatalf("hostile requests reached the log:\n%.500s", logAfter[len(logBefore):])
	}
	// The server is still healthy.
	expect(t, call(t, "GET", b+"?key="+q(key), nil), 200, "")
}

func trimTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// TestStaticTokens: --tokens makes every request carry an accepted token.
func TestStaticTokens(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# CI\nci-token\nreader kinds=read prefixes=app.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--store", "memory:", "--tokens", tokens)
	b := s.Base
	create := `{"scope":"app.x","document":{"v":1}}`
	expect(t, call(t, "POST", b+"/admin/revisions", create), 401, "unauthorized")
	expect(t, call(t, "POST", b+"/admin/revisions", create, "Authorization", "Bearer wrong"), 403, "forbidden")
	expect(t, call(t, "GET", b+"?key=app.x", nil), 401, "unauthorized")
	expect(t, call(t, "GET", b+"/admin/status?scope=app.x", nil, "Authorization", "Bearer wrong"), 403, "forbidden")
	// A read-only token may read under its prefix, nothing else.
	expect(t, call(t, "POST", b+"/admin/revisions", create, "Authorization", "Bearer reader"), 403, "forbidden")
	expect(t, call(t, "GET", b+"/admin/status?scope=app.x", nil, "Authorization", "Bearer reader"), 403, "forbidden")
	expect(t, call(t, "GET", b+"?key=other.x", nil, "Authorization", "Bearer reader"), 403, "forbidden")
	expect(t, call(t, "GET", b+"?key=app.x", nil, "Authorization", "Bearer reader"), 404, "no-head")
	m := expect(t, call(t, "POST", b+"/admin/revisions", create, "Authorization", "Bearer ci-token"), 201, "")
	if m["scope"] != "app.x" {
		t.Fatalf("create = %v", m)
	}
	// The CLI sends VARPLANE_TOKEN.
	r := runCLI(t, []string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=ci-token"}, "", "status", "--scope", "app.x")
	if r.code != 0 || !strings.Contains(r.stdout, "generation:  0") {
		t.Fatalf("status with token: %+v", r)
	}
	r = runCLI(t, []string{"VARPLANE_SERVER=" + s.URL}, "", "status", "--scope", "app.x")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "error: unauthorized:") {
		t.Fatalf("status without token: %+v", r)
	}
}

// cliResult is one run of the binary as a client.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the binary with env (on top of a clean environment) and stdin.
func runCLI(t *testing.T, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// expectCLI returns a runner of the binary with env that fails the test
// when a run exits with another code than the one it wants.
func expectCLI(env []string) func(t *testing.T, want int, stdin string, args ...string) cliResult {
	return func(t *testing.T, want int, stdin string, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, env, stdin, args...)
		if r.code != want {
			t.Fatalf("varplane %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
		}
		return r
	}
}

// TestCLI runs the client commands against a real server, checking their
// output and exit codes.
func TestCLI(t *testing.T) {
	s := startServer(t)
	env := []string{"VARPLANE_SERVER=" + s.URL}
	run := expectCLI(env)
	const key = "agentic.lanes.vinci"
	var rev string
	t.Run("create from YAML on stdin", func(t *testing.T) {
		r := run(t, 0, "enabled: true\nmodel_target_ref: secret.ops.model\nlimits:\n  rpm: 60\n", "create", "--scope", key, "--actor", "ops", "-o", "json")
		var out struct {
			Revision string `json:"revision"`
			Created  bool   `json:"created"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.Created {
			t.Fatalf("create -o json = %q (%v)", r.stdout, err)
		}
		rev = out.Revision
		// The same content as JSON from a file is the same revision.
		f := filepath.Join(t.TempDir(), "doc.json")
		if err := os.WriteFile(f, []byte(`{"limits":{"rpm":60},"model_target_ref":"secret.ops.model","enabled":true}`), 0o644); err != nil {
			t.Fatal(err)
		}
		r = run(t, 0, "", "create", "--scope", key, "-f", f)
		if !strings.Contains(r.stdout, "unchanged") || !strings.Contains(r.stdout, rev) {
			t.Fatalf("create of the same content = %q", r.stdout)
		}
	})
	t.Run("activate, get, 304", func(t *testing.T) {
		r := run(t, 0, "", "activate", "--scope", key, "--revision", rev, "--expected-generation", "0")
		if want := "activated " + key + " generation 1 revision " + rev; strings.TrimSpace(r.stdout) != want {
			t.Fatalf("activate = %q, want %q", r.stdout, want)
		}
		r = run(t, 0, "", "get", "--key", key, "-o", "json")
		var read struct {
			Values map[string]map[string]any `json:"values"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &read); err != nil || read.Values[key]["enabled"] != true {
			t.Fatalf("get -o json = %q (%v)", r.stdout, err)
		}
		r = run(t, 0, "", "get", "--key", key, "--if-none-match", rev)
		if !strings.HasPrefix(r.stdout, "not modified") {
			t.Fatalf("get --if-none-match = %q", r.stdout)
		}
	})
	t.Run("refusals exit 1 with the code and details", func(t *testing.T) {
		r := run(t, 1, "", "activate", "--scope", key, "--revision", rev, "--expected-generation", "0")
		for _, want := range []string{"error: revision-conflict:", "currentGeneration: 1", "expectedGeneration: 0"} {
			if !strings.Contains(r.stderr, want) {
				t.Fatalf("conflict stderr %q lacks %q", r.stderr, want)
			}
		}
		r = run(t, 1, "", "activate", "--scope", key, "--revision", rev, "--expected-generation", "0", "-o", "json")
		var body struct {
			Code    string `json:"code"`
			Current int    `json:"currentGeneration"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &body); err != nil || body.Code != "revision-conflict" || body.Current != 1 {
			t.Fatalf("conflict -o json stdout = %q (%v)", r.stdout, err)
		}
		r = run(t, 1, "", "activate", "--scope", key, "--revision", "sha256:"+strings.Repeat("a", 64), "--expected-generation", "1")
		if !strings.Contains(r.stderr, "error: not-found:") {
			t.Fatalf("not-found stderr = %q", r.stderr)
		}
		r = run(t, 1, `{"other.x": 1}`, "create", "--scope", "agentic")
		if !strings.Contains(r.stderr, "error: revision-invalid:") || !strings.Contains(r.stderr, "var.group-scope-shape") {
			t.Fatalf("invalid stderr = %q", r.stderr)
		}
		r = run(t, 1, `{"other.x": 1}`, "validate", "--scope", "agentic")
		if !strings.Contains(r.stdout, "invalid: 1 issue(s)") {
			t.Fatalf("validate stdout = %q", r.stdout)
		}
		run(t, 0, `{"agentic.x": 1}`, "validate", "--scope", "agentic")
		r = run(t, 1, "", "get", "--group", "agentic")
		if !strings.Contains(r.stderr, "error: no-head:") {
			t.Fatalf("no-head stderr = %q", r.stderr)
		}
		r = run(t, 1, "", "status", "--scope", "a..b")
		if !strings.Contains(r.stderr, "error: bad-request:") {
			t.Fatalf("bad scope stderr = %q", r.stderr)
		}
	})
	t.Run("rollback, deactivate, history, replay, status", func(t *testing.T) {
		rev2 := strings.Fields(run(t, 0, `{"enabled": false}`, "create", "--scope", key).stdout)[3]
		run(t, 0, "", "activate", "--scope", key, "--revision", rev2, "--expected-generation", "1")
		r := run(t, 0, "", "rollback", "--scope", key, "--expected-generation", "2", "--reason", "bad deploy")
		if want := "rolled back " + key + " generation 3 revision " + rev; strings.TrimSpace(r.stdout) != want {
			t.Fatalf("rollback = %q, want %q", r.stdout, want)
		}
		r = run(t, 0, "", "deactivate", "--scope", key, "--expected-generation", "3")
		if strings.TrimSpace(r.stdout) != "deactivated "+key+" generation 4" {
			t.Fatalf("deactivate = %q", r.stdout)
		}
		r = run(t, 0, "", "history", "--scope", key)
		if n := strings.Count(r.stdout, "\n"); n != 7 { // header + 2 created + 3 activated + 1 deactivated
			t.Fatalf("history has %d lines, want 7:\n%s", n, r.stdout)
		}
		if !strings.Contains(r.stdout, "bad deploy") {
			t.Fatalf("history lacks the rollback reason:\n%s", r.stdout)
		}
		r = run(t, 0, "", "replay", "--scope", key, "--to-generation", "2", "-o", "json")
		var rp struct {
			Revision string `json:"revision"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rp); err != nil || rp.Revision != rev2 {
			t.Fatalf("replay -o json = %q (%v), want revision %s", r.stdout, err, rev2)
		}
		r = run(t, 0, "", "status", "--scope", key)
		if !strings.Contains(r.stdout, "state:       inactive") || !strings.Contains(r.stdout, "generation:  4") {
			t.Fatalf("status = %q", r.stdout)
		}
	})
	t.Run("usage errors exit 2", func(t *testing.T) {
		cases := [][]string{
			{},
			{"frobnicate"},
			{"status"},
			{"status", "--scope", "a.b", "extra"},
			{"activate", "--scope", "a.b", "--revision", rev},
			{"activate", "--scope", "a.b", "--revision", rev, "--expected-generation", "-1"},
			{"get"},
			{"get", "--key", "a.b", "--group", "a"},
			{"status", "--scope", "a.b", "--bogus"},
			{"status", "--scope", "a.b", "-o", "yaml"},
			{"status", "--scope", "a.b", "--server", "ftp://x"},
			{"rollback", "--scope", "a.b", "--expected-generation", "1", "--to-revision", rev, "--to-generation", "1"},
			{"create", "--scope", "a.b", "-f", filepath.Join(t.TempDir(), "missing.json")},
			{"serve", "--store", "postgres://localhost/db?bogus=1"},
			{"serve", "--store", "bogus:x"},
			{"serve", "--log-format", "xml"},
			{"serve", "--gc-headroom-bytes", "-1"},
		}
		for _, args := range cases {
			run(t, 2, "", args...)
		}
		r := run(t, 2, "mode: 010\n", "create", "--scope", "a.b")
		if !strings.Contains(r.stderr, "leading zero") {
			t.Fatalf("YAML with an ambiguous integer: %q", r.stderr)
		}
		r = run(t, 2, "", "serve", "--store", "postgres://localhost/db?bogus=1")
		if !strings.Contains(r.stderr, "unknown URL parameter(s) bogus") {
			t.Fatalf("postgres store with an unknown parameter: %q", r.stderr)
		}
	})
	t.Run("help exits 0", func(t *testing.T) {
		r := run(t, 0, "", "--help")
		for _, c := range commands {
			if !strings.Contains(r.stdout, "  "+c.name+" ") {
				t.Fatalf("--help does not list %s:\n%s", c.name, r.stdout)
			}
		}
		r = run(t, 0, "", "activate", "-h")
		if !strings.Contains(r.stderr, "-expected-generation") {
			t.Fatalf("activate -h: %q", r.stderr)
		}
	})
	t.Run("unreachable server exits 3", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		r := runCLI(t, []string{"VARPLANE_SERVER=http://" + addr}, "", "status", "--scope", "a.b")
		if r.code != ExitUnreachable || !strings.Contains(r.stderr, "unreachable") {
			t.Fatalf("unreachable: %+v", r)
		}
	})
}

// TestWatch follows the live stream with `varplane watch` and with a raw
// request, through a commit and a deactivation.
func TestWatch(t *testing.T) {
	s := startServer(t, "--store", "memory:")
	const key = "live.scope"
	rev := createRev(t, s.Base, key, map[string]any{"n": 1})
	activate(t, s.Base, key, rev, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd, lines, stderr := startWatchCLI(ctx, t, nil, "--server", s.URL, "--key", key)
	next := func(want string) {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("watch ended; stderr %s", stderr.String())
			}
			if !strings.HasPrefix(l, want) {
				t.Fatalf("watch printed %q, want prefix %q", l, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %q line from watch; stderr %s", want, stderr.String())
		}
	}
	next("head " + key + " generation 1 revision " + rev + ` values {"live.scope":{"n":1}}`)
	rev2 := createRev(t, s.Base, key, map[string]any{"n": 2})
	activate(t, s.Base, key, rev2, 1)
	next("head " + key + " generation 2 revision " + rev2)
	expect(t, call(t, "POST", s.Base+"/admin/deactivate", map[string]any{"scope": key, "expectedGeneration": 2}), 200, "")
	next("no-head " + key + " generation 3")
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch after SIGINT: %v; stderr %s", err, stderr.String())
	}
}

// startWatchCLI starts `varplane watch args…` with env (on top of PATH)
// until ctx is done, and returns it, the lines it prints (closed when its
// output ends) and its stderr.
func startWatchCLI(ctx context.Context, t *testing.T, env []string, args ...string) (*exec.Cmd, <-chan string, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary, append([]string{"watch"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines, stderr
}

// followWatch runs `varplane watch args…` with env until it printed n
// lines or 5 s passed, stops it (SIGINT) and returns the lines it printed
// and its stderr.
func followWatch(t *testing.T, env []string, n int, args ...string) (string, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd, lines, stderr := startWatchCLI(ctx, t, env, args...)
	var got []string
	deadline := time.After(5 * time.Second)
wait:
	for len(got) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				break wait
			}
			got = append(got, l)
		case <-deadline:
			break wait
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	return strings.Join(got, "\n"), stderr
}

// startRedis starts a private redis-server on a free port, stopped by PID at
// cleanup. It skips when redis-server is not installed, unless
// VARPLANE_REQUIRE_SERVICES is set.
func startRedis(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			t.Fatalf("redis-server is required (VARPLANE_REQUIRE_SERVICES is set): %v", err)
		}
		t.Skip("redis-server is not installed; skipping the Redis end-to-end test")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return "redis://" + addr + "/0?prefix=e2e"
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("private redis-server on %s did not start", addr)
	return ""
}

// TestRedisStore runs serve on a private Redis: the head, history and
// idempotency survive a restart of the server, and two servers on one Redis
// see each other's commits.
func TestRedisStore(t *testing.T) {
	redisURL := startRedis(t)
	s := startServer(t, "--store", redisURL)
	const key = "shared.flags"
	rev := createRev(t, s.Base, key, map[string]any{"on": true})
	act := map[string]any{"scope": key, "revision": rev, "expectedGeneration": 0, "idempotencyKey": "k1"}
	first := expect(t, call(t, "POST", s.Base+"/admin/activate", act), 200, "")
	history := call(t, "GET", s.Base+"/admin/history?scope="+q(key), nil).body

	// A second replica on the same Redis serves the same head and refuses a
	// stale activation.
	s2 := startServer(t, "--store", redisURL)
	read := expect(t, call(t, "GET", s2.Base+"?key="+q(key), nil), 200, "")
	if read["revision"] != rev || num(t, read, "generation") != 1 {
		t.Fatalf("replica read = %v", read)
	}
	expect(t, call(t, "POST", s2.Base+"/admin/activate", map[string]any{"scope": key, "revision": rev, "expectedGeneration": 0}), 409, "revision-conflict")
	s2.stop()

	s.stop()
	s3 := startServer(t, "--store", redisURL)
	again := expect(t, call(t, "POST", s3.Base+"/admin/activate", act), 200, "")
	if again["generation"] != first["generation"] || again["effectiveAt"] != first["effectiveAt"] {
		t.Fatalf("idempotent replay after restart = %v, want %v", again, first)
	}
	if got := call(t, "GET", s3.Base+"/admin/history?scope="+q(key), nil).body; !bytes.Equal(got, history) {
		t.Fatalf("history after restart:\n got %s\nwant %s", got, history)
	}
	if m := expect(t, call(t, "GET", s3.Base+"/admin/status?scope="+q(key), nil), 200, ""); m["source"] != "redis" || m["active"] != true {
		t.Fatalf("status = %v", m)
	}
}
