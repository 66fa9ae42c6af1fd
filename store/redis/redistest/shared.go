package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// DefaultURL is the shared Redis the tests use when VARPLANE_REDIS_URL is
// unset.
const DefaultURL = "redis://127.0.0.1:6379/0"

// PrefixURL returns a store URL on the shared Redis (VARPLANE_REDIS_URL, or
// DefaultURL) under a key prefix of this test alone, "vptest-<name>-<random>",
// whose keys are deleted when the test ends. It only reads and writes keys
// under that prefix: a test that stops or reconfigures a server starts one
// of its own instead. It skips the test when Redis does not answer, and
// fails it instead when VARPLANE_REQUIRE_SERVICES is set.
func PrefixURL(tb testing.TB, name string) string {
	tb.Helper()
	base := os.Getenv("VARPLANE_REDIS_URL")
	if base == "" {
		base = DefaultURL
	}
	p, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("VARPLANE_REDIS_URL: %v", err)
	}
	bare := *p
	bare.RawQuery = ""
	opt, err := rueidis.ParseURL(bare.String())
	if err != nil {
		tb.Fatalf("VARPLANE_REDIS_URL: %v", err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = c.Do(ctx, c.B().Ping().Build()).Error()
		cancel()
		if err != nil {
			c.Close()
		}
	}
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			tb.Fatalf("redis at VARPLANE_REDIS_URL is required and unreachable: %v", err)
		}
		tb.Skipf("redis not reachable (set VARPLANE_REDIS_URL; VARPLANE_REQUIRE_SERVICES makes this fail): %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "vptest-" + name + "-" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, c, prefix); err != nil {
			tb.Errorf("clean up %s: %v", prefix, err)
		}
	})
	q := p.Query()
	q.Set("prefix", prefix)
	p.RawQuery = q.Encode()
	return p.String()
}

// DeletePrefix deletes every key under prefix (the keys "prefix:*") with
// SCAN and DEL, a batch at a time, so that a test leaves nothing behind on a
// shared server. It stops at the first error and returns it.
func DeletePrefix(ctx context.Context, c rueidis.Client, prefix string) error {
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return err
		}
		if len(e.Elements) > 0 {
			if err := c.Do(ctx, c.B().Del().Key(e.Elements...).Build()).Error(); err != nil {
				return err
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
}
