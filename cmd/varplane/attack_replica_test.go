package main

// The read replica's cases of the attack suite (issue 34 items 5 and 6):
// documents passing through a replica with --max-cached N, and a
// tampered or oversized --cache-dir copy.

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bigDoc is a document of about 512 KiB (four strings: one string may hold
// at most 256 KiB), distinct per i.
func bigDoc(i int) map[string]any {
	doc := map[string]any{"i": i}
	for k := range 4 {
		doc[fmt.Sprintf("pad%d", k)] = strings.Repeat(string(rune('a'+(i+k)%26)), 128<<10)
	}
	return doc
}

// maxReplicaRSS bounds the replica's peak resident memory while 160
// documents of 512 KiB pass through it, with the collector's own pacing
// (--gc-headroom-bytes 0, so that what RSS shows is what the replica
// holds): an idle replica holds about 30 MiB, and --max-cached 5 holds six
// documents. Before the bound was one, the store's table held every
// document the writer announced (200 MiB).
const maxReplicaRSS = 80 << 20

// TestAttackReplicaBounded: a writer publishes 160 documents of 512 KiB
// while a `--read-only --root --max-cached 5` replica runs and reads some of
// them. The replica installs no scope it was not asked for, holds at most
// the root and 5 documents (in the cache and in the store's table alike),
// its peak RSS stays flat, /metrics and /readyz load nothing, and
// --revalidate-interval bounds how long a change without an invalidation
// goes unseen.
func TestAttackReplicaBounded(t *testing.T) {
	r := newPrivateRedis(t)
	const prefix = "atkrep"
	a := startServer(t, "--store", r.url(prefix))
	b := startServer(t, "--store", r.url(prefix), "--read-only", "--root", "plat.main", "--max-cached", "5",
		"--revalidate-interval", "100ms", "--instance-id", "rep-atk", "--gc-headroom-bytes", "0")
	defer func() {
		if t.Failed() {
			t.Logf("replica logs:\n%.4000s", b.logs())
		}
	}()
	activate(t, a.Base, "plat.main", createRev(t, a.Base, "plat.main", map[string]any{"n": 0}), 0)
	eventually(t, 5*time.Second, "the replica ready", func() (bool, string) {
		ans := call(t, "GET", b.URL+"/readyz", nil)
		return ans.status == 200, fmt.Sprintf("%d %s", ans.status, ans.body)
	})

	const docs = 160
	var warm int64
	for i := range docs {
		sc := fmt.Sprintf("app.d%d", i)
		activate(t, a.Base, sc, createRev(t, a.Base, sc, bigDoc(i)), 0)
		if i%4 == 0 { // a quarter of them are read on the replica
			eventually(t, 5*time.Second, "the replica serving "+sc, func() (bool, string) {
				st, g, body := readGen(t, b.Base, sc)
				return st == 200 && g == 1, fmt.Sprintf("%d %.200s", st, body)
			})
		}
		if i == 39 {
			warm = b.peakRSS(t)
		}
	}
	text := string(call(t, "GET", b.URL+"/metrics", nil).body)
	cached, _ := metricValue(text, "varplane_instance_documents")
	installed, _ := metricValue(text, "varplane_redis_installed_scopes")
	reads, _ := metricValue(text, "varplane_redis_invalidation_reads_total")
	// The store's table also holds the staged canary windows
	// (varplane-control.canary), which the heartbeat reads, and the
	// rollouts record (varplane-control.rollouts), which every instance
	// follows.
	if cached > 6 || installed > 8 {
		t.Errorf("the replica holds %v documents and its store %v scopes; the bound is 5, the root (and one absent scope)", cached, installed)
	}
	if reads > docs/4 {
		t.Errorf("the replica's store read %v invalidated heads; the writer announced %d scopes it was not asked for", reads, docs)
	}
	peak := b.peakRSS(t)
	t.Logf("replica peak RSS %d MiB after 40 documents, %d MiB after %d", warm>>20, peak>>20, docs)
	if peak > maxReplicaRSS || peak-warm > 32<<20 {
		t.Errorf("replica peak RSS %d MiB after 40 documents, %d MiB after %d: want flat and under %d MiB", warm>>20, peak>>20, docs, maxReplicaRSS>>20)
	}

	// /metrics and /readyz load nothing.
	loads := func() float64 {
		v, _ := metricValue(string(call(t, "GET", b.URL+"/metrics", nil).body), "varplane_instance_cold_loads_total")
		return v
	}
	before := loads()
	for range 5 {
		expect(t, call(t, "GET", b.URL+"/readyz", nil), 200, "")
	}
	if after := loads(); after != before {
		t.Errorf("/metrics and /readyz made %v cold loads", after-before)
	}

	// A change Redis announces to nobody (a lost invalidation) is seen
	// within the revalidation interval the flag names, not the default 10s.
	if got := r.do("DEL", headKey(prefix, "app.d156")); got != "1" {
		t.Fatalf("DEL = %s", got)
	}
	eventually(t, 3*time.Second, "the replica noticing the vanished head", func() (bool, string) {
		ans := call(t, "GET", b.Base+"?key="+q("app.d156"), nil)
		return ans.status == 503, fmt.Sprintf("%d %.200s", ans.status, ans.body)
	})
	// Nothing the writer stored changed but what the test did.
	if st, g, body := readGen(t, a.Base, "app.d0"); st != 200 || g != 1 {
		t.Fatalf("the writer's app.d0 = %d %.200s", st, body)
	}
}

// TestAttackReplicaCacheDir: a --cache-dir copy that was edited (same
// revision, another body) or grew to 300 MB is ignored with an ERROR; the
// replica serves what Redis holds, under its genuine ETag, and its memory
// stays bounded.
func TestAttackReplicaCacheDir(t *testing.T) {
	r := newPrivateRedis(t)
	const prefix = "atkdir"
	a := startServer(t, "--store", r.url(prefix))
	activate(t, a.Base, "plat.main", createRev(t, a.Base, "plat.main", map[string]any{"n": 0}), 0)
	rev := createRev(t, a.Base, "app.a", map[string]any{"secret": "genuine"})
	activate(t, a.Base, "app.a", rev, 0)
	activate(t, a.Base, "app.b", createRev(t, a.Base, "app.b", map[string]any{"n": 2}), 0)
	dir := t.TempDir()
	replica := func() *server {
		return startServer(t, "--store", r.url(prefix), "--read-only", "--root", "plat.main", "--cache-dir", dir, "--local-max-age", "10m")
	}
	b := replica()
	expect(t, call(t, "GET", b.Base+"?key="+q("app.a"), nil), 200, "")
	expect(t, call(t, "GET", b.Base+"?key="+q("app.b"), nil), 200, "")
	b.stop()

	file := func(scope string) string {
		return filepath.Join(dir, base64.RawURLEncoding.EncodeToString([]byte(scope))+".json")
	}
	body, err := os.ReadFile(file("app.a"))
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(body), "genuine", "tampered", 1)
	if edited == string(body) {
		t.Fatalf("the local copy does not hold the document: %s", body)
	}
	if err := os.WriteFile(file("app.a"), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file("app.b"), 300<<20); err != nil { // sparse
		t.Fatal(err)
	}

	c := replica()
	got := call(t, "GET", c.Base+"?key="+q("app.a"), nil)
	if got.status != 200 || strings.Contains(string(got.body), "tampered") || !strings.Contains(string(got.body), "genuine") {
		t.Fatalf("the replica served %d %s from an edited copy", got.status, got.body)
	}
	if etag := got.header.Get("ETag"); !strings.Contains(etag, rev) {
		t.Errorf("ETag %q, want the genuine revision %s", etag, rev)
	}
	expect(t, call(t, "GET", c.Base+"?key="+q("app.b"), nil), 200, "")
	logs := c.logs()
	for _, scope := range []string{"app.a", "app.b"} {
		if !strings.Contains(logs, "level=ERROR msg=\"instance: the local copy of scope "+scope+" is ignored") {
			t.Errorf("no ERROR for the local copy of %s:\n%.3000s", scope, logs)
		}
	}
	if rss := c.peakRSS(t); rss > maxAttackRSS/4 {
		t.Errorf("replica peak RSS %d MiB reading a 300 MB copy", rss>>20)
	} else {
		t.Logf("replica peak RSS %d MiB", rss>>20)
	}
	// Nothing stored changed.
	if st, g, body := readGen(t, a.Base, "app.a"); st != 200 || g != 1 || !strings.Contains(string(body), "genuine") {
		t.Fatalf("the writer's app.a = %d %s", st, body)
	}
}

