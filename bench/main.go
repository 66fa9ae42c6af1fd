// Command bench measures varplane side by side with etcd and with a plain
// net/http handler (the ceiling of what any Go HTTP server can do here), on
// loopback only, and writes docs/benchmarks.md and bench/results.json.
//
// Run it from the bench directory:
//
//	go run .            # the full run (about 13 minutes)
//	go run . -quick     # every scenario shortened (under 2 minutes)
//	go run . -only read,commit
//
// Everything it measures it starts itself on 127.0.0.1 with free ports (etcd
// single-node on a temporary data dir, the varplane server built from
// ../cmd/varplane, a net/http ceiling as a child process of this binary) and
// stops by PID when done. When etcd is missing it installs Debian's
// etcd-server with apt-get.
//
// Concurrency: scenarios run one after another; within one, the sides run
// one after another (alternating order per round), each with its own worker
// goroutines, so only one side loads the machine at a time.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config holds the knobs that -quick changes.
type config struct {
	quick           bool
	rounds          int
	warm            time.Duration
	readDur         time.Duration
	commitDur       time.Duration
	pushSubs        int
	pushConns       int
	pushCommits     int
	pushSpacing     time.Duration
	restartSizes    []int
	noRSS           bool // -restart-sizes: the restart scenario skips its rss comparison
	rssScopes       int
	rssRounds       int
	idleThreshold   float64
	idleSample      time.Duration // window over which idle is measured
	idleWait        time.Duration // longest wait for idle before one measurement
	idleScenario    time.Duration // longest wait for idle before a scenario
	docSize         int
	etcdReadClients int
	// profiles names the profile cases -profile runs (empty: all of them).
	profiles map[string]bool

	repo      string
	tmp       string
	etcdBin   string
	redisAddr string
	// postgresURL is the server the postgres scenario creates its
	// database on.
	postgresURL string
	install     bool
	keep        bool
}

var allScenarios = []string{"read", "commit", "contended", "push", "restart", "redis", "postgres", "sdk", "instance"}

func main() {
	os.Exit(run())
}

