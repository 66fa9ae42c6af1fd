package main

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// scenarioInstance runs the instance benchmarks (package instance and the
// Redis store's revalidation pass) with go test and reports each as a side
// of the "instance" group: ops/s from ns/op, and every metric the benchmark
// reports under "other" (allocs/op, ns/doc, redis-µs/doc, heap-MiB,
// rss-MiB, installed). The replica's memory run writes its scopes to the
// Redis at VARPLANE_REDIS_URL (the shared one by default) under a prefix of
// its own and deletes them afterwards.
func scenarioInstance(ctx context.Context, cfg *config, e *env, rep *Report) {
	g := newGroup("instance", "instance", "the data-plane cache (package instance): an installed read, one revalidation pass over 10,000 documents, a read replica's memory under --max-cached 10000", "ops/s")
	rep.Groups = append(rep.Groups, g)
	scopes := map[bool]int{true: 20_000, false: 50_000}[cfg.quick]
	benchtime := map[bool]string{true: "300ms", false: "1s"}[cfg.quick]
	runs := []struct {
		pkg, pattern, benchtime string
		env                     []string
	}{
		{"./instance/", "^Benchmark(ReadSerial|Read|RevalidationPass)$", benchtime, nil},
		{"./store/redis/", "^BenchmarkRevalidationPass10k$", "3x", nil},
		{"./instance/", "^BenchmarkReplicaBoundedMemory$", "1x", []string{"VARPLANE_BENCH_SCOPES=" + strconv.Itoa(scopes), "VARPLANE_REDIS_URL=" + cfg.redisAddr}},
	}
	for _, r := range runs {
		args := []string{"test", "-run", "^$", "-bench", r.pattern, "-benchmem", "-benchtime", r.benchtime, "-count", "1", r.pkg}
		rep.Notes = append(rep.Notes, "instance: "+strings.Join(r.env, " ")+" go "+strings.Join(args, " "))
		c, cancel := context.WithTimeout(ctx, 4*time.Minute)
		cmd := exec.CommandContext(c, "go", args...)
		cmd.Dir = cfg.repo
		cmd.Env = append(os.Environ(), r.env...)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		logf("instance benchmarks %s %s ran in %.1fs", r.pkg, r.pattern, time.Since(t0).Seconds())
		if err != nil {
			g.skip(r.pattern, fmt.Sprintf("go test failed: %v: %s", err, lastLines(string(out), 3)))
			continue
		}
		for _, b := range parseBenchMetrics(string(out)) {
			st := Stats{Ops: int(b.iterations), Extra: b.metrics}
			if ns := b.metrics["ns/op"]; ns > 0 {
				st.Throughput = 1e9 / ns
			}
			g.add(b.name, st)
		}
	}
	g.summarize()
	replicaReads(ctx, cfg, e, rep)
	if scopes < 1_000_000 {
		g.Notes = append(g.Notes, fmt.Sprintf("the replica's memory run uses %d scopes in Redis, not 10^6: writing 10^6 documents and cold-loading each takes far longer than a couple of minutes on this machine; the bound does not depend on the number of scopes, only on --max-cached", scopes))
	}
}

// benchLine is one go test -bench result with every metric it reports.
type benchLine struct {
	name       string
	iterations int64
	metrics    map[string]float64
}

// parseBenchMetrics reads "BenchmarkX-2  N  v1 unit1  v2 unit2 …" lines.
func parseBenchMetrics(out string) []benchLine {
	var res []benchLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		b := benchLine{name: f[0], metrics: map[string]float64{}}
		b.iterations, _ = strconv.ParseInt(f[1], 10, 64)
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				b.metrics[f[i+1]] = v
			}
		}
		if len(b.metrics) > 0 {
			res = append(res, b)
		}
	}
	return res
}

// replicaReads measures a read replica's cached reads against the net/http
// ceiling (issue: "serves cached reads at >= 0.85x the ceiling"): a writer
// and a replica (`serve --read-only --root`) share a Redis prefix of their
// own; the 1 KiB document is read from the replica's cache on readConns
// keep-alive connections, and the ceiling serves the exact bytes and ETag
// the replica answered. The prefix's keys are deleted afterwards.
func replicaReads(ctx context.Context, cfg *config, e *env, rep *Report) {
	g := newGroup("instance.replica-read", "instance", fmt.Sprintf("a read replica's cached read (serve --read-only --root over Redis), %d keep-alive connections, 1 KiB document, 200 with body", readConns), "req/s", "ceiling")
	rep.Groups = append(rep.Groups, g)
	fail := func(why string) { g.skip("replica", why); g.skip("ceiling", why) }
	u, err := url.Parse(cfg.redisAddr)
	if err != nil || u.Host == "" {
		fail(fmt.Sprintf("bad Redis URL %q", cfg.redisAddr))
		return
	}
	rc, err := dialRESP(u.Host)
	if err != nil {
		fail(fmt.Sprintf("Redis at %s unreachable: %v", u.Host, err))
		return
	}
	defer rc.close()
	prefix := fmt.Sprintf("varplane-bench-replica-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	defer func() {
		n, err := rc.deletePrefix(prefix)
		rep.Notes = append(rep.Notes, fmt.Sprintf("instance.replica-read: used the key prefix %s and deleted its %d keys afterwards (%v)", prefix, n, err))
	}()
	q := u.Query()
	q.Set("prefix", prefix)
	u.RawQuery = q.Encode()
	if u.Path == "" {
		u.Path = "/0"
	}
	w, err := e.startVarplane(ctx, "replica-writer", u.String())
	if err != nil {
		fail(err.Error())
		return
	}
	a := newAdmin(w.base)
	_, err = a.commit(ctx, "bench.root", []byte(`{}`), 0)
	if err == nil {
		_, err = a.commit(ctx, "bench.read", makeDoc(cfg.docSize, "replica", 0), 0)
	}
	a.close()
	w.stop()
	if err != nil {
		fail(err.Error())
		return
	}
	r, err := e.startVarplane(ctx, "replica", u.String(), "--read-only", "--root", "bench.root", "--prewarm", "bench.read", "--control=false")
	if err != nil {
		fail(err.Error())
		return
	}
	defer r.stop()
	body, etag, ctype, err := fetchOnce(ctx, r.base+"?key=bench.read")
	if err != nil {
		fail(err.Error())
		return
	}
	cp, caddr, err := startCeiling(ctx, cfg, body, etag, ctype)
	if err != nil {
		g.skip("ceiling", err.Error())
	} else {
		defer cp.stop()
	}
	ru, _ := url.Parse(r.base)
	sides := []side{rawReadSide(cfg, "replica", r.p.pid(), r.addr, getRequest(r.addr, ru.Path+"?key=bench.read", ""), 200, len(body))}
	if cp != nil {
		sides = append(sides, rawReadSide(cfg, "ceiling", cp.pid(), caddr, getRequest(caddr, "/vars?key=bench.read", ""), 200, len(body)))
	}
	g.Notes = append(g.Notes, fmt.Sprintf("replica: varplane serve --store redis://…?prefix=<unique> --read-only --root bench.root, response %d bytes; the document is served from the instance cache", len(body)),
		"ceiling: a plain net/http handler in its own process answering the exact bytes, Content-Type and ETag the replica answered")
	runRounds(ctx, cfg, g, cfg.rounds, sides)
}
