package main

// End-to-end test of serve on the shared PostgreSQL: two real varplane
// processes on one schema of their own, dropped at the end.

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane/store/postgres/pgtest"
)

// postgresSchemaURL returns the --store URL of a fresh schema on the
// shared server, dropped at cleanup; it skips when the server does not
// answer (fails under VARPLANE_REQUIRE_SERVICES).
func postgresSchemaURL(t *testing.T) string {
	t.Helper()
	return pgtest.SchemaURL(t, "e2e", url.Values{"revalidate_interval": {"300ms"}})
}

// TestPostgresReplicas: a commit on A reaches a live-stream subscriber of
// B; a read-only replica serves the head and refuses mutations.
func TestPostgresReplicas(t *testing.T) {
	u := postgresSchemaURL(t)
	a := startServer(t, "--store", u)
	b := startServer(t, "--store", u)
	const key = "fleet.pg"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rev1 := createRev(t, a.Base, key, map[string]any{"n": 1})
	activate(t, a.Base, key, rev1, 0)
	events := openSSE(t, ctx, b.Base+"/watch?key="+q(key))
	waitHead(t, ctx, events, 1)
	rev2 := createRev(t, a.Base, key, map[string]any{"n": 2})
	activate(t, a.Base, key, rev2, 1)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if ev := waitHead(t, wctx, events, 2); !strings.Contains(ev.data, rev2) {
		t.Fatalf("head event %q on B does not name %s", ev.data, rev2)
	}
	if st, g, body := readGen(t, b.Base, key); st != 200 || g != 2 {
		t.Fatalf("B reads %d %s, want generation 2", st, body)
	}
	// The atomic publish, through B; A's stream sees its one activation.
	expect(t, call(t, "POST", b.Base+"/admin/publish", map[string]any{"scope": key, "document": map[string]any{"n": 3}, "expectedGeneration": 2}), 200, "")
	eventsA := openSSE(t, ctx, a.Base+"/watch?key="+q(key))
	waitHead(t, wctx, eventsA, 3)
	expect(t, call(t, "POST", a.Base+"/admin/publish", map[string]any{"scope": key, "document": map[string]any{"n": 4}, "expectedGeneration": 2}), 409, "revision-conflict")
	// serve's store figures: the store's counters on /metrics and its
	// details on /readyz.
	text := string(call(t, "GET", a.URL+"/metrics", nil).body)
	if v, ok := metricValue(text, "varplane_postgres_commits_total"); !ok || v < 4 {
		t.Errorf("A's varplane_postgres_commits_total = %v (present %v), want at least 4", v, ok)
	}
	if _, ok := metricValue(text, `varplane_postgres_lagging_scopes{threshold="warn"}`); !ok {
		t.Error("A's /metrics has no varplane_postgres_lagging_scopes")
	}
	if pg, _ := expect(t, call(t, "GET", a.URL+"/readyz", nil), 200, "")["postgres"].(map[string]any); pg["readOnly"] != false || pg["installedScopes"] != float64(1) {
		t.Errorf("A's /readyz postgres details = %v", pg)
	}

	c := startServer(t, "--store", u+"&read_only=true")
	if st, g, body := readGen(t, c.Base, key); st != 200 || g != 3 {
		t.Fatalf("read-only replica reads %d %s, want generation 3", st, body)
	}
	if pg, _ := expect(t, call(t, "GET", c.URL+"/readyz", nil), 200, "")["postgres"].(map[string]any); pg["readOnly"] != true {
		t.Errorf("the read-only replica's /readyz postgres details = %v", pg)
	}
	// It could take no lease: the writers run the reclamation passes.
	if logged := c.logs(); !strings.Contains(logged, "a read-only replica runs no reclamation passes") {
		t.Errorf("the read-only replica did not say it runs no reclamation passes: %s", logged)
	}
	m := expect(t, call(t, "POST", c.Base+"/admin/revisions", map[string]any{"scope": key, "document": map[string]any{"n": -1}}), 400, "store-unsupported")
	if msg := str(t, m, "error"); !strings.Contains(msg, "read-only") {
		t.Fatalf("message %q does not say the replica is read-only", msg)
	}
	c.stop()
}

// TestPostgresRetention: serve on PostgreSQL runs reclamation passes: with
// the two newest revisions kept (the head among them), the oldest of three
// published ones is reclaimed (replay to it answers 410
// revision-reclaimed, its history event keeps no document) and the kept
// ones still replay.
func TestPostgresRetention(t *testing.T) {
	u := postgresSchemaURL(t)
	a := startServer(t, "--store", u, "--reclaim-interval", "200ms", "--retain-count", "2", "--retain-min-age", "0")
	const key = "ret.pg"
	for i := range 3 {
		expect(t, call(t, "POST", a.Base+"/admin/publish", map[string]any{"scope": key, "document": map[string]any{"n": i}, "expectedGeneration": i}), 200, "")
	}
	replay := func(gen int) answer {
		return call(t, "GET", fmt.Sprintf("%s/admin/replay?scope=%s&toGeneration=%d", a.Base, q(key), gen), nil)
	}
	eventually(t, 10*time.Second, "the oldest revision reclaimed", func() (bool, string) {
		r := replay(1)
		return r.status == 410, fmt.Sprintf("replay to 1: %d %s", r.status, r.body)
	})
	expect(t, replay(1), 410, "revision-reclaimed")
	for _, g := range []int{2, 3} {
		expect(t, replay(g), 200, "")
	}
	h := expect(t, call(t, "GET", a.Base+"/admin/history?scope="+q(key), nil), 200, "")
	events, _ := h["events"].([]any)
	if len(events) != 6 {
		t.Fatalf("history has %d events, want 6: %v", len(events), h)
	}
	for i, want := range []bool{false, true, true} {
		ev, _ := events[2*i].(map[string]any)
		if _, has := ev["document"]; ev["kind"] != "revision-created" || has != want {
			t.Errorf("history event %d = %v, want a revision-created event with a document: %v", 2*i, ev, want)
		}
	}
	// The pass adds to the counter when it ends, which may be after the
	// reclaimed body is already gone.
	eventually(t, 10*time.Second, "the reclamation counted", func() (bool, string) {
		text := string(call(t, "GET", a.URL+"/metrics", nil).body)
		v, ok := metricValue(text, "varplane_retention_revisions_reclaimed_total")
		return ok && v == 1, fmt.Sprintf("varplane_retention_revisions_reclaimed_total = %v (present %v), want 1", v, ok)
	})
}

// TestPostgresVerify: varplane verify --store reads a PostgreSQL store's
// history without writing (opened read-only) and finds its chains sound,
// with the digest the API anchors.
func TestPostgresVerify(t *testing.T) {
	u := postgresSchemaURL(t)
	a := startServer(t, "--store", u)
	for i, key := range []string{"pgv.a", "pgv.b", "pgv.a"} {
		gen := 0
		if i == 2 {
			gen = 1
		}
		expect(t, call(t, "POST", a.Base+"/admin/publish", map[string]any{"scope": key, "document": map[string]any{"n": i}, "expectedGeneration": gen}), 200, "")
	}
	anchor := expect(t, call(t, "GET", a.Base+"/admin/chain", nil), 200, "")
	r := runCLI(t, nil, "", "verify", "--store", u)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "sound: store postgres") || !strings.Contains(r.stdout, "chain digest: "+anchor["digest"].(string)) {
		t.Fatalf("verify --store (postgres) = %+v, want sound with the API's digest %v", r, anchor["digest"])
	}
}