func run() int {
	if len(os.Args) > 1 && os.Args[1] == "ceiling" {
		return ceilingMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "durable-ceiling" {
		return durableCeilingMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "durable-floor-tcp" {
		return tcpFloorMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "varplane-tcp" {
		return tcpVarplaneMain(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "embedded" {
		return embeddedMain(os.Args[2:])
	}
	var (
		quick    = flag.Bool("quick", false, "shorten every scenario (fewer rounds, shorter runs) to finish in under 2 minutes")
		only     = flag.String("only", "", "comma-separated scenarios to run: "+strings.Join(allScenarios, ","))
		repo     = flag.String("repo", "..", "the varplane repository root (holds cmd/varplane)")
		md       = flag.String("md", "", "markdown report path (default REPO/docs/benchmarks.md)")
		jsonOut  = flag.String("json", "", "raw figures path (default REPO/bench/results.json)")
		noInst   = flag.Bool("no-install", false, "do not apt-get install etcd-server when etcd is missing")
		keep     = flag.Bool("keep", false, "keep the temporary directory (logs, data dirs)")
		redis    = flag.String("redis", envOr("VARPLANE_REDIS_URL", "redis://127.0.0.1:6379"), "Redis URL for the redis scenario")
		postgres = flag.String("postgres", envOr("VARPLANE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL URL for the postgres scenario (it creates a database of its own there, and drops it)")
		rounds   = flag.Int("rounds", 0, "rounds per scenario (default 3, or 3 with -quick)")
		etcdRC   = flag.Int("etcd-read-clients", 1, "clientv3 clients (gRPC connections) the 64 etcd readers share (1 read fastest in trials of 1, 8, 64)")
		profiles = flag.String("profiles", "", "with -profile: comma-separated profile cases to run (read-200, read-304, commit-1, commit-64, publish-1, publish-64, contended-64, push, restart, ...; default all)")
		profile  = flag.Bool("profile", false, "after the scenarios, profile the varplane hot paths (CPU and allocations) on the library embedded with net/http/pprof, and add the top functions to the report")
		deadline = flag.Duration("timeout", 0, "hard limit for the whole run; scenarios not started by then are reported as not run (default 15m, or 2m with -quick)")
	)
	sizes := flag.String("restart-sizes", "", "comma-separated log sizes (events) for the restart scenario instead of the default ones; when set, the restart scenario skips its rss comparison")
	render := flag.String("render", "", "do not measure: rewrite the markdown report from this results.json (after editing bench/notes.md)")
	flag.Parse()
	if *render != "" {
		return renderOnly(*render, *md, *repo)
	}

	cfg := &config{quick: *quick, repo: *repo, install: !*noInst, keep: *keep, redisAddr: *redis, postgresURL: *postgres, docSize: 1024, etcdReadClients: *etcdRC}
	if *profiles != "" {
		cfg.profiles = map[string]bool{}
		for _, n := range strings.Split(*profiles, ",") {
			cfg.profiles[strings.TrimSpace(n)] = true
		}
	}
	if *quick {
		cfg.rounds, cfg.warm, cfg.readDur, cfg.commitDur = 3, 150*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		cfg.pushSubs, cfg.pushConns, cfg.pushCommits, cfg.pushSpacing = 1000, 10, 30, 20*time.Millisecond
		cfg.restartSizes, cfg.rssScopes, cfg.rssRounds = []int{10_000, 100_000}, 100_000, 1
		cfg.idleThreshold, cfg.idleSample, cfg.idleWait, cfg.idleScenario = 0.80, 150*time.Millisecond, 300*time.Millisecond, 2*time.Second
	} else {
		cfg.rounds, cfg.warm, cfg.readDur, cfg.commitDur = 3, 300*time.Millisecond, 2*time.Second, 2*time.Second
		cfg.pushSubs, cfg.pushConns, cfg.pushCommits, cfg.pushSpacing = 1000, 10, 200, 20*time.Millisecond
		cfg.restartSizes, cfg.rssScopes, cfg.rssRounds = []int{10_000, 100_000, 1_000_000}, 100_000, 3
		cfg.idleThreshold, cfg.idleSample, cfg.idleWait, cfg.idleScenario = 0.85, time.Second, 2*time.Second, 10*time.Second
	}
	if *rounds > 0 {
		cfg.rounds = *rounds
	}
	if *sizes != "" {
		cfg.restartSizes, cfg.noRSS = nil, true
		for _, f := range strings.Split(*sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				fatalf("-restart-sizes: %q is not a log size", f)
			}
			cfg.restartSizes = append(cfg.restartSizes, n)
		}
	}
	limit := *deadline
	if limit == 0 {
		limit = map[bool]time.Duration{true: 2 * time.Minute, false: 15 * time.Minute}[*quick]
	}
	abs, err := filepath.Abs(cfg.repo)
	if err != nil {
		fatalf("repo: %v", err)
	}
	cfg.repo = abs
	if *md == "" {
		*md = filepath.Join(cfg.repo, "docs", "benchmarks.md")
	}
	if *jsonOut == "" {
		*jsonOut = filepath.Join(cfg.repo, "bench", "results.json")
	}
	want := map[string]bool{}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			s = strings.TrimSpace(s)
			if !contains(allScenarios, s) {
				fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (have %s)\n", s, strings.Join(allScenarios, ","))
				return 2
			}
			want[s] = true
		}
	} else {
		for _, s := range allScenarios {
			want[s] = true
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	ctx, stopSig := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSig()
	defer stopAll()

	cfg.tmp, err = os.MkdirTemp("", "varplane-bench-")
	if err != nil {
		fatalf("temp dir: %v", err)
	}
	if !cfg.keep {
		defer os.RemoveAll(cfg.tmp)
	} else {
		logf("keeping %s", cfg.tmp)
	}

	cfg.etcdBin, err = findEtcd(cfg.install)
	if err != nil {
		logf("etcd unavailable: %v", err)
	}

	started := time.Now()
	rep := &Report{Command: commandLine(), Machine: machineInfo(cfg), Started: started.UTC(), Quick: cfg.quick}
	en := newEnv(cfg)
	defer en.close()

	type scenario struct {
		name string
		run  func(context.Context, *config, *env, *Report)
	}
	for _, sc := range []scenario{
		{"read", scenarioRead},
		{"commit", scenarioCommit},
		{"contended", scenarioContended},
		{"push", scenarioPush},
		{"restart", scenarioRestart},
		{"redis", scenarioRedis},
		{"postgres", scenarioPostgres},
		{"sdk", scenarioSDK},
		{"instance", scenarioInstance},
	} {
		if !want[sc.name] {
			continue
		}
		if ctx.Err() != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("scenario %s not run: %v", sc.name, ctx.Err()))
			continue
		}
		logf("--- scenario %s", sc.name)
		t0 := time.Now()
		idle := waitIdle(ctx, cfg.idleThreshold, cfg.idleSample, cfg.idleScenario)
		logf("machine idle %.0f%% before %s", idle*100, sc.name)
		sc.run(ctx, cfg, en, rep)
		logf("--- scenario %s took %.1fs", sc.name, time.Since(t0).Seconds())
	}
	if *profile && ctx.Err() == nil {
		logf("--- profiles")
		runProfiles(ctx, cfg, rep, filepath.Join(cfg.tmp, "profiles"))
	}
	stopAll()

	groups := map[string]*Group{}
	for _, g := range rep.Groups {
		groups[g.ID] = g
	}
	rep.Targets = targets(cfg)
	for _, t := range rep.Targets {
		t.eval(groups)
	}
	rep.Seconds = time.Since(started).Seconds()
	printTable(os.Stdout, rep)
	notes, _ := os.ReadFile(filepath.Join(cfg.repo, "bench", "notes.md"))
	if err := writeMarkdown(*md, rep, string(notes)); err != nil {
		logf("%v", err)
		return 1
	}
	if err := writeJSON(*jsonOut, rep); err != nil {
		logf("%v", err)
		return 1
	}
	logf("wrote %s and %s in %.0fs", *md, *jsonOut, rep.Seconds)
	return 0
}

// targets are the pass/miss checks.
func targets(cfg *config) []*Target {
	largest := cfg.restartSizes[len(cfg.restartSizes)-1]
	return []*Target{
		{Name: "cached read ≥ 0.85× net/http ceiling", Group: "read.200", Side: "varplane", Peer: "ceiling", Metric: "throughput", Op: ">=", Want: 0.85},
		{Name: "304 ≥ 0.85× ceiling's 304", Group: "read.304", Side: "varplane", Peer: "ceiling", Metric: "throughput", Op: ">=", Want: 0.85},
		{Name: "publish ≥ 0.8× raw fdatasync (1 writer)", Group: "commit.1", Side: "varplane-publish", Peer: "raw-fdatasync", Metric: "throughput", Op: ">=", Want: 0.8},
		// Issue 33's budgets: the lone publish against the same run's plain
		// net/http + fdatasync floor, and the server's CPU per publish with
		// hashing (the audit chain) included.
		{Name: "publish ≥ 0.9× net/http + fdatasync floor (1 writer)", Group: "commit.1", Side: "varplane-publish", Peer: "http-fdatasync", Metric: "throughput", Op: ">=", Want: 0.9},
		{Name: "server CPU per publish ≤ 100 µs (64 writers)", Group: "commit.64", Side: "varplane-publish", Metric: "server_cpu_us_per_op", Op: "<=", Want: 100},
		{Name: "publish ≥ 2× etcd CAS (1 writer)", Group: "commit.1", Side: "varplane-publish", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 2},
		{Name: "publish ≥ 2× etcd CAS (64 writers)", Group: "commit.64", Side: "varplane-publish", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 2},
		// Issue 18's target compares one replica with etcd and the file
		// store, neither of which has a follower; the two rows after it are
		// stricter ones of our own (bench/notes.md).
		{Name: "PostgreSQL durable publish ≥ 1× etcd CAS (64 writers; one replica, as etcd and the file store)", Group: "postgres.commit.64", Side: "varplane-postgres-publish-1", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 1},
		{Name: "PostgreSQL durable publish ≥ 1× etcd CAS (64 writers; replica B following)", Group: "postgres.commit.64", Side: "varplane-postgres-publish", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 1},
		{Name: "PostgreSQL create + activate (two requests) ≥ 1× etcd CAS (64 writers)", Group: "postgres.commit.64", Side: "varplane-postgres", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 1},
		{Name: "contended successes ≥ 2× etcd's", Group: "contended", Side: "varplane", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 2},
		{Name: "contended publish successes ≥ 2× etcd's", Group: "contended", Side: "varplane-publish", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 2},
		{Name: "Redis store publish ≥ etcd CAS (64 writers; acknowledged per appendfsync)", Group: "redis.commit.64", Side: "varplane-redis-publish", Peer: "etcd-cas", Metric: "throughput", Op: ">=", Want: 1},
		{Name: "push p99 gRPC (1,000 on 10 conns) ≤ ½ etcd watch p99", Group: "push", Side: "varplane-grpc", Peer: "etcd-watch", Metric: "p99", Op: "<=", Want: 0.5},
		{Name: "push p99 gRPC Watch, shared responses (1,000 watches on 10 conns) ≤ ½ etcd watch p99", Group: "push", Side: "varplane-watch-shared", Peer: "etcd-watch", Metric: "p99", Op: "<=", Want: 0.5},
		{Name: "push p99 SSE (1,000 conns) ≤ etcd watch p99", Group: "push", Side: "varplane-sse", Peer: "etcd-watch", Metric: "p99", Op: "<=", Want: 1},
		// The latency columns of a restart side are the time to its first
		// read, measured once per round (p99 is that time).
		{Name: fmt.Sprintf("first read ≤ 1 s after a restart (log of %d events, every revision kept)", largest), Group: fmt.Sprintf("restart.checkpoint.keep-all.%d", largest), Side: "varplane-serve", Metric: "p99", Op: "<=", Want: 1000},
	}
}

func commandLine() string { return commandOf(os.Args[1:]) }

// commandOf is the command that reproduces a run with args: the flags that
// only say where the files are (-json, -md, -repo) are left out, so that
// the report names no path of the machine it ran on.
func commandOf(args []string) string {
	out := []string{"cd bench && go run ."}
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if strings.HasPrefix(args[i], "-") && (name == "json" || name == "md" || name == "repo") {
			if !hasValue {
				i++ // the value is the next argument
			}
			continue
		}
		out = append(out, args[i])
	}
	return strings.Join(out, " ")
}

func machineInfo(cfg *config) map[string]string {
	m := map[string]string{
		"cores":  fmt.Sprint(runtime.NumCPU()),
		"go":     runtime.Version(),
		"date":   time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		"kernel": strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		"etcd":   "etcd not available",
	}
	for _, line := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			m["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			break
		}
	}
	for _, line := range strings.Split(readFile("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			m["memory"] = fmt.Sprintf("%.1f GiB", kb/1024/1024)
		}
	}
	if cfg.etcdBin != "" {
		if out := cmdOutput(cfg.etcdBin, "--version"); out != "" {
			first, _, _ := strings.Cut(out, "\n")
			m["etcd"] = first
		}
	}
	return m
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func fatalf(format string, args ...any) {
	logf(format, args...)
	stopAll()
	os.Exit(1)
}

// renderOnly rewrites the markdown report from a results.json.
func renderOnly(jsonPath, md, repo string) int {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		logf("%v", err)
		return 1
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		logf("%s: %v", jsonPath, err)
		return 1
	}
	for _, g := range rep.Groups {
		g.summarize()
	}
	if md == "" {
		md = filepath.Join(repo, "docs", "benchmarks.md")
	}
	notes, _ := os.ReadFile(filepath.Join(repo, "bench", "notes.md"))
	if err := writeMarkdown(md, &rep, string(notes)); err != nil {
		logf("%v", err)
		return 1
	}
	printTable(os.Stdout, &rep)
	return 0
}
