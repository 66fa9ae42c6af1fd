package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

// fakeClock is a Clock the test moves by hand. After and tickers fire when
// Advance passes their time.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at     time.Time
	ch     chan time.Time
	period time.Duration // 0 for After
	stop   *bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.waiters = append(f.waiters, fakeWaiter{at: f.now.Add(d), ch: ch, stop: new(bool)})
	return ch
}

type fakeTicker struct {
	ch   chan time.Time
	stop *bool
	f    *fakeClock
}

func (t fakeTicker) C() <-chan time.Time { return t.ch }
func (t fakeTicker) Stop() {
	t.f.mu.Lock()
	*t.stop = true
	t.f.mu.Unlock()
}

func (f *fakeClock) NewTicker(d time.Duration) Ticker {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	stop := new(bool)
	f.waiters = append(f.waiters, fakeWaiter{at: f.now.Add(d), ch: ch, period: d, stop: stop})
	return fakeTicker{ch: ch, stop: stop, f: f}
}

// Advance moves time by d, firing what falls due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	var keep []fakeWaiter
	for _, w := range f.waiters {
		if *w.stop {
			continue
		}
		if !w.at.After(f.now) {
			select {
			case w.ch <- f.now:
			default:
			}
			if w.period == 0 {
				continue
			}
			for !w.at.After(f.now) {
				w.at = w.at.Add(w.period)
			}
		}
		keep = append(keep, w)
	}
	f.waiters = keep
	f.mu.Unlock()
}

// syncBuf is a log sink tests read.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

type value struct {
	N int `json:"n"`
}

// decodeValue refuses documents with "bad": true.
func decodeValue(_ context.Context, rec *varplane.RevisionRecord) (value, error) {
	var v struct {
		N   int  `json:"n"`
		Bad bool `json:"bad"`
	}
	if err := json.Unmarshal(rec.Document, &v); err != nil {
		return value{}, err
	}
	if v.Bad {
		return value{}, errors.New("refused by the decoder")
	}
	return value{N: v.N}, nil
}

