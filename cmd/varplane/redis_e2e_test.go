package main

// End-to-end tests of serve on a shared Redis: several real varplane
// processes on one private redis-server that the tests stop, restart,
// reconfigure and corrupt.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// privateRedis is a redis-server of the test's own, on a free port, stopped
// by PID. It keeps an append-only file with fsync on every write in its data
// directory, so a kill and a restart on the same directory lose nothing
// acknowledged.
type privateRedis struct {
	t    testing.TB
	bin  string
	cli  string
	port int
	dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// newPrivateRedis starts a durable private redis-server; extra are more
// server arguments (e.g. "--maxmemory-policy", "allkeys-lru"). It skips when
// redis-server or redis-cli is not installed, unless VARPLANE_REQUIRE_SERVICES
// is set.
func newPrivateRedis(t testing.TB, extra ...string) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		var cli string
		if cli, err = exec.LookPath("redis-cli"); err == nil {
			ln, lerr := net.Listen("tcp", "127.0.0.1:0")
			if lerr != nil {
				t.Fatal(lerr)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ln.Close()
			r := &privateRedis{t: t, bin: bin, cli: cli, port: port, dir: t.TempDir(),
				args: append([]string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"}, extra...)}
			r.start()
			t.Cleanup(r.kill)
			return r
		}
	}
	if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
		t.Fatalf("redis-server and redis-cli are required (VARPLANE_REQUIRE_SERVICES is set): %v", err)
	}
	t.Skipf("redis-server or redis-cli is not installed (%v); skipping the Redis end-to-end test", err)
	return nil
}

func (r *privateRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// url is the --store URL of the instance under prefix.
func (r *privateRedis) url(prefix string) string {
	return "redis://" + r.addr() + "/0?prefix=" + prefix
}

// start runs redis-server on the instance's port and directory and waits
// until it answers PING.
func (r *privateRedis) start() {
	r.t.Helper()
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir}, r.args...)
	cmd := exec.Command(r.bin, args...)
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if out, err := r.try("PING"); err == nil && out == "PONG" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("private redis-server on %s did not start", r.addr())
}

// kill stops the server with SIGKILL (a crash: no shutdown save) by PID
// and waits for it. Killing a stopped server does nothing.
func (r *privateRedis) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// try runs one redis-cli command against the instance.
func (r *privateRedis) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.cli, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(r.port)}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

// do runs one redis-cli command and fails the test when it cannot.
func (r *privateRedis) do(args ...string) string {
	r.t.Helper()
	out, err := r.try(args...)
	if err != nil {
		r.t.Fatalf("redis-cli %v: %v (%s)", args, err, out)
	}
	return out
}

// headKey and revKey are the key layout of docs/redis.md for a scope.
func headKey(prefix, scope string) string {
	return slotBase(prefix, scope) + "head:" + scope
}

func revKey(prefix, scope, rev string) string {
	return slotBase(prefix, scope) + "rev:" + scope + ":" + rev
}

func slotBase(prefix, scope string) string {
	root, _, _ := strings.Cut(scope, ".")
	return prefix + ":{" + base64.RawURLEncoding.EncodeToString([]byte(root)) + "}:"
}

// streamEvent is one Server-Sent Event with the time it arrived.
type streamEvent struct {
	event, id, data string
	at              time.Time
}

// generation parses the generation out of an event id ("scope@gen").
func (e streamEvent) generation() int {
	_, g, _ := strings.Cut(e.id, "@")
	n, err := strconv.Atoi(g)
	if err != nil {
		return -1
	}
	return n
}

// sseClient has no overall timeout: a stream lasts as long as its context.
var sseClient = &http.Client{}

// openSSE follows target (a {base}/watch URL) until ctx ends; events arrive
// on the returned channel, which is closed when the stream ends.
func openSSE(t testing.TB, ctx context.Context, target string) <-chan streamEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", target, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sseClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", target, resp.StatusCode, body)
	}
	ch := make(chan streamEvent, 256)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
		var ev streamEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" || ev.data != "" {
					ev.at = time.Now()
					select {
					case ch <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = streamEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return ch
}

