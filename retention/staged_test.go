package retention_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/postgres/pgtest"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
	"github.com/varplane/varplane/store/storetest"
)

// everyStore is stores plus the shared stores, each on a prefix or schema
// of the test alone.
func everyStore() map[string]func(t *testing.T) retention.Reclaimer {
	all := map[string]func(t *testing.T) retention.Reclaimer{
		"redis": func(t *testing.T) retention.Reclaimer {
			s, err := redis.Open(context.Background(), redistest.PrefixURL(t, "staged"), redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"postgres": func(t *testing.T) retention.Reclaimer {
			s, err := postgres.Open(context.Background(), pgtest.SchemaURL(t, "staged", url.Values{}), postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, open := range stores {
		all[name] = open
	}
	return all
}

// Issue 33 item 1: a revision created through the var API and not
// activated (the two-step flow: create now, activate after review) is not
// an orphan. With the default policy a pass long past the orphan age keeps
// it, on every store, and it can then be activated.
func TestStagedRevisionSurvives(t *testing.T) {
	for name, open := range everyStore() {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := context.Background()
			publish(t, s, "app.k", 0, 1, t0)
			staged := storetest.CreatedEvent("app.k", storetest.Doc(500))
			staged.Timestamp = t0
			if err := s.Append(ctx, staged, 0); err != nil {
				t.Fatal(err)
			}
			for _, at := range []time.Duration{61 * time.Minute, 8 * 24 * time.Hour} {
				rep, err := runner(t, s, t0.Add(at), nil).RunOnce(ctx)
				if err != nil || rep.Reclaimed != 0 {
					t.Fatalf("pass %v after the creation: %+v, %v; want nothing reclaimed", at, rep, err)
				}
				if _, err := s.Revision(ctx, "app.k", staged.Revision); err != nil {
					t.Fatalf("staged revision after a pass %v later: %v", at, err)
				}
			}
			e := varplane.NewEngine(s, varplane.Options{})
			defer e.Close()
			res, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "app.k", Revision: staged.Revision, ExpectedGeneration: 1})
			if err != nil || res.Generation != 2 {
				t.Fatalf("activating the staged revision: %+v, %v", res, err)
			}
			if h, err := e.Head(ctx, "app.k"); err != nil || h.Revision != staged.Revision {
				t.Fatalf("head = %v, %v; want the staged revision", h, err)
			}
		})
	}
}
