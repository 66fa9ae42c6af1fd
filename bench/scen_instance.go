package main

import (
	"bufio"
	"context"
	"fmt"
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
