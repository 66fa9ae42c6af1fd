package access_test

import (
	"context"
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
	"github.com/varplane/varplane/store/redis/redistest"
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
	return redistest.PrefixURL(t, "access")
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
