package access_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/redis"
)

// opener opens a fresh store of one kind for a test; the stores of one
// opener's call share their data (the same file, the same Redis prefix).
type opener struct {
	name string
	open func(t *testing.T) func(t *testing.T) varplane.Store
}

// stores are the stores the access tests run on.
var stores = []opener{
	{"memory", func(t *testing.T) func(*testing.T) varplane.Store {
		s := memory.New()
		return func(*testing.T) varplane.Store { return s }
	}},
	{"file", func(t *testing.T) func(*testing.T) varplane.Store {
		path := filepath.Join(t.TempDir(), "log.jsonl")
		var s varplane.Store
		return func(t *testing.T) varplane.Store {
			if s == nil {
				fs, err := file.Open(context.Background(), path, file.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = fs.Close() })
				s = fs
			}
			return s
		}
	}},
	{"redis", func(t *testing.T) func(*testing.T) varplane.Store {
		u := redisURL(t)
		return func(t *testing.T) varplane.Store { return openRedis(t, u, redis.Options{}) }
	}},
}

// redisURL returns a URL of the shared Redis under a prefix of its own,
// deleted at the end of the test; it skips when Redis does not answer,
// unless VARPLANE_REQUIRE_SERVICES is set.
func redisURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv("VARPLANE_REDIS_URL")
	if base == "" {
		base = "redis://127.0.0.1:6379/0"
	}
	c := rawRedis(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := c.Do(ctx, c.B().Ping().Build()).Error()
	cancel()
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			t.Fatalf("redis at VARPLANE_REDIS_URL is required and unreachable: %v", err)
		}
		t.Skipf("redis not reachable (set VARPLANE_REDIS_URL; VARPLANE_REQUIRE_SERVICES makes this fail): %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "vptest-access-" + hex.EncodeToString(b)
	t.Cleanup(func() { deletePrefix(t, c, prefix) })
	p, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	q.Set("prefix", prefix)
	p.RawQuery = q.Encode()
	return p.String()
}

func rawRedis(t *testing.T, u string) rueidis.Client {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.RawQuery = ""
	opt, err := rueidis.ParseURL(p.String())
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			t.Fatalf("redis is required and unreachable: %v", err)
		}
		t.Skipf("redis not reachable: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func deletePrefix(t *testing.T, c rueidis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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

func openRedis(t *testing.T, u string, opts redis.Options) *redis.Store {
	t.Helper()
	s, err := redis.Open(context.Background(), u, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
