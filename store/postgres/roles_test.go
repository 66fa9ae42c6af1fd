package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// asRole returns u connecting as role.
func asRole(t *testing.T, u, role string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.User = url.User(role)
	return p.String()
}

// TestReadReplicaRole: with exactly the grants docs/postgres.md gives (a
// writer role that owns the schema, a reader role with USAGE and SELECT),
// the writer migrates and commits, a read-only replica connected as the
// reader serves and follows the commits, and the database itself refuses
// the reader's writes. Roles are cluster-wide, so this runs on a private
// cluster.
func TestReadReplicaRole(t *testing.T) {
	p := startPrivatePG(t)
	ctx := context.Background()
	su, err := pgx.Connect(ctx, p.url())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	for _, sql := range []string{
		"CREATE ROLE vp_writer LOGIN",
		"CREATE ROLE vp_reader LOGIN",
		"GRANT CONNECT, CREATE ON DATABASE postgres TO vp_writer",
		"GRANT CONNECT ON DATABASE postgres TO vp_reader",
	} {
		if _, err := su.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	u := withParam(t, p.url(), "schema", "cfg")
	w := openStore(t, asRole(t, u, "vp_writer"), Options{})
	rev := create(t, w, "role.k", 1)
	activate(t, w, "role.k", rev, 0)

	// The grants of docs/postgres.md, run by the schema's owner.
	wc, err := pgx.Connect(ctx, asRole(t, p.url(), "vp_writer"))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close(ctx)
	for _, sql := range []string{
		"GRANT USAGE ON SCHEMA cfg TO vp_reader",
		"GRANT SELECT ON ALL TABLES IN SCHEMA cfg TO vp_reader",
		"ALTER DEFAULT PRIVILEGES IN SCHEMA cfg GRANT SELECT ON TABLES TO vp_reader",
	} {
		if _, err := wc.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ru := asRole(t, u, "vp_reader") + "&read_only=true"
	if _, err := Open(ctx, asRole(t, u, "vp_reader"), Options{}); err == nil || !strings.Contains(err.Error(), "SQLSTATE 42501") {
		t.Errorf("a writer store opened as the reader = %v, want the migration refused for lack of privilege", err)
	}
	r := openStore(t, ru, Options{RevalidateInterval: 200 * time.Millisecond})
	rw := watchChan(t, r)
	if st := state(t, r, "role.k"); st.Generation != 1 || st.Head == nil || st.Head.Revision != rev {
		t.Fatalf("the reader replica reads %+v", st)
	}
	r2 := create(t, w, "role.k", 2)
	activate(t, w, "role.k", r2, 1)
	if c := nextCommit(t, rw, 5*time.Second); c.Changes[0].Generation != 2 {
		t.Fatalf("the reader replica got %+v", c)
	}
	if h, err := r.History(ctx, "role.k"); err != nil || len(h) != 4 {
		t.Errorf("history through the reader = %d events, %v", len(h), err)
	}
	if _, err := r.Idempotency(ctx, "none"); varplane.ErrorCode(err) != varplane.CodeNotFound {
		t.Errorf("idempotency through the reader = %v, want not-found", err)
	}
	if err := r.Append(ctx, storetest.ActivatedEvent("role.k", rev, 2), 2); varplane.ErrorCode(err) != varplane.CodeStoreUnsupported {
		t.Errorf("a write through the read-only replica = %v, want store-unsupported", err)
	}
	// And the database refuses the reader's writes too.
	rc, err := pgx.Connect(ctx, asRole(t, p.url(), "vp_reader"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(ctx)
	if _, err := rc.Exec(ctx, "SET search_path = cfg"); err != nil {
		t.Fatal(err)
	}
	_, err = rc.Exec(ctx, "SELECT varplane_reject('role.k', '{', '{}'::bytea, NULL, NULL)")
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a commit function called by the reader = %v, want permission denied", err)
	}

}

// TestRegressionInstalled: a head that goes back in the database (a restore
// from backup) is installed by a replica that held the newer one, counted
// and delivered.
func TestRegressionInstalled(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{RevalidateInterval: 100 * time.Millisecond, noListen: true})
	r1 := create(t, a, "reg.k", 1)
	activate(t, a, "reg.k", r1, 0)
	r2 := create(t, a, "reg.k", 2)
	activate(t, a, "reg.k", r2, 1)
	eventually(t, 3*time.Second, "B on generation 2", func() bool { return state(t, b, "reg.k").Generation == 2 })
	bw := watchChan(t, b)
	raw := rawConn(t, u)
	// What a restore to before the second activation leaves: generation 1
	// at an older version.
	if _, err := raw.Exec(context.Background(), `UPDATE heads SET (generation, revision, event, version) =
	(SELECT 1, e.body->>'revision', e.body, 1 FROM events e WHERE e.scope = 'reg.k' AND e.generation = 1) WHERE scope = 'reg.k'`); err != nil {
		t.Fatal(err)
	}
	c := nextCommit(t, bw, 3*time.Second)
	if c.Changes[0].Generation != 1 || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != r1 {
		t.Fatalf("B got %+v, want the restored generation 1", c.Changes[0])
	}
	if st := b.Stats(); st.Regressions == 0 {
		t.Errorf("stats = %+v, want a regression counted", st)
	}
}
