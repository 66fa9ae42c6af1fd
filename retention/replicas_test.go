package retention_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/postgres/pgtest"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// Seed 002 on a shared store: two replicas (two stores on one database,
// two holders) run their passes at once and the result is the policy's,
// as if one had run: no body counted twice, none lost beyond it. (That a
// held lease makes the other replica skip the scope is TestLeases, on
// every store.)
func twoReplicas(t *testing.T, open func() retention.Reclaimer) {
	t.Helper()
	ctx := context.Background()
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

func TestRedisTwoReplicas(t *testing.T) {
	// A prefix of this test alone; its keys are deleted afterwards.
	u := redistest.PrefixURL(t, "retention")
	twoReplicas(t, func() retention.Reclaimer {
		s, err := redis.Open(context.Background(), u, redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestPostgresTwoReplicas(t *testing.T) {
	// A schema of this test alone, dropped afterwards.
	u := pgtest.SchemaURL(t, "retention", url.Values{})
	twoReplicas(t, func() retention.Reclaimer {
		s, err := postgres.Open(context.Background(), u, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
