package main

import (
	"fmt"
	"testing"
	"time"
)

// TestReadReplica runs `serve --read-only --root` against a private Redis
// and a control-plane server: not ready (503 not-ready on /readyz and on
// reads) until the root exists; reads served from the instance cache; a
// change on the control plane reaches the replica; a head deleted in Redis
// answers 503 document-failed, never 404; the old --redis-read-only flag
// still works.
func TestReadReplica(t *testing.T) {
	r := newPrivateRedis(t)
	const prefix = "e2erep"
	a := startServer(t, "--store", r.url(prefix), "--redis-revalidate-interval", "100ms")
	b := startServer(t, "--store", r.url(prefix), "--read-only", "--root", "plat.main", "--max-cached", "100",
		"--redis-revalidate-interval", "100ms", "--instance-id", "rep-b")
	old := startServer(t, "--store", r.url(prefix), "--redis-read-only", "--redis-revalidate-interval", "100ms")

	expect(t, call(t, "GET", b.URL+"/readyz", nil), 503, "")
	expect(t, call(t, "GET", b.Base+"?key="+q("app.a"), nil), 503, "not-ready")

	activate(t, a.Base, "plat.main", createRev(t, a.Base, "plat.main", map[string]any{"n": 0}), 0)
	activate(t, a.Base, "app.a", createRev(t, a.Base, "app.a", map[string]any{"n": 1}), 0)
	eventually(t, 5*time.Second, "the replica ready", func() (bool, string) {
		ans := call(t, "GET", b.URL+"/readyz", nil)
		return ans.status == 200, fmt.Sprintf("%d %s", ans.status, ans.body)
	})
	if st, g, body := readGen(t, b.Base, "app.a"); st != 200 || g != 1 {
		t.Fatalf("replica read = %d %s", st, body)
	}
	expect(t, call(t, "GET", b.Base+"?key="+q("app.none"), nil), 404, "no-head")
	activate(t, a.Base, "app.a", createRev(t, a.Base, "app.a", map[string]any{"n": 2}), 1)
	eventually(t, 5*time.Second, "the change on the replica", func() (bool, string) {
		st, g, body := readGen(t, b.Base, "app.a")
		return st == 200 && g == 2, string(body)
	})
	expect(t, call(t, "POST", b.Base+"/admin/activate", map[string]any{"scope": "app.a", "revision": "x", "expectedGeneration": 2}), 400, "")

	// A revision to recover with, stored before the head vanishes (a
	// create answers 503 while it is gone: it reports the scope's state).
	rev3 := createRev(t, a.Base, "app.a", map[string]any{"n": 3})
	if got := r.do("DEL", headKey(prefix, "app.a")); got != "1" {
		t.Fatalf("DEL %s = %s", headKey(prefix, "app.a"), got)
	}
	t.Logf("b=%s old=%s", b.URL, old.URL)
	defer func() {
		if t.Failed() {
			t.Logf("replica logs:\n%s", b.logs())
			t.Logf("--redis-read-only replica logs:\n%s", old.logs())
		}
	}()
	// The control plane learns of the deletion the same way the replicas
	// do (a revalidation or a notification), so each is waited for.
	for _, s := range []*server{a, b, old} {
		eventually(t, 5*time.Second, "the vanished head failing closed on "+s.URL, func() (bool, string) {
			ans := call(t, "GET", s.Base+"?key="+q("app.a"), nil)
			return ans.status == 503, fmt.Sprintf("%d %s", ans.status, ans.body)
		})
		expect(t, call(t, "GET", s.Base+"?key="+q("app.a"), nil), 503, "document-failed")
	}
	// The control plane: the vanished head is a failure, never "no head",
	// and generation 1 and 2 are never handed out again.
	expect(t, call(t, "GET", a.Base+"?key="+q("app.a"), nil), 503, "document-failed")
	for _, exp := range []int{0, 1} {
		expect(t, call(t, "POST", a.Base+"/admin/activate", map[string]any{"scope": "app.a", "revision": rev3, "expectedGeneration": exp}), 503, "document-failed")
	}
	activate(t, a.Base, "app.a", rev3, 2) // the documented recovery: expect the floor
	hist := expect(t, call(t, "GET", a.Base+"/admin/history?scope="+q("app.a"), nil), 200, "")
	seen := map[float64]bool{}
	for _, ev := range historyEntries(t, hist) {
		if ev["kind"] == "activated" {
			g, _ := ev["generation"].(float64)
			if seen[g] {
				t.Fatalf("generation %v activated twice: %v", g, hist)
			}
			seen[g] = true
		}
	}
	if !seen[3] {
		t.Fatalf("history has no generation 3 after the recovery: %v", hist)
	}
	eventually(t, 5*time.Second, "the replica serving the recovered head", func() (bool, string) {
		st, g, body := readGen(t, b.Base, "app.a")
		return st == 200 && g == 3, string(body)
	})

	text := string(call(t, "GET", b.URL+"/metrics", nil).body)
	for _, name := range []string{"varplane_instance_ready", "varplane_instance_documents", "varplane_instance_lag_max_seconds", "varplane_instance_lag_seconds_count", "varplane_instance_cold_loads_total"} {
		if _, ok := metricValue(text, name); !ok {
			t.Errorf("/metrics of the replica has no sample %s", name)
		}
	}
	if v, _ := metricValue(text, "varplane_instance_ready"); v != 1 {
		t.Errorf("varplane_instance_ready = %v, want 1", v)
	}
	if got := r.do("EXISTS", "e2erep:status:rep-b"); got != "1" {
		t.Fatalf("no status heartbeat of the replica in Redis (EXISTS = %s)", got)
	}
}
