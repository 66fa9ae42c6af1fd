package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SDKBench is one line of go test -bench output.
type SDKBench struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"nsPerOp"`
	BytesPerOp  float64 `json:"bytesPerOp"`
	AllocsPerOp float64 `json:"allocsPerOp"`
	Iterations  int64   `json:"iterations"`
}

// sdkPattern selects the SDK's hot-read benchmarks: BenchmarkRead* as the
// issue names them, and the client package's Get/Value read benchmarks.
const sdkPattern = "^Benchmark(Read|Get|Value)"

func scenarioSDK(ctx context.Context, cfg *config, e *env, rep *Report) {
	benchtime := map[bool]string{true: "200ms", false: "1s"}[cfg.quick]
	args := []string{"test", "-run", "^$", "-bench", sdkPattern, "-benchmem", "-benchtime", benchtime, "-count", "1", "./client/"}
	rep.Notes = append(rep.Notes, "sdk: go "+strings.Join(args, " "))
	if _, err := exec.LookPath("go"); err != nil {
		rep.Notes = append(rep.Notes, "sdk: go not on PATH")
		return
	}
	c, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, "go", args...)
	cmd.Dir = cfg.repo
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	logf("sdk benchmarks ran in %.1fs", time.Since(t0).Seconds())
	if err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("sdk: go test failed: %v: %s", err, lastLines(string(out), 5)))
		return
	}
	rep.SDK = parseBench(string(out))
	if len(rep.SDK) == 0 {
		rep.Notes = append(rep.Notes, "sdk: no benchmark matched "+sdkPattern+" in "+filepath.Join("client"))
	}
}

// parseBench reads "BenchmarkX-2  N  123 ns/op  45 B/op  6 allocs/op" lines.
func parseBench(out string) []SDKBench {
	var res []SDKBench
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		b := SDKBench{Name: f[0]}
		b.Iterations, _ = strconv.ParseInt(f[1], 10, 64)
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				b.NsPerOp = v
			case "B/op":
				b.BytesPerOp = v
			case "allocs/op":
				b.AllocsPerOp = v
			}
		}
		if b.NsPerOp > 0 {
			res = append(res, b)
		}
	}
	return res
}