func publish(t testing.TB, s varplane.Store, scope varplane.Scope, doc string) {
	t.Helper()
	ctx := context.Background()
	st, err := s.State(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	ev := storetest.CreatedEvent(scope, json.RawMessage(doc))
	if _, err := s.AppendPublish(ctx, ev, storetest.ActivatedEvent(scope, ev.Revision, st.Generation), st.Generation); err != nil {
		t.Fatalf("publish %s: %v", scope, err)
	}
}

func newCache(t testing.TB, s varplane.Store, clk Clock, mod func(*Options[value])) (*Cache[value], *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	o := Options[value]{Root: "root", Decode: decodeValue, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(&o)
	}
	c, err := New(context.Background(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, logs
}

func code(err error) varplane.Code {
	if err == nil {
		return ""
	}
	return varplane.ErrorCode(err)
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestNotReadyUntilRoot: without a root document every read and Ready answer
// not-ready (503), never an empty document; once the root is published the
// cache becomes ready through the store's Watch.
func TestNotReadyUntilRoot(t *testing.T) {
	s := memory.New()
	publish(t, s, "app.a", `{"n":1}`)
	c, _ := newCache(t, s, newFakeClock(), nil)
	ctx := context.Background()
	for _, sc := range []varplane.Scope{"root", "app.a", "app.none"} {
		if d, err := c.Get(ctx, sc); code(err) != varplane.CodeNotReady || wire.Status(code(err)) != 503 {
			t.Fatalf("Get(%s) before the root = %v, %v; want not-ready (503)", sc, d, err)
		}
	}
	if code(c.Ready()) != varplane.CodeNotReady {
		t.Fatal("Ready before the root exists")
	}
	publish(t, s, "root", `{"n":0}`)
	waitFor(t, "ready", func() bool { return c.Ready() == nil })
	d, err := c.Get(ctx, "app.a")
	if err != nil || d.Value.N != 1 {
		t.Fatalf("Get(app.a) = %+v, %v", d, err)
	}
}

// TestDecodeFailedAndRecovered: a refused document answers document-failed
// until a decodable revision is published, which is installed from Watch.
func TestDecodeFailedAndRecovered(t *testing.T) {
	s := memory.New()
	publish(t, s, "root", `{"n":0}`)
	publish(t, s, "app.a", `{"bad":true}`)
	c, logs := newCache(t, s, newFakeClock(), nil)
	ctx := context.Background()
	for range 2 {
		if _, err := c.Get(ctx, "app.a"); code(err) != varplane.CodeDocumentFailed || wire.Status(code(err)) != 503 {
			t.Fatalf("Get of a refused document = %v; want document-failed (503)", err)
		}
	}
	if !strings.Contains(logs.String(), "cannot be decoded") {
		t.Fatalf("no ERROR for the refused document:\n%s", logs)
	}
	publish(t, s, "app.a", `{"n":5}`)
	waitFor(t, "the decodable revision", func() bool {
		d, err := c.Get(ctx, "app.a")
		return err == nil && d.Value.N == 5
	})
}

// TestSnapshotImmutable: a held *Doc never changes under a new install.
func TestSnapshotImmutable(t *testing.T) {
	s := memory.New()
	publish(t, s, "root", `{"n":0}`)
	publish(t, s, "app.a", `{"n":1}`)
	c, _ := newCache(t, s, newFakeClock(), nil)
	ctx := context.Background()
	docs, err := c.Snapshot(ctx, "root", "app.a")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, s, "app.a", `{"n":2}`)
	waitFor(t, "the new revision", func() bool { d, _ := c.Get(ctx, "app.a"); return d != nil && d.Value.N == 2 })
	if docs[1].Value.N != 1 || docs[1].Generation != 1 {
		t.Fatalf("held snapshot changed: %+v", docs[1])
	}
}

// TestFamiliesBoundedAndRootPinned: each family keeps at most its bound of
// documents, dropping the least recently used; the root is never dropped;
// absent scopes are remembered apart (at most 256) and never push out a
// document.
func TestFamiliesBoundedAndRootPinned(t *testing.T) {
	s := memory.New()
	publish(t, s, "root", `{"n":0}`)
	for i := range 30 {
		publish(t, s, varplane.Scope(fmt.Sprintf("app.a%d", i)), fmt.Sprintf(`{"n":%d}`, i))
		publish(t, s, varplane.Scope(fmt.Sprintf("tenant.t%d", i)), fmt.Sprintf(`{"n":%d}`, i))
	}
	c, _ := newCache(t, s, newFakeClock(), func(o *Options[value]) {
		o.Families = []Family{{Prefix: "app", MaxCached: 10}}
		o.MaxCached = 20
	})
	ctx := context.Background()
	hot := varplane.Scope("app.a0")
	for i := range 30 {
		for _, sc := range []varplane.Scope{hot, varplane.Scope(fmt.Sprintf("app.a%d", i)), varplane.Scope(fmt.Sprintf("tenant.t%d", i))} {
			if _, err := c.Get(ctx, sc); err != nil {
				t.Fatalf("Get(%s): %v", sc, err)
			}
		}
	}
	apps, tenants := 0, 0
	for _, sc := range c.installed() {
		switch {
		case strings.HasPrefix(string(sc), "app."):
			apps++
		case strings.HasPrefix(string(sc), "tenant."):
			tenants++
		}
	}
	if apps > 10 || tenants > 20 || apps == 0 || tenants == 0 {
		t.Fatalf("installed %d apps (bound 10) and %d tenants (bound 20)", apps, tenants)
	}
	if _, ok := c.entries.Load(hot); !ok {
		t.Fatal("the most used app was dropped")
	}
	if _, ok := c.entries.Load(varplane.Scope("root")); !ok {
		t.Fatal("the root was dropped")
	}
	before := c.Stats().Installed
	for i := range 1000 {
		if _, err := c.Get(ctx, varplane.Scope(fmt.Sprintf("app.none%d", i))); code(err) != varplane.CodeNoHead {
			t.Fatalf("Get of a scope without document = %v, want no-head", err)
		}
	}
	if got := c.Stats().Installed; got != before {
		t.Fatalf("absent scopes changed the installed documents: %d → %d", before, got)
	}
	if n := len(c.familyOf("app.x").absent); n != MaxAbsentPerFamily {
		t.Fatalf("app family remembers %d absent scopes, want %d", n, MaxAbsentPerFamily)
	}
	// A remembered absent scope that gets a document is installed.
	publish(t, s, "app.none999", `{"n":9}`)
	waitFor(t, "the formerly absent scope", func() bool { d, err := c.Get(ctx, "app.none999"); return err == nil && d.Value.N == 9 })
}

// hangStore blocks State of scopes while hang is set, and fails them while
// fail is set.
type hangStore struct {
	varplane.Store
	mu   sync.Mutex
	hang map[varplane.Scope]chan struct{}
	fail bool
}

func (h *hangStore) State(ctx context.Context, sc varplane.Scope) (*varplane.ScopeState, error) {
	h.mu.Lock()
	ch, fail := h.hang[sc], h.fail
	h.mu.Unlock()
	if fail {
		return nil, varplane.Unavailable(errors.New("down"))
	}
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, varplane.Unavailable(ctx.Err())
		}
	}
	return h.Store.State(ctx, sc)
}

// TestColdLoadTimeout: a read of a document whose load hangs answers
// store-unavailable after ColdLoadTimeout; the failure is not cached as
// absent, and the next read (the store back) gets the document.
func TestColdLoadTimeout(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.slow", `{"n":3}`)
	release := make(chan struct{})
	h := &hangStore{Store: mem, hang: map[varplane.Scope]chan struct{}{"app.slow": release}}
	clk := newFakeClock()
	c, _ := newCache(t, h, clk, nil)
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() { _, err := c.Get(ctx, "app.slow"); errc <- err }()
	waitFor(t, "the load to start", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.loads["app.slow"] != nil })
	clk.Advance(DefaultColdLoadTimeout)
	if err := <-errc; code(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("Get of a hanging load = %v, want store-unavailable", err)
	}
	close(release)
	waitFor(t, "the load to end", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.loads["app.slow"] == nil })
	d, err := c.Get(ctx, "app.slow")
	if err != nil || d.Value.N != 3 {
		t.Fatalf("Get after the store came back = %+v, %v", d, err)
	}
	// A failed read is never remembered as absent.
	h.mu.Lock()
	h.fail = true
	h.mu.Unlock()
	if _, err := c.Get(ctx, "app.other"); code(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("Get with the store down = %v", err)
	}
	h.mu.Lock()
	h.fail = false
	h.mu.Unlock()
	publish(t, mem, "app.other", `{"n":4}`)
	if d, err := c.Get(ctx, "app.other"); err != nil || d.Value.N != 4 {
		t.Fatalf("Get after a failed read = %+v, %v; a failure must not be cached as absent", d, err)
	}
}