// waitHead reads events until a head event of generation gen arrives.
func waitHead(t testing.TB, ctx context.Context, events <-chan streamEvent, gen int) streamEvent {
	t.Helper()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before the head of generation %d", gen)
			}
			if ev.event == "head" && ev.generation() == gen {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no head event of generation %d: %v", gen, ctx.Err())
		}
	}
}

// eventually polls fn every 20ms until it reports true or d passes.
func eventually(t testing.TB, d time.Duration, what string, fn func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, msg := fn()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s not within %v; last: %s", what, d, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryCall is call without failing the test (for goroutines): a transport
// error is returned.
func tryCall(method, target string, body any) (answer, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return answer{}, err
	}
	req, err := http.NewRequest(method, target, bytes.NewReader(data))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// readGen reads scope on base and returns the status and the generation (-1
// without one).
func readGen(t testing.TB, base, scope string, header ...string) (int, int, []byte) {
	t.Helper()
	a := call(t, "GET", base+"?key="+q(scope), nil, header...)
	gen := -1
	var m map[string]any
	if json.Unmarshal(a.body, &m) == nil {
		if f, ok := m["generation"].(float64); ok {
			gen = int(f)
		}
	}
	return a.status, gen, a.body
}

// metricValue returns the value of one unlabelled (or fully labelled) sample
// of the /metrics text, and whether it is there.
func metricValue(text, sample string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// ack is one acknowledged activation.
type ack struct {
	gen int
	rev string
}

// writer commits to scope on base in a loop until stop is closed, and
// records every activation the server acknowledged.
type writer struct {
	base, scope string
	stop        chan struct{}
	done        chan struct{}

	mu       sync.Mutex
	acks     []ack
	failures int // 503 and 504 (outcome unknown) answers
	other    []string
}

func startWriter(base, scope string) *writer {
	w := &writer{base: base, scope: scope, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *writer) run() {
	defer close(w.done)
	cur := 0
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		a, err := tryCall("POST", w.base+"/admin/revisions", map[string]any{"scope": w.scope, "document": map[string]any{"n": i}})
		if !w.note(a, err, http.StatusCreated, http.StatusOK) {
			continue
		}
		var created struct{ Revision string }
		_ = json.Unmarshal(a.body, &created)
		a, err = tryCall("POST", w.base+"/admin/activate", map[string]any{"scope": w.scope, "revision": created.Revision, "expectedGeneration": cur})
		if a.status == http.StatusConflict {
			var c struct{ CurrentGeneration int }
			_ = json.Unmarshal(a.body, &c)
			cur = c.CurrentGeneration // an earlier reply was lost after Redis ran the script
			continue
		}
		if !w.note(a, err, http.StatusOK) {
			continue
		}
		var act struct{ Generation int }
		_ = json.Unmarshal(a.body, &act)
		cur = act.Generation
		w.mu.Lock()
		w.acks = append(w.acks, ack{gen: act.Generation, rev: created.Revision})
		w.mu.Unlock()
	}
}

// note records an unexpected answer; it reports whether a is one of ok.
func (w *writer) note(a answer, err error, ok ...int) bool {
	for _, s := range ok {
		if err == nil && a.status == s {
			return true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var m map[string]any
	_ = json.Unmarshal(a.body, &m)
	switch {
	case err == nil && a.status == http.StatusServiceUnavailable && m["code"] == "store-unavailable":
		w.failures++
	case err == nil && a.status == http.StatusGatewayTimeout && m["code"] == "outcome-unknown":
		// Redis went down with the script sent: the write may have landed,
		// and the next activation's conflict tells (as a lost reply does).
		w.failures++
	case err != nil:
		w.other = append(w.other, err.Error())
	default:
		w.other = append(w.other, fmt.Sprintf("%d %s", a.status, a.body))
	}
	time.Sleep(10 * time.Millisecond)
	return false
}

func (w *writer) snapshot() (acks []ack, failures int, other []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ack(nil), w.acks...), w.failures, append([]string(nil), w.other...)
}

func (w *writer) halt() {
	close(w.stop)
	<-w.done
}

// TestRedisReplicas runs two servers, A and B, on one private Redis and
// follows a commit from A's admin API to B's live stream, through a killed
// subscription, a crash and restart of Redis, and corrupted values.
func TestRedisReplicas(t *testing.T) {
	const prefix = "e2e"
	r := newPrivateRedis(t)
	a := startServer(t, "--store", r.url(prefix), "--redis-revalidate-interval", "500ms")
	b := startServer(t, "--store", r.url(prefix), "--redis-revalidate-interval", "300ms")
	const key = "fleet.flags"

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rev1 := createRev(t, a.Base, key, map[string]any{"n": 1})
	activate(t, a.Base, key, rev1, 0)
	events := openSSE(t, ctx, b.Base+"/watch?key="+q(key))
	waitHead(t, ctx, events, 1)

	gen, headRev := 1, rev1
	t.Run("commit on A reaches a subscriber of B", func(t *testing.T) {
		rev := createRev(t, a.Base, key, map[string]any{"n": 2})
		activate(t, a.Base, key, rev, gen)
		gen, headRev = gen+1, rev
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		ev := waitHead(t, wctx, events, gen)
		if !strings.Contains(ev.data, rev) {
			t.Fatalf("head event %q does not name %s", ev.data, rev)
		}
	})

	t.Run("B converges after its subscription is killed", func(t *testing.T) {
		before := call(t, "GET", b.URL+"/metrics", nil)
		passes, _ := metricValue(string(before.body), "varplane_redis_revalidation_passes_total")
		if n, err := strconv.Atoi(r.do("CLIENT", "KILL", "TYPE", "pubsub")); err != nil || n < 2 {
			t.Fatalf("CLIENT KILL TYPE pubsub killed %q connections, want both servers' (2)", r.do("CLIENT", "LIST"))
		}
		rev := createRev(t, a.Base, key, map[string]any{"n": 3})
		activate(t, a.Base, key, rev, gen)
		gen, headRev = gen+1, rev
		// One interval (300ms) plus the length of a pass and a scheduling
		// margin for a loaded machine.
		eventually(t, 2*time.Second, "B serving generation "+strconv.Itoa(gen), func() (bool, string) {
			st, g, body := readGen(t, b.Base, key)
			return st == 200 && g == gen, string(body)
		})
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		waitHead(t, wctx, events, gen)
		eventually(t, 2*time.Second, "B resubscribed and revalidating", func() (bool, string) {
			text := string(call(t, "GET", b.URL+"/metrics", nil).body)
			p, _ := metricValue(text, "varplane_redis_revalidation_passes_total")
			subs, _ := metricValue(text, "varplane_redis_subscriptions_total")
			return p > passes && subs >= 2, fmt.Sprintf("passes %v (before %v), subscriptions %v", p, passes, subs)
		})
	})

	t.Run("a read-only replica serves reads and refuses mutations", func(t *testing.T) {
		c := startServer(t, "--store", r.url(prefix), "--redis-read-only")
		if st, g, body := readGen(t, c.Base, key); st != 200 || g != gen {
			t.Fatalf("read-only read = %d %s, want generation %d", st, body, gen)
		}
		m := expect(t, call(t, "POST", c.Base+"/admin/revisions", map[string]any{"scope": key, "document": map[string]any{"n": -1}}), 400, "store-unsupported")
		if msg := str(t, m, "error"); !strings.Contains(msg, "read-only") {
			t.Fatalf("message %q does not say the replica is read-only", msg)
		}
		expect(t, call(t, "POST", c.Base+"/admin/activate", map[string]any{"scope": key, "revision": rev1, "expectedGeneration": gen}), 400, "store-unsupported")
		body := expect(t, call(t, "GET", c.URL+"/readyz", nil), 200, "")
		if rd, _ := body["redis"].(map[string]any); rd["readOnly"] != true {
			t.Fatalf("/readyz of the read-only replica = %v", body)
		}
		c.stop()
	})

	t.Run("Redis down: reads go on, writes fail cleanly, nothing acknowledged is lost", func(t *testing.T) {
		const load = "fleet.load"
		histBefore := expect(t, call(t, "GET", a.Base+"/admin/history?scope="+q(key), nil), 200, "")
		w := startWriter(a.Base, load)
		eventually(t, 5*time.Second, "a first acknowledged commit", func() (bool, string) {
			acks, _, _ := w.snapshot()
			return len(acks) >= 3, fmt.Sprint(len(acks))
		})
		r.kill()

		for _, s := range []*server{a, b} {
			if st, g, body := readGen(t, s.Base, key); st != 200 || g != gen {
				t.Fatalf("read on %s with Redis down = %d %s, want 200 generation %d", s.URL, st, body, gen)
			}
		}
		expect(t, call(t, "POST", a.Base+"/admin/revisions", map[string]any{"scope": key, "document": map[string]any{"n": "lost"}}), 503, "store-unavailable")
		// The installed head's own record needs no read: the commit script
		// itself is refused.
		expect(t, call(t, "POST", a.Base+"/admin/activate", map[string]any{"scope": key, "revision": headRev, "expectedGeneration": gen}), 503, "store-unavailable")
		expect(t, call(t, "POST", b.Base+"/admin/deactivate", map[string]any{"scope": key, "expectedGeneration": gen}), 503, "store-unavailable")
		expect(t, call(t, "GET", a.Base+"/admin/history?scope="+q(key), nil), 503, "store-unavailable")
		ready := expect(t, call(t, "GET", b.URL+"/readyz", nil), 503, "")
		if ready["status"] != "unavailable" {
			t.Fatalf("/readyz with Redis down = %v", ready)
		}
		eventually(t, 5*time.Second, "the writer seeing store-unavailable", func() (bool, string) {
			_, failures, _ := w.snapshot()
			return failures > 0, ""
		})

		r.start()
		acked, _, _ := w.snapshot()
		eventually(t, 10*time.Second, "writes working again", func() (bool, string) {
			now, _, _ := w.snapshot()
			return len(now) >= len(acked)+3, fmt.Sprintf("%d acknowledged, %d before the restart", len(now), len(acked))
		})
		w.halt()
		acks, failures, other := w.snapshot()
		if len(other) > 0 {
			t.Fatalf("the writer got answers other than success, 409, 503 and 504 outcome-unknown: %q", other)
		}
		t.Logf("writer: %d acknowledged activations, %d store-unavailable answers", len(acks), failures)

		// Every acknowledged activation is in the history, in order, and
		// generations have no gap.
		hist := expect(t, call(t, "GET", a.Base+"/admin/history?scope="+q(load), nil), 200, "")
		activated := map[int]string{}
		var gens []int
		for _, e := range historyEntries(t, hist) {
			if e["kind"] == "activated" {
				g := int(e["generation"].(float64))
				activated[g], _ = e["revision"].(string)
				gens = append(gens, g)
			}
		}
		sort.Ints(gens)
		for i, g := range gens {
			if g != i+1 {
				t.Fatalf("activated generations %v have a gap at %d", gens, i+1)
			}
		}
		for _, k := range acks {
			if activated[k.gen] != k.rev {
				t.Fatalf("acknowledged generation %d (%s) is not in the history after the restart (history has %q)", k.gen, k.rev, activated[k.gen])
			}
		}
		// The mutations refused while Redis was down left nothing behind.
		histAfter := expect(t, call(t, "GET", a.Base+"/admin/history?scope="+q(key), nil), 200, "")
		if got, want := len(historyEntries(t, histAfter)), len(historyEntries(t, histBefore)); got != want {
			t.Fatalf("history of %s has %d entries after the outage, want %d", key, got, want)
		}
		for _, s := range []*server{a, b} {
			if st, g, body := readGen(t, s.Base, key); st != 200 || g != gen {
				t.Fatalf("read on %s after the restart = %d %s, want generation %d", s.URL, st, body, gen)
			}
		}
		last := acks[len(acks)-1]
		eventually(t, 5*time.Second, "B converging on the writer's head after the restart", func() (bool, string) {
			st, g, body := readGen(t, b.Base, load)
			return st == 200 && g >= last.gen, string(body)
		})
		// B's subscription is back: a new commit reaches its stream.
		rev := createRev(t, a.Base, key, map[string]any{"n": 4})
		activate(t, a.Base, key, rev, gen)
		gen++
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		waitHead(t, wctx, events, gen)
	})

	t.Run("a corrupted value fails closed and stays in Redis", func(t *testing.T) {
		const bad, badRec = "broken.head", "broken.record"
		for _, s := range []string{bad, badRec} {
			rev := createRev(t, a.Base, s, map[string]any{"ok": true})
			activate(t, a.Base, s, rev, 0)
		}
		eventually(t, 5*time.Second, "B serving "+bad, func() (bool, string) {
			st, _, body := readGen(t, b.Base, bad)
			return st == 200, string(body)
		})
		hk := headKey(prefix, bad)
		if got := r.do("TYPE", hk); got != "hash" {
			t.Fatalf("TYPE %s = %q, want hash (is the key layout of docs/redis.md still right?)", hk, got)
		}
		r.do("SET", hk, "not a head")
		for _, s := range []*server{a, b} {
			eventually(t, 3*time.Second, s.URL+" failing the read of "+bad+" closed", func() (bool, string) {
				st, _, body := readGen(t, s.Base, bad)
				return st == 503, fmt.Sprintf("%d %s", st, body)
			})
			expect(t, call(t, "GET", s.Base+"?key="+q(bad), nil), 503, "document-failed")
		}

		// A revision record broken with plain SET fails a cold read.
		recBody := expect(t, call(t, "GET", a.Base+"?key="+q(badRec), nil), 200, "")
		rk := revKey(prefix, badRec, str(t, recBody, "revision"))
		if got := r.do("EXISTS", rk); got != "1" {
			t.Fatalf("EXISTS %s = %s, want 1 (is the key layout of docs/redis.md still right?)", rk, got)
		}
		r.do("SET", rk, "{broken json")
		c := startServer(t, "--store", r.url(prefix))
		expect(t, call(t, "GET", c.Base+"?key="+q(badRec), nil), 503, "document-failed")
		expect(t, call(t, "GET", c.Base+"?key="+q(bad), nil), 503, "document-failed")
		text := string(call(t, "GET", c.URL+"/metrics", nil).body)
		if n, ok := metricValue(text, "varplane_redis_decode_errors_total"); !ok || n < 2 {
			t.Fatalf("varplane_redis_decode_errors_total = %v (present %v), want at least 2", n, ok)
		}
		c.stop()

		if got := r.do("GET", hk); got != "not a head" {
			t.Fatalf("GET %s = %q: the corrupted head was changed", hk, got)
		}
		if got := r.do("GET", rk); got != "{broken json" {
			t.Fatalf("GET %s = %q: the corrupted record was changed", rk, got)
		}
		// Other scopes are unaffected.
		if st, g, body := readGen(t, b.Base, key); st != 200 || g != gen {
			t.Fatalf("read of %s = %d %s", key, st, body)
		}
	})
}

// historyEntries returns the entries of a history answer.
func historyEntries(t testing.TB, m map[string]any) []map[string]any {
	t.Helper()
	raw, ok := m["events"].([]any)
	if !ok {
		t.Fatalf("history answer without an events list: %v", m)
	}
	out := make([]map[string]any, 0, len(raw))
	for _, e := range raw {
		em, _ := e.(map[string]any)
		out = append(out, em)
	}
	return out
}

// TestRedisEvictionPolicy checks that serve refuses a Redis that may evict
// (allkeys-* even with --redis-eviction-check warn), starts on a volatile-*
// one with warn and reports the policy, and that a policy changed at run
// time shows in /readyz's details and /metrics as an alert while /readyz
// stays 200: the indicator is not a readiness check.
func TestRedisEvictionPolicy(t *testing.T) {
	lru := newPrivateRedis(t, "--maxmemory-policy", "allkeys-lru")
	vol := newPrivateRedis(t, "--maxmemory-policy", "volatile-lru")

	refused := func(url, policy string, extra ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, append([]string{"serve", "--addr", "127.0.0.1:0", "--rpc-addr", "off", "--store", url}, extra...)...)
		cmd.Dir = t.TempDir()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || ctx.Err() != nil {
			t.Fatalf("serve %v on a %s Redis: %v, want a non-zero exit; stderr:\n%s", extra, policy, err, stderr.String())
		}
		for _, want := range []string{"maxmemory-policy is " + policy + ", not noeviction", "noeviction"} {
			if !strings.Contains(stderr.String(), want) {
				t.Fatalf("stderr does not say %q:\n%s", want, stderr.String())
			}
		}
		if strings.Contains(stderr.String(), "varplane listening") {
			t.Fatalf("serve listened before refusing:\n%s", stderr.String())
		}
	}
	refused(lru.url("e2e"), "allkeys-lru")
	refused(lru.url("e2e"), "allkeys-lru", "--redis-eviction-check", "warn")
	refused(vol.url("e2e"), "volatile-lru")

	warn := startServer(t, "--store", vol.url("e2e"), "--redis-eviction-check", "warn")
	body := expect(t, call(t, "GET", warn.URL+"/readyz", nil), 200, "")
	rd, _ := body["redis"].(map[string]any)
	if rd["evictionCheck"] != "warn" || rd["evictionPolicyOK"] != false || !strings.Contains(fmt.Sprint(rd["evictionPolicy"]), "volatile-lru") {
		t.Fatalf("/readyz under warn = %s", call(t, "GET", warn.URL+"/readyz", nil).body)
	}
	if !strings.Contains(warn.logs(), "!!!") {
		t.Fatalf("no loud warning in the logs:\n%s", warn.logs())
	}
	text := string(call(t, "GET", warn.URL+"/metrics", nil).body)
	if v, ok := metricValue(text, "varplane_redis_eviction_policy_ok"); !ok || v != 0 {
		t.Fatalf("varplane_redis_eviction_policy_ok = %v (present %v), want 0", v, ok)
	}
	for _, name := range []string{
		`varplane_redis_lagging_scopes{threshold="warn"}`, `varplane_redis_lagging_scopes{threshold="escalate"}`,
		"varplane_redis_lag_max_seconds", "varplane_redis_installed_scopes", "varplane_redis_invalidations_total",
		"varplane_redis_revalidation_passes_total", "varplane_redis_revalidation_confirms_total",
		"varplane_redis_decode_errors_total", "varplane_redis_regressions_total", "varplane_redis_eviction_checks_total",
	} {
		if _, ok := metricValue(text, name); !ok {
			t.Errorf("/metrics has no sample %s", name)
		}
	}

	// Under fail, a policy changed while serving raises the alert (the
	// details and the metric) at the next check, and /readyz stays 200:
	// installed documents are still served.
	ok := newPrivateRedis(t)
	s := startServer(t, "--store", ok.url("e2e"), "--redis-revalidate-interval", "100ms")
	expect(t, call(t, "GET", s.URL+"/readyz", nil), 200, "")
	ok.do("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
	eventually(t, 5*time.Second, "/readyz reporting the changed policy", func() (bool, string) {
		a := call(t, "GET", s.URL+"/readyz", nil)
		return a.status == 200 && bytes.Contains(a.body, []byte("volatile-lru")) && bytes.Contains(a.body, []byte(`"evictionPolicyOK":false`)), fmt.Sprintf("%d %s", a.status, a.body)
	})
	if v, _ := metricValue(string(call(t, "GET", s.URL+"/metrics", nil).body), "varplane_redis_eviction_policy_ok"); v != 0 {
		t.Fatalf("varplane_redis_eviction_policy_ok = %v after the change, want 0", v)
	}
	ok.do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	eventually(t, 5*time.Second, "the alert cleared", func() (bool, string) {
		a := call(t, "GET", s.URL+"/readyz", nil)
		return a.status == 200 && bytes.Contains(a.body, []byte(`"evictionPolicyOK":true`)), fmt.Sprintf("%d %s", a.status, a.body)
	})
}

// TestRedisFlags checks the flag validation that runs before any store is
// opened.
func TestRedisFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis-revalidate-interval", "10m"}, "--revalidate-interval 10m0s: want 10ms to 5m0s"},
		{[]string{"--redis-revalidate-interval", "1ms"}, "--revalidate-interval 1ms"},
		{[]string{"--revalidate-interval", "1ms"}, "--revalidate-interval 1ms"},
		{[]string{"--redis-eviction-check", "maybe"}, `--redis-eviction-check "maybe": want fail or warn`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Nothing listens on port 1: the flags are refused before the
			// store is opened.
			res := runCLI(t, nil, "", append([]string{"serve", "--store", "redis://127.0.0.1:1/0", "--addr", "127.0.0.1:0"}, tc.args...)...)
			if res.code != ExitUsage || !strings.Contains(res.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", res.code, res.stderr, ExitUsage, tc.want)
			}
		})
	}
}

