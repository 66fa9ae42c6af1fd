package instance

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// redisBase is the shared Redis, or a skip when it does not answer (a
// failure under VARPLANE_REQUIRE_SERVICES).
func redisBase(t testing.TB) string {
	t.Helper()
	u := os.Getenv("VARPLANE_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := rueidis.ParseURL(u)
	if err == nil {
		opt.DisableCache = true
		var c rueidis.Client
		if c, err = rueidis.NewClient(opt); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = c.Do(ctx, c.B().Ping().Build()).Error()
			cancel()
			c.Close()
		}
	}
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			t.Fatalf("redis is required and unreachable: %v", err)
		}
		t.Skipf("redis not reachable (set VARPLANE_REDIS_URL; VARPLANE_REQUIRE_SERVICES makes this fail): %v", err)
	}
	return u
}

func newPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "vpinst-" + hex.EncodeToString(b)
}

func openRedis(t testing.TB, url string, ro bool) *redis.Store {
	t.Helper()
	s, err := redis.Open(context.Background(), url, redis.Options{ReadOnly: ro, RevalidateInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// raw returns a plain client for poking at keys.
func raw(t testing.TB, url string) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(strings.Split(url, "?")[0] + "?" + addrParams(url))
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// addrParams keeps the addr= parameters of a store URL (the cluster's).
func addrParams(url string) string {
	_, q, _ := strings.Cut(url, "?")
	var keep []string
	for _, p := range strings.Split(q, "&") {
		if strings.HasPrefix(p, "addr=") {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, "&")
}

// headKey is the head key layout of docs/redis.md.
func headKey(prefix string, sc varplane.Scope) string {
	root := string(sc)
	if i := strings.IndexByte(root, '.'); i >= 0 {
		root = root[:i]
	}
	return fmt.Sprintf("%s:{%s}:head:%s", prefix, b64(root), sc)
}

// TestOnRedis runs the instance rules against a real Redis: standalone and
// a three-master Cluster.
func TestOnRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		base := redisBase(t)
		testOnRedis(t, func(prefix string) string {
			t.Cleanup(func() { deletePrefix(t, base, prefix) })
			return base + "?prefix=" + prefix
		})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		testOnRedis(t, c.URL)
	})
}

func testOnRedis(t *testing.T, urlOf func(prefix string) string) {
	prefix := newPrefix()
	url := urlOf(prefix)
	control := openRedis(t, url, false)
	replica := openRedis(t, url, true)
	ctx := context.Background()
	publish(t, control, "root", `{"n":0}`)
	publish(t, control, "app.a", `{"n":1}`)
	publish(t, control, "app.bad", `{"bad":true}`)
	for i := range 40 {
		publish(t, control, varplane.Scope(fmt.Sprintf("tenant.t%d", i)), fmt.Sprintf(`{"n":%d}`, i))
	}
	c, logs := newCache(t, replica, systemClock{}, func(o *Options[value]) {
		o.RevalidateInterval = 20 * time.Millisecond
		o.Families = []Family{{Prefix: "tenant", MaxCached: 10}}
		o.InstanceID = "pod-" + prefix
	})
	if err := c.Ready(); err != nil {
		t.Fatal(err)
	}

	// A change through the control plane is installed from the invalidation.
	if d, err := c.Get(ctx, "app.a"); err != nil || d.Value.N != 1 {
		t.Fatalf("Get(app.a) = %+v, %v", d, err)
	}
	publish(t, control, "app.a", `{"n":2}`)
	waitFor(t, "the change to arrive", func() bool { d, err := c.Get(ctx, "app.a"); return err == nil && d.Value.N == 2 })

	// A refused document is failed.
	if _, err := c.Get(ctx, "app.bad"); code(err) != varplane.CodeDocumentFailed {
		t.Fatalf("Get(app.bad) = %v", err)
	}

	// The family bound holds for the cache and for the store's own copy.
	for i := range 40 {
		if _, err := c.Get(ctx, varplane.Scope(fmt.Sprintf("tenant.t%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	tenants := 0
	for sc := range replica.Lag() {
		if strings.HasPrefix(string(sc), "tenant.") {
			tenants++
		}
	}
	if tenants > 10 {
		t.Fatalf("the store holds %d tenants; the cache's bound is 10", tenants)
	}

	// A DEL of a head fails the document closed, never "no head", logged.
	r := raw(t, url)
	if err := r.Do(ctx, r.B().Del().Key(headKey(prefix, "app.a")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the vanished head to fail", func() bool {
		_, err := c.Get(ctx, "app.a")
		return code(err) == varplane.CodeDocumentFailed && wire.Status(code(err)) == 503
	})
	// A SET of a head corrupts it: 503, and the value stays.
	if err := r.Do(ctx, r.B().Set().Key(headKey(prefix, "tenant.t39")).Value("junk").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the corrupt head to fail", func() bool {
		_, err := c.Get(ctx, "tenant.t39")
		return code(err) == varplane.CodeDocumentFailed
	})
	if v, _ := r.Do(ctx, r.B().Get().Key(headKey(prefix, "tenant.t39")).Build()).ToString(); v != "junk" {
		t.Fatalf("corrupt head = %q, want it left in place", v)
	}
	_ = logs

	// The heartbeat is in the store.
	waitFor(t, "the status heartbeat", func() bool {
		m, err := control.InstanceStatuses(ctx)
		if err != nil {
			return false
		}
		var st varplane.InstanceStatus
		return json.Unmarshal(m["pod-"+prefix], &st) == nil && st.Ready && len(st.Documents) > 0
	})
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// deletePrefix removes every key under prefix from the shared Redis.
func deletePrefix(t testing.TB, base, prefix string) {
	c := raw(t, base)
	ctx := context.Background()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Logf("cleanup of %s: %v", prefix, err)
			return
		}
		for _, k := range e.Elements {
			_ = c.Do(ctx, c.B().Del().Key(k).Build()).Error()
		}
		if e.Cursor == 0 {
			return
		}
		cursor = e.Cursor
	}
}

// TestRedisHang: with Redis paused (SIGSTOP), installed documents are
// served, a cold load answers store-unavailable after the cold-load
// timeout and is not remembered as absent, and once Redis continues the
// next read loads the document.
func TestRedisHang(t *testing.T) {
	srv := redistest.StartServer(t)
	url := srv.URL("hang")
	control := openRedis(t, url, false)
	publish(t, control, "root", `{"n":0}`)
	publish(t, control, "app.a", `{"n":1}`)
	publish(t, control, "app.cold", `{"n":2}`)
	replica, err := redis.Open(context.Background(), url, redis.Options{ReadOnly: true, CommandTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCache(t, replica, systemClock{}, func(o *Options[value]) {
		o.ColdLoadTimeout = 200 * time.Millisecond
		o.StoreReadTimeout = 2 * time.Second
	})
	defer func() { _ = c.Close(); _ = replica.Close() }()
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	if d, err := c.Get(ctx, "app.a"); err != nil || d.Value.N != 1 {
		t.Fatalf("installed read while Redis hangs = %+v, %v", d, err)
	}
	start := time.Now()
	_, err = c.Get(ctx, "app.cold")
	if code(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("cold read while Redis hangs = %v, want store-unavailable", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("cold read answered after %v, want about the 200ms cold-load timeout", el)
	}
	srv.Resume()
	waitFor(t, "the cold document once Redis continues", func() bool {
		d, err := c.Get(ctx, "app.cold")
		return err == nil && d.Value.N == 2
	})
}

// TestOneBoundOnRedis: the cache and the store's table of installed heads
// are one bound. Scopes the writer publishes that the replica never read
// are not installed in either (an invalidation for a scope not held
// installs nothing); held scopes still follow their commits; a scope
// remembered as absent is installed when it is published.
func TestOneBoundOnRedis(t *testing.T) {
	control, replica := writerAndReplica(t)
	ctx := context.Background()
	publish(t, control, "root", `{"n":0}`)
	for i := range 3 {
		publish(t, control, varplane.Scope(fmt.Sprintf("app.held%d", i)), `{"n":0}`)
	}
	c, _ := newCache(t, replica, systemClock{}, func(o *Options[value]) {
		o.RevalidateInterval = 20 * time.Millisecond
		o.MaxCached = 3
	})
	for i := range 3 {
		if _, err := c.Get(ctx, varplane.Scope(fmt.Sprintf("app.held%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(ctx, "app.later"); code(err) != varplane.CodeNoHead {
		t.Fatalf("Get(app.later) = %v, want no-head", err)
	}
	reads := replica.Stats().InvalidationReads
	for i := range 60 {
		publish(t, control, varplane.Scope(fmt.Sprintf("app.other%d", i)), fmt.Sprintf(`{"n":%d}`, i))
	}
	publish(t, control, "app.held1", `{"n":7}`)
	publish(t, control, "app.later", `{"n":8}`)
	waitFor(t, "the held scope's commit", func() bool { d, err := c.Get(ctx, "app.held1"); return err == nil && d.Value.N == 7 })
	waitFor(t, "the absent scope's first document", func() bool { d, err := c.Get(ctx, "app.later"); return err == nil && d.Value.N == 8 })
	if n := replica.Stats().InvalidationReads - reads; n > 4 {
		t.Errorf("the store read %d invalidated heads; want only those of the held scope and the absent one (a publish is two commits)", n)
	}
	for sc := range replica.Lag() {
		if strings.HasPrefix(string(sc), "app.other") {
			t.Errorf("the store installed %s, which the replica never read", sc)
		}
	}
	// root + the rollouts record (varplane.RolloutScope, which every
	// instance follows) + at most MaxCached (the bound drops a tenth past
	// it at a time)
	waitFor(t, "the store's table within the cache's bound", func() bool { st := replica.Stats(); return st.Installed+st.Absent <= 5 })
	if st := replica.Stats(); st.Installed+st.Absent > 5 {
		t.Errorf("the store holds %d heads and %d absent scopes; the cache's bound is 3, the root and the rollouts record", st.Installed, st.Absent)
	}
	if n := c.Stats().Installed; n > 4 {
		t.Errorf("the cache holds %d documents; its bound is 3 and the root", n)
	}
}

// TestFollowOnRedis: a scope a Follow function reports (a live stream's)
// is followed though the cache does not hold it: its commits reach the
// store's Watch listeners, and the store's table does not keep it.
func TestFollowOnRedis(t *testing.T) {
	control, replica := writerAndReplica(t)
	publish(t, control, "root", `{"n":0}`)
	c, _ := newCache(t, replica, systemClock{}, func(o *Options[value]) { o.MaxCached = 3 })
	c.Follow(func(sc varplane.Scope) bool { return sc == "app.watched" })
	seen := make(chan varplane.Scope, 16)
	stop := replica.Watch(func(cm varplane.Commit) {
		for _, ch := range cm.Changes {
			seen <- ch.Scope
		}
	})
	defer stop()
	delivered := func(what string) {
		t.Helper()
		select {
		case sc := <-seen:
			if sc != "app.watched" {
				t.Fatalf("the store delivered %s, which nobody holds or watches", sc)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the watched scope's %s was not delivered", what)
		}
	}
	publish(t, control, "app.unwatched", `{"n":1}`)
	publish(t, control, "app.watched", `{"n":2}`)
	delivered("first commit")
	waitFor(t, "the store's table to drop the watched scope", func() bool { _, ok := replica.Lag()["app.watched"]; return !ok })
	if n := c.Stats().Installed; n != 1 {
		t.Errorf("the cache holds %d documents; want the root only", n)
	}
	publish(t, control, "app.watched", `{"n":3}`)
	delivered("second commit")
}

// writerAndReplica opens a writer and a read-only store on a private prefix
// of the shared Redis.
func writerAndReplica(t *testing.T) (control, replica *redis.Store) {
	base := redisBase(t)
	prefix := newPrefix()
	t.Cleanup(func() { deletePrefix(t, base, prefix) })
	url := base + "?prefix=" + prefix
	return openRedis(t, url, false), openRedis(t, url, true)
}

// TestOneCachePerStore: a store that keeps its own copy serves one cache
// at a time: a second cache on the same store value is refused with
// varplane.ErrHeld (its Hold would have replaced the first's, and its
// Forget silenced the first's commits), and a cache opened after the first
// closed holds the store and hears its commits.
func TestOneCachePerStore(t *testing.T) {
	control, replica := writerAndReplica(t)
	publish(t, control, "root", `{"n":0}`)
	publish(t, control, "app.a", `{"n":1}`)
	ctx := context.Background()
	first, err := New(ctx, replica, Options[value]{Root: "root", Decode: decodeValue})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, replica, Options[value]{Root: "root", Decode: decodeValue}); !errors.Is(err, varplane.ErrHeld) {
		t.Fatalf("a second cache on a held store: %v, want ErrHeld", err)
	}
	_ = first.Close()
	second, err := New(ctx, replica, Options[value]{Root: "root", Decode: decodeValue})
	if err != nil {
		t.Fatalf("a cache after the first closed: %v", err)
	}
	defer second.Close()
	if _, err := second.Get(ctx, "app.a"); err != nil {
		t.Fatal(err)
	}
	publish(t, control, "app.a", `{"n":2}`)
	waitFor(t, "the second cache hears the commit", func() bool {
		d, err := second.Get(ctx, "app.a")
		return err == nil && d.Value.N == 2
	})
}