// TestFailClosedLag: a scope under a fail-closed prefix answers
// document-stale once its document (or the root) lags past the bound while
// the store cannot confirm it; other scopes are served however old; lags
// are logged at WARN then ERROR, at most once a minute.
func TestFailClosedLag(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "tenant.acme", `{"n":1}`)
	publish(t, mem, "app.a", `{"n":2}`)
	h := &hangStore{Store: mem}
	clk := newFakeClock()
	c, logs := newCache(t, h, clk, func(o *Options[value]) {
		o.FailClosed = []varplane.Scope{"tenant"}
		o.FailClosedMaxLag = 10 * time.Minute
	})
	ctx := context.Background()
	for _, sc := range []varplane.Scope{"tenant.acme", "app.a"} {
		if _, err := c.Get(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	h.fail = true
	h.mu.Unlock()
	step := func(d time.Duration) {
		for range int(d / DefaultRevalidateInterval) {
			p := c.Stats().Passes
			clk.Advance(DefaultRevalidateInterval)
			waitFor(t, "a pass", func() bool { return c.Stats().Passes > p })
			waitFor(t, "the pass to end", func() bool { return c.Stats().LastPassDuration >= 0 && c.passIdle() })
		}
	}
	step(2 * time.Minute)
	waitFor(t, "the WARN", func() bool { return strings.Contains(logs.String(), "has not been confirmed for") })
	if _, err := c.Get(ctx, "tenant.acme"); err != nil {
		t.Fatalf("fail-closed scope within its bound = %v", err)
	}
	step(9 * time.Minute)
	waitFor(t, "the ERROR", func() bool { return strings.Contains(logs.String(), "is stale: not confirmed for") })
	if _, err := c.Get(ctx, "tenant.acme"); code(err) != varplane.CodeDocumentStale || wire.Status(code(err)) != 503 {
		t.Fatalf("fail-closed scope past its bound = %v, want document-stale (503)", err)
	}
	if d, err := c.Get(ctx, "app.a"); err != nil || d.Value.N != 2 {
		t.Fatalf("other scope = %v, %v; want it served however old", d, err)
	}
	if n := strings.Count(logs.String(), "Document of scope app.a revision"); n > 12 {
		t.Fatalf("app.a's lag logged %d times in 11 minutes; want at most once a minute", n)
	}
	if c.Stats().MaxLag < 10*time.Minute {
		t.Fatalf("MaxLag = %v", c.Stats().MaxLag)
	}
	h.mu.Lock()
	h.fail = false
	h.mu.Unlock()
	p := c.Stats().Confirms
	clk.Advance(DefaultRevalidateInterval)
	waitFor(t, "confirmations", func() bool { return c.Stats().Confirms >= p+3 })
	if _, err := c.Get(ctx, "tenant.acme"); err != nil {
		t.Fatalf("fail-closed scope once confirmed = %v", err)
	}
}

// TestDisappeared: a document the store no longer has any trace of (a store
// without generation floors) fails closed with an ERROR, until one returns.
func TestDisappeared(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	gone := &goneStore{Store: mem, gone: map[varplane.Scope]bool{}}
	clk := newFakeClock()
	c, logs := newCache(t, gone, clk, nil)
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	gone.set("app.a", true)
	clk.Advance(DefaultRevalidateInterval)
	waitFor(t, "the document to fail", func() bool { _, err := c.Get(ctx, "app.a"); return code(err) == varplane.CodeDocumentFailed })
	if !strings.Contains(logs.String(), "disappeared from the store") {
		t.Fatalf("no ERROR naming the disappearance:\n%s", logs)
	}
	// Later passes keep it failed (never "no head") and do not log again.
	for range 3 {
		p := c.Stats().Passes
		clk.Advance(DefaultRevalidateInterval)
		waitFor(t, "a pass", func() bool { return c.Stats().Passes > p && c.passIdle() })
	}
	if _, err := c.Get(ctx, "app.a"); code(err) != varplane.CodeDocumentFailed {
		t.Fatalf("a disappeared document after more passes = %v, want document-failed", err)
	}
	if n := strings.Count(logs.String(), "disappeared from the store"); n != 1 {
		t.Fatalf("the disappearance was logged %d times, want once", n)
	}
	gone.set("app.a", false)
	clk.Advance(DefaultRevalidateInterval)
	waitFor(t, "the document to return", func() bool { _, err := c.Get(ctx, "app.a"); return err == nil })
}

type goneStore struct {
	varplane.Store
	mu   sync.Mutex
	gone map[varplane.Scope]bool
}

func (g *goneStore) set(sc varplane.Scope, v bool) { g.mu.Lock(); g.gone[sc] = v; g.mu.Unlock() }
func (g *goneStore) State(ctx context.Context, sc varplane.Scope) (*varplane.ScopeState, error) {
	g.mu.Lock()
	gone := g.gone[sc]
	g.mu.Unlock()
	if gone {
		return &varplane.ScopeState{Scope: sc}, nil
	}
	return g.Store.State(ctx, sc)
}

// TestLocalCopy: a cold load with the store down may take a local copy at
// most LocalMaxAge old (counted that old, marked Local); an older one is
// refused; the store's answer replaces the copy.
func TestLocalCopy(t *testing.T) {
	dir := t.TempDir()
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	clk := newFakeClock()
	c1, _ := newCache(t, mem, clk, func(o *Options[value]) { o.CacheDir = dir })
	ctx := context.Background()
	if _, err := c1.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	_ = c1.Close()

	h := &hangStore{Store: mem, hang: map[varplane.Scope]chan struct{}{"root": make(chan struct{}), "app.a": make(chan struct{})}}
	clk.Advance(10 * time.Second)
	c2, _ := newCache(t, h, clk, func(o *Options[value]) { o.CacheDir = dir; o.StoreReadTimeout = time.Second })
	d, err := c2.Get(ctx, "app.a")
	if err != nil || d.Value.N != 1 || !d.Local {
		t.Fatalf("Get from a fresh local copy = %+v, %v; want the local document", d, err)
	}
	if lag := c2.Lag()["app.a"]; lag < DefaultLocalMaxAge {
		t.Fatalf("local copy counts as %v old, want at least %v", lag, DefaultLocalMaxAge)
	}
	_ = c2.Close()

	clk.Advance(DefaultLocalMaxAge)
	h2 := &hangStore{Store: mem, fail: true}
	c3, _ := newCache(t, h2, clk, func(o *Options[value]) { o.CacheDir = dir })
	if _, err := c3.Get(ctx, "app.a"); code(err) != varplane.CodeNotReady && code(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("Get from a stale local copy = %v, want a failure", err)
	}
}

// TestHeartbeat: the status value names the installed revisions and lags.
func TestHeartbeat(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	hs := &statusStore{Store: mem}
	c, _ := newCache(t, hs, newFakeClock(), func(o *Options[value]) { o.InstanceID = "pod-a" })
	waitFor(t, "a heartbeat", func() bool { return c.Stats().Heartbeats > 0 })
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var st varplane.InstanceStatus
	if err := json.Unmarshal(hs.last, &st); err != nil {
		t.Fatal(err)
	}
	if st.Instance != "pod-a" || !st.Ready || len(st.Documents) != 1 || st.Documents[0].Scope != "root" || st.Documents[0].Generation != 1 || hs.listed != 1 {
		t.Fatalf("status = %+v (listed %d)", st, hs.listed)
	}
}

type statusStore struct {
	varplane.Store
	mu     sync.Mutex
	last   []byte
	listed int
}

func (s *statusStore) WriteStatus(_ context.Context, _ string, v []byte) error {
	s.mu.Lock()
	s.last = v
	s.mu.Unlock()
	return nil
}

func (s *statusStore) ListInstance(context.Context, string, time.Time) error {
	s.mu.Lock()
	s.listed++
	s.mu.Unlock()
	return nil
}

// TestOptionsValidated: revalidation cannot be turned off or set past 5m.
func TestOptionsValidated(t *testing.T) {
	for _, o := range []Options[value]{
		{Root: "root"},
		{Root: "", Decode: decodeValue},
		{Root: "root", Decode: decodeValue, RevalidateInterval: 6 * time.Minute},
		{Root: "root", Decode: decodeValue, RevalidateInterval: -1},
		{Root: "root", Decode: decodeValue, Families: []Family{{Prefix: "app"}}},
	} {
		if _, err := New(context.Background(), memory.New(), o); code(err) != varplane.CodeBadRequest {
			t.Errorf("New(%+v) = %v, want bad-request", o, err)
		}
	}
}

// TestReadAllocs: a read of an installed document allocates nothing.
func TestReadAllocs(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	c, _ := newCache(t, mem, newFakeClock(), nil)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _, _ = c.Get(ctx, "root") }); n != 0 {
		t.Fatalf("Get allocates %v times", n)
	}
}

