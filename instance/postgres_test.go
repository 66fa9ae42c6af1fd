package instance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/postgres/pgtest"
)

// TestOneBoundOnPostgres: on PostgreSQL too the cache and the store's table
// are one bound: notifications of scopes the replica never read are not
// read and install nothing, evicted documents leave the store's table
// (Forget), and held and absent scopes still follow their commits.
func TestOneBoundOnPostgres(t *testing.T) {
	url := pgtest.SchemaURL(t, "vpinst", nil)
	ctx := context.Background()
	open := func(ro bool) *postgres.Store {
		s, err := postgres.Open(ctx, url, postgres.Options{ReadOnly: ro, RevalidateInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	control := open(false)
	replica := open(true)
	publish(t, control, "root", `{"n":0}`)
	for i := range 6 {
		publish(t, control, varplane.Scope(fmt.Sprintf("app.held%d", i)), `{"n":0}`)
	}
	c, _ := newCache(t, replica, systemClock{}, func(o *Options[value]) {
		o.RevalidateInterval = 50 * time.Millisecond
		o.MaxCached = 3
	})
	for i := range 6 { // the first ones are evicted
		if _, err := c.Get(ctx, varplane.Scope(fmt.Sprintf("app.held%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(ctx, "app.later"); code(err) != varplane.CodeNoHead {
		t.Fatalf("Get(app.later) = %v, want no-head", err)
	}
	reads := replica.Stats().NotificationReads
	for i := range 40 {
		publish(t, control, varplane.Scope(fmt.Sprintf("app.other%d", i)), fmt.Sprintf(`{"n":%d}`, i))
	}
	publish(t, control, "app.held5", `{"n":7}`)
	publish(t, control, "app.later", `{"n":8}`)
	waitFor(t, "the held scope's commit", func() bool { d, err := c.Get(ctx, "app.held5"); return err == nil && d.Value.N == 7 })
	waitFor(t, "the absent scope's first document", func() bool { d, err := c.Get(ctx, "app.later"); return err == nil && d.Value.N == 8 })
	if n := replica.Stats().NotificationReads - reads; n > 4 {
		t.Errorf("the store read %d notified heads; want only those of the held scope and the absent one (a publish is two commits)", n)
	}
	for sc := range replica.Lag() {
		if strings.HasPrefix(string(sc), "app.other") {
			t.Errorf("the store installed %s, which the replica never read", sc)
		}
	}
	// The root, the rollouts record (which every instance follows) and
	// MaxCached. The cache forgets an evicted scope in the store just after it
	// installs the one that took its place: under load that may trail the
	// read that installed it.
	waitFor(t, "the store's table within the cache's bound", func() bool { st := replica.Stats(); return st.Installed+st.Absent <= 5 })
	if st := replica.Stats(); st.Installed+st.Absent > 5 {
		t.Errorf("the store holds %d heads and %d absent scopes (%v); the cache's bound is 3, the root and the rollouts record", st.Installed, st.Absent, replica.Lag())
	}
}
