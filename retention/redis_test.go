package retention_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// redisURL returns the URL of the shared Redis under a prefix of this test
// alone (its keys are deleted afterwards), skipping when Redis does not
// answer unless VARPLANE_REQUIRE_SERVICES is set.
func redisURL(t *testing.T) string {
	t.Helper()
	return redistest.PrefixURL(t, "retention")
}

// Seed 002 on Redis: two replicas (two stores on one Redis, two holders)
// run their passes at once and the result is the policy's, as if one had
// run: no body counted twice, none lost beyond it. (That a held lease makes
// the other replica skip the scope is TestLeases, on every store.)
func TestRedisTwoReplicas(t *testing.T) {
	u := redisURL(t)
	ctx := context.Background()
	open := func() *redis.Store {
		s, err := redis.Open(ctx, u, redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	revs := publish(t, a, "app.k", 0, 60, t0)
	now := t0.Add(8 * 24 * time.Hour)
	ra := runner(t, a, now, func(o *retention.Options) { o.Holder = "replica-a" })
	rb := runner(t, b, now, func(o *retention.Options) { o.Holder = "replica-b" })
	var wg sync.WaitGroup
	reps := make([]retention.Report, 2)
	for i, r := range []*retention.Runner{ra, rb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if reps[i], err = r.RunOnce(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := reps[0].Reclaimed + reps[1].Reclaimed; got != 10 {
		t.Errorf("the replicas reclaimed %d together (%+v), want 10", got, reps)
	}
	if n := kept(t, b, "app.k", revs); n != 50 {
		t.Errorf("kept %d, want 50", n)
	}
	if n := kept(t, b, "app.k", revs[10:]); n != 50 {
		t.Errorf("kept %d of the 50 newest, want all", n)
	}
	if hist, err := b.History(ctx, "app.k"); err != nil || len(hist) != 120 {
		t.Errorf("history: %d events, %v; want 120", len(hist), err)
	}
}