// BenchmarkRead is the instance read: an installed document, from memory.
func BenchmarkRead(b *testing.B) {
	mem := memory.New()
	publish(b, mem, "root", `{"n":0}`)
	publish(b, mem, "app.a", `{"n":1}`)
	c, _ := newCache(b, mem, newFakeClock(), nil)
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.a"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Get(ctx, "app.a"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// passIdle reports that no store read of a pass is in flight.
func (c *Cache[T]) passIdle() bool { return c.pass.reads.Load() == 0 }

// regressStore answers an older state of one scope while set.
type regressStore struct {
	varplane.Store
	mu  sync.Mutex
	old map[varplane.Scope]*varplane.ScopeState
}

func (r *regressStore) State(ctx context.Context, sc varplane.Scope) (*varplane.ScopeState, error) {
	r.mu.Lock()
	st := r.old[sc]
	r.mu.Unlock()
	if st != nil {
		return st, nil
	}
	return r.Store.State(ctx, sc)
}

// TestRegressionInstalled: a lower generation than the installed one (a
// failover that lost a commit) is installed, with an ERROR naming both.
func TestRegressionInstalled(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	old, err := mem.State(context.Background(), "app.a")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, mem, "app.a", `{"n":2}`)
	r := &regressStore{Store: mem, old: map[varplane.Scope]*varplane.ScopeState{}}
	clk := newFakeClock()
	c, logs := newCache(t, r, clk, nil)
	ctx := context.Background()
	if d, err := c.Get(ctx, "app.a"); err != nil || d.Generation != 2 {
		t.Fatalf("Get = %+v, %v", d, err)
	}
	r.mu.Lock()
	r.old["app.a"] = old
	r.mu.Unlock()
	clk.Advance(DefaultRevalidateInterval)
	waitFor(t, "the older head to be installed", func() bool {
		d, err := c.Get(ctx, "app.a")
		return err == nil && d.Generation == 1 && d.Value.N == 1
	})
	want := fmt.Sprintf("regressed from generation 2 (revision %s) to generation 1 (revision %s)", revOf(&Doc[value]{Head: mustState(t, mem, "app.a").Head}), old.Head.Revision)
	if !strings.Contains(logs.String(), want) || c.Stats().Regressions != 1 {
		t.Fatalf("no ERROR %q (regressions %d):\n%s", want, c.Stats().Regressions, logs)
	}
}