// TestReplicaStreamFollowsUnheld: the live stream of a bounded replica
// misses no commit of the scopes it watches, though the cache holds none of
// them (the store follows what the streams watch, and keeps none of it).
func TestReplicaStreamFollowsUnheld(t *testing.T) {
	r := newPrivateRedis(t)
	const prefix = "atkstream"
	a := startServer(t, "--store", r.url(prefix))
	b := startServer(t, "--store", r.url(prefix), "--read-only", "--root", "plat.main", "--max-cached", "2")
	activate(t, a.Base, "plat.main", createRev(t, a.Base, "plat.main", map[string]any{"n": 0}), 0)
	eventually(t, 5*time.Second, "the replica ready", func() (bool, string) {
		ans := call(t, "GET", b.URL+"/readyz", nil)
		return ans.status == 200, fmt.Sprintf("%d %s", ans.status, ans.body)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events := openSSE(t, ctx, b.Base+"/watch?prefix=app")
	const n = 10
	for i := range n {
		sc := fmt.Sprintf("app.s%d", i)
		activate(t, a.Base, sc, createRev(t, a.Base, sc, map[string]any{"i": i}), 0)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended after %d of %d scopes", len(seen), n)
			}
			if ev.event == "head" {
				scope, _, _ := strings.Cut(ev.id, "@")
				seen[scope] = true
			}
		case <-ctx.Done():
			t.Fatalf("the stream delivered %d of %d scopes: %v", len(seen), n, seen)
		}
	}
	text := string(call(t, "GET", b.URL+"/metrics", nil).body)
	if v, _ := metricValue(text, "varplane_instance_documents"); v > 3 {
		t.Errorf("the replica holds %v documents; the bound is 2 and the root", v)
	}
}