// BenchmarkCommitToSSE measures, through the real binaries, the time from
// sending an activation to server A until the head event arrives on a
// Server-Sent Events stream of server B, both on one private Redis: with
// the append-only file fsynced on every write (the durable setup of
// docs/redis.md) and without persistence (the store-level benchmark's
// setup). ack-* is the time until A answered the activation.
func BenchmarkCommitToSSE(b *testing.B) {
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"aof=always", nil},
		{"aof=off", []string{"--appendonly", "no"}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchCommitToSSE(b, newPrivateRedis(b, bc.args...)) })
	}
}

func benchCommitToSSE(b *testing.B, r *privateRedis) {
	sa := startServer(b, "--store", r.url("bench"))
	sb := startServer(b, "--store", r.url("bench"))
	const key = "bench.latency"
	revs := [2]string{
		createRev(b, sa.Base, key, map[string]any{"side": "a", "pad": strings.Repeat("x", 1024)}),
		createRev(b, sa.Base, key, map[string]any{"side": "b", "pad": strings.Repeat("x", 1024)}),
	}
	activate(b, sa.Base, key, revs[0], 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := openSSE(b, ctx, sb.Base+"/watch?key="+q(key))
	waitHead(b, ctx, events, 1)

	gen := 1
	lat := make([]time.Duration, 0, b.N)
	ackLat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body := map[string]any{"scope": key, "revision": revs[(i+1)%2], "expectedGeneration": gen}
		start := time.Now()
		a, err := tryCall("POST", sa.Base+"/admin/activate", body)
		if err != nil || a.status != 200 {
			b.Fatalf("activate: %v %d %s", err, a.status, a.body)
		}
		acked := time.Now()
		gen++
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		ev := waitHead(b, wctx, events, gen)
		wcancel()
		lat = append(lat, ev.at.Sub(start))
		ackLat = append(ackLat, acked.Sub(start))
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[int(p*float64(len(s)-1))].Microseconds())
	}
	b.ReportMetric(pct(lat, .50), "p50-µs")
	b.ReportMetric(pct(lat, .99), "p99-µs")
	b.ReportMetric(pct(ackLat, .50), "ack-p50-µs")
	b.ReportMetric(pct(ackLat, .99), "ack-p99-µs")
}