func mustState(t *testing.T, s varplane.Store, sc varplane.Scope) *varplane.ScopeState {
	t.Helper()
	st, err := s.State(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLocalCopyRefused: a local copy is served only when it is within the
// document limits (checked before it is read: a 300 MB file costs no
// memory) and its document's digest is the revision it claims. An edited,
// oversized or malformed copy is ignored with an ERROR, and the cold load
// goes to the store (down here, so the read fails rather than serve it).
func TestLocalCopyRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, path string)
		want   string
	}{
		{"edited document", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			edited := bytes.Replace(b, []byte(`{"n":1}`), []byte(`{"n":7}`), 1)
			if bytes.Equal(b, edited) {
				t.Fatalf("the copy does not hold the document: %s", b)
			}
			if err := os.WriteFile(path, edited, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "digest"},
		{"oversized file", func(t *testing.T, path string) {
			// Sparse: 300 MB on paper, nothing on disk.
			if err := os.Truncate(path, 300<<20); err != nil {
				t.Fatal(err)
			}
		}, "bytes"},
		{"a FIFO", func(t *testing.T, path string) {
			// Opened, it would block the load until a writer came.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skipf("no FIFO here: %v", err)
			}
		}, "not a regular file"},
		{"not a copy", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(`[1,2`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a local copy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mem := memory.New()
			publish(t, mem, "root", `{"n":0}`)
			publish(t, mem, "app.a", `{"n":1}`)
			clk := newFakeClock()
			c1, _ := newCache(t, mem, clk, func(o *Options[value]) { o.CacheDir = dir })
			if _, err := c1.Get(ctx, "app.a"); err != nil {
				t.Fatal(err)
			}
			_ = c1.Close()
			tc.tamper(t, c1.local.path("app.a"))

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			h := &hangStore{Store: mem, hang: map[varplane.Scope]chan struct{}{"app.a": make(chan struct{})}}
			c2, logs := newCache(t, h, clk, func(o *Options[value]) { o.CacheDir = dir; o.StoreReadTimeout = 50 * time.Millisecond })
			d, err := c2.Get(ctx, "app.a")
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("Get = %+v from a %s; want the copy ignored", d.Value, tc.name)
			}
			if grown := after.TotalAlloc - before.TotalAlloc; grown > 16<<20 {
				t.Errorf("reading the copy allocated %d MiB", grown>>20)
			}
			if n := c2.Stats().LocalRefused; n != 1 {
				t.Errorf("LocalRefused = %d, want 1", n)
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "local copy") || !strings.Contains(l, tc.want) {
				t.Errorf("logs = %s; want an ERROR naming the local copy and %q", l, tc.want)
			}
			// The store, back, serves the genuine document.
			close(h.hang["app.a"])
			waitFor(t, "the store's document", func() bool { d, err := c2.Get(ctx, "app.a"); return err == nil && d.Value.N == 1 && !d.Local })
		})
	}
}

