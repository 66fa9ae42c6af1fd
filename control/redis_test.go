package control_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/redis"
)

// openRedis opens a store on the shared Redis under prefix (with opts when
// given), skipping the test when Redis does not answer (failing under
// VARPLANE_REQUIRE_SERVICES).
func openRedis(t *testing.T, prefix string, opts ...redis.Options) *redis.Store {
	t.Helper()
	u := os.Getenv("VARPLANE_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var o redis.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := redis.Open(ctx, u+"?prefix="+prefix, o)
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") == "" && varplane.ErrorCode(err) == varplane.CodeStoreUnavailable {
			t.Skipf("redis not reachable (set VARPLANE_REDIS_URL; VARPLANE_REQUIRE_SERVICES makes this fail): %v", err)
		}
		t.Fatal(err)
	}
	return s
}

// dropPrefix deletes the test's keys from the shared Redis.
func dropPrefix(t *testing.T, prefix string) {
	u := os.Getenv("VARPLANE_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := rueidis.ParseURL(u)
	if err != nil {
		t.Log(err)
		return
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Log(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Log(err)
			return
		}
		for _, k := range e.Elements {
			_ = c.Do(ctx, c.B().Del().Key(k).Build()).Error()
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}

// TestTwoReplicasOnOneRedis: two control planes share one Redis; both
// publish a change on the same base: one publishes, the other is
// conflicted, and the head is the first one's.
func TestTwoReplicasOnOneRedis(t *testing.T) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "vp-control-test-" + hex.EncodeToString(b[:])
	r1 := newEnv(t, envOpts{store: openRedis(t, prefix)})
	t.Cleanup(func() { dropPrefix(t, prefix) })
	r2 := newEnv(t, envOpts{store: openRedis(t, prefix)})
	ctx := context.Background()
	r1.publish("app.flags", `{"a":1}`)
	r1.setPolicy("app", 1, []string{"reviewer"}, false)

	a := r1.propose("alice", "app.flags", 1, `{"a":2}`)
	c := r2.propose("carol", "app.flags", 1, `{"a":3}`)
	// Each replica sees the other's change and policy: they are in Redis.
	got, err := r2.svc.Get(ctx, a.ID)
	if err != nil || got.Author != "alice" {
		t.Fatalf("replica 2 reads replica 1's change: %+v %v", got, err)
	}
	if _, err := r2.engine.Publish(ctx, varplane.PublishRequest{Scope: "app.flags", Document: json.RawMessage(`{}`), ExpectedGeneration: 1}); !errors.Is(err, varplane.ErrChangeRequired) {
		t.Fatalf("a direct publish on replica 2 under replica 1's policy = %v, want change-required", err)
	}
	r2.act("bob", a.ID, "approve", nil)
	r1.act("bob", c.ID, "approve", nil)
	// Each approval was made on the other replica: wait until the one that
	// publishes reads it (see the eventual consistency below); a publish
	// that reads the change before is refused as unapproved, which is right
	// for what it read.
	approved := func(r *env, id string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := r.svc.Get(ctx, id)
			if err == nil && len(got.Approvals) == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the approval of %s as the other replica reads it: %+v %v", id, got, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	approved(r1, a.ID)
	approved(r2, c.ID)

	st, body, _ := r1.act("alice", a.ID, "publish", nil)
	want(t, "replica 1 publishes", st, body, 200, "")
	st, body, _ = r2.act("carol", c.ID, "publish", nil)
	want(t, "replica 2 publishes on the moved base", st, body, 409, varplane.CodeRevisionConflict)

	for _, r := range []*env{r1, r2} {
		s, err := r.store.State(ctx, "app.flags")
		if err != nil || s.Generation != 2 || string(s.Head.Document) != `{"a":2}` {
			t.Fatalf("head: %+v %v, want generation 2 {\"a\":2}", s, err)
		}
	}
	// Replica 1 sees replica 2's write once Redis's invalidation reaches
	// it (the store's reads are eventually consistent across processes;
	// its writes are compare-and-set, so a stale read only loses a race).
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err = r1.svc.Get(ctx, c.ID)
		if err == nil && got.State == control.StateConflicted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 2's change as replica 1 reads it: %+v %v, want conflicted", got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The leases are shared too.
	if err := r1.store.AcquireLease(ctx, control.CanaryLease, "r1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r2.store.AcquireLease(ctx, control.CanaryLease, "r2", time.Minute); !errors.Is(err, varplane.ErrLeaseHeld) {
		t.Fatalf("replica 2 takes replica 1's lease: %v", err)
	}
	_ = r1.store.ReleaseLease(ctx, control.CanaryLease, "r1")
}