// failScopes fails State of the scopes in fail.
type failScopes struct {
	varplane.Store
	mu   sync.Mutex
	fail map[varplane.Scope]bool
}

func (f *failScopes) State(ctx context.Context, sc varplane.Scope) (*varplane.ScopeState, error) {
	f.mu.Lock()
	bad := f.fail[sc]
	f.mu.Unlock()
	if bad {
		return nil, varplane.Unavailable(errors.New("down for " + string(sc)))
	}
	return f.Store.State(ctx, sc)
}

// TestFailClosedOldestDocument: a request that reads a fail-closed scope is
// judged by the oldest document it reads, not by its own and the root only:
// the tenant alone is served, the tenant with a lagging app is
// document-stale, the lagging app alone (not fail-closed) is served.
func TestFailClosedOldestDocument(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "tenant.acme", `{"n":1}`)
	publish(t, mem, "app.a", `{"n":2}`)
	fs := &failScopes{Store: mem, fail: map[varplane.Scope]bool{}}
	clk := newFakeClock()
	c, _ := newCache(t, fs, clk, func(o *Options[value]) {
		o.FailClosed = []varplane.Scope{"tenant"}
		o.FailClosedMaxLag = time.Minute
	})
	ctx := context.Background()
	if _, err := c.Snapshot(ctx, "tenant.acme", "app.a"); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.fail["app.a"] = true
	fs.mu.Unlock()
	for range 3 {
		p := c.Stats().Passes
		clk.Advance(30 * time.Second)
		waitFor(t, "a pass", func() bool { return c.Stats().Passes > p && c.passIdle() })
	}
	if lag := c.Lag(); lag["app.a"] <= time.Minute || lag["tenant.acme"] > time.Minute {
		t.Fatalf("lags = %v; want app.a past the bound and the tenant within it", lag)
	}
	if _, err := c.Snapshot(ctx, "tenant.acme"); err != nil {
		t.Fatalf("the tenant alone = %v; want it served", err)
	}
	if _, err := c.Snapshot(ctx, "tenant.acme", "app.a"); code(err) != varplane.CodeDocumentStale {
		t.Fatalf("the tenant with a lagging app = %v; want document-stale", err)
	}
	if _, err := c.view(ctx, []varplane.Scope{"app.a", "app.none", "tenant.acme"}, true); code(err) != varplane.CodeDocumentStale {
		t.Fatalf("the view of the tenant with a lagging app = %v; want document-stale", err)
	}
	if _, err := c.Snapshot(ctx, "app.a"); err != nil {
		t.Fatalf("the lagging app alone = %v; want it served however old", err)
	}
}

// TestSnapshotRepeatedScope: a request that names a scope twice holds one
// document of it, while commits install new ones; a scope with no document
// is a state without a head in States.
func TestSnapshotRepeatedScope(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":0}`)
	c, _ := newCache(t, mem, newFakeClock(), nil)
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 300; i++ {
			publish(t, mem, "app.a", fmt.Sprintf(`{"n":%d}`, i))
		}
	}()
	scopes := make([]varplane.Scope, 64)
	for i := range scopes {
		scopes[i] = "app.a"
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		docs, err := c.Snapshot(ctx, scopes...)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if d != docs[0] {
				t.Fatalf("one request read generations %d and %d of app.a", docs[0].Generation, d.Generation)
			}
		}
	}
	rc, err := New(ctx, mem, Options[json.RawMessage]{Root: "root", Decode: RawJSON})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sts, err := NewStore(rc, mem).States(ctx, []varplane.Scope{"app.none", "app.a", "app.none"})
	if err != nil || sts[0].Head != nil || sts[1].Head == nil || sts[0] != sts[2] {
		t.Fatalf("States = %+v, %v; want no head, a head, the same no head", sts, err)
	}
}
