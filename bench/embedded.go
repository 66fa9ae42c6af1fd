package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // the embedded server's profiling endpoint
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	"github.com/varplane/varplane/store/file"
)

// embeddedMain is the child process "bench embedded ADDR PPROF-ADDR RPC-ADDR LOG":
// the varplane library embedded in a plain Go program (file store, engine,
// push hub, httpapi handler with the SSE watch route, as cmd/varplane wires
// them), the rpc PushService (gRPC over h2c) on a second port, fed by the
// same hub, and net/http/pprof on a third. The harness profiles
// the hot paths through it under the same load as the real server.
func embeddedMain(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: bench embedded ADDR PPROF-ADDR RPC-ADDR LOG")
		return 2
	}
	addr, pprofAddr, rpcAddr, logPath := args[0], args[1], args[2], args[3]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	engine, log, closeEngine, err := openEngine(ctx, logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeEngine()
	hub := push.New(engine, push.Options{Logger: log})
	defer hub.Close()
	api := httpapi.NewHandler(engine, httpapi.Options{Base: "/vars", Logger: log, Authorizer: varplane.AllowAll, Hub: hub})
	defer api.Close()
	srv := httpapi.NewServer(addr, api)
	srv.RegisterOnShutdown(hub.Close)
	if err := srv.Open(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rpcMux := http.NewServeMux()
	rpath, rh := rpc.NewHandler(hub, nil)
	rpcMux.Handle(rpath, rh)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	rs := &http.Server{Addr: rpcAddr, Handler: rpcMux, Protocols: &protos, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := rs.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	defer rs.Close()
	go func() {
		ps := &http.Server{Addr: pprofAddr, Handler: http.DefaultServeMux, ReadHeaderTimeout: 5 * time.Second}
		if err := ps.ListenAndServe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	<-ctx.Done()
	shut, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	srv.Close(shut)
	return 0
}

// openEngine opens the file store at logPath and an engine over it, as
// cmd/varplane wires them, with a logger of warnings on stderr; closeEngine
// closes the engine, then the store.
func openEngine(ctx context.Context, logPath string) (engine *varplane.Engine, log *slog.Logger, closeEngine func(), err error) {
	log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := file.Open(ctx, logPath, file.Options{Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	engine = varplane.NewEngine(store, varplane.Options{Logger: log})
	return engine, log, func() { engine.Close(); store.Close() }, nil
}

// startEmbedded runs the embedded child on free ports over a fresh log.
func startEmbedded(ctx context.Context, cfg *config, name string) (*vpServer, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	s := &vpServer{addr: fmt.Sprintf("127.0.0.1:%d", mustFreePort()), log: filepath.Join(cfg.tmp, "embedded-"+name+".log")}
	s.base = "http://" + s.addr + "/vars"
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", mustFreePort())
	s.rpcAddr = fmt.Sprintf("127.0.0.1:%d", mustFreePort())
	s.p, err = startProc("embedded-"+name, s.log, self, "embedded", s.addr, pprofAddr, s.rpcAddr, filepath.Join(cfg.tmp, "embedded-"+name+".jsonl"))
	if err != nil {
		return nil, "", err
	}
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		s.p.stop()
		return nil, "", err
	}
	for _, a := range []string{pprofAddr, s.rpcAddr} {
		if err := waitTCP(ctx, s.p, a, 10*time.Second); err != nil {
			s.p.stop()
			return nil, "", err
		}
	}
	return s, pprofAddr, nil
}

// profileCase is one hot path to profile: setup prepares the server and
// returns the load to drive.
type profileCase struct {
	name  string
	setup func(ctx context.Context, cfg *config, vp *vpServer) (side, error)
}

// runProfiles drives each case against the embedded server while taking a
// CPU profile, then an allocation profile, and keeps `go tool pprof -top`
// of both in the report.
func runProfiles(ctx context.Context, cfg *config, rep *Report, dir string) {
	pc := *cfg
	pc.warm, pc.readDur, pc.commitDur = 300*time.Millisecond, 4*time.Second, 4*time.Second
	pc.pushCommits = 150
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("profiles: %v", err)
		return
	}
	for _, c := range profileCases() {
		if ctx.Err() != nil {
			return
		}
		if cfg.profiles != nil && !cfg.profiles[c.name] {
			continue
		}
		vp, pprofAddr, err := startEmbedded(ctx, &pc, c.name)
		if err != nil {
			rep.Profiles = append(rep.Profiles, fmt.Sprintf("### %s\n\nnot profiled: %v", c.name, err))
			continue
		}
		s, err := c.setup(ctx, &pc, vp)
		if err != nil {
			vp.stop()
			rep.Profiles = append(rep.Profiles, fmt.Sprintf("### %s\n\nnot profiled: %v", c.name, err))
			continue
		}
		cpuPath := filepath.Join(dir, c.name+".cpu.prof")
		done := make(chan error, 1)
		go func() {
			time.Sleep(500 * time.Millisecond)
			done <- fetchTo(ctx, "http://"+pprofAddr+"/debug/pprof/profile?seconds=3", cpuPath)
		}()
		st, runErr := s.run(ctx)
		perr := <-done
		allocPath := filepath.Join(dir, c.name+".allocs.prof")
		aerr := fetchTo(ctx, "http://"+pprofAddr+"/debug/pprof/allocs", allocPath)
		vp.stop()
		var b strings.Builder
		fmt.Fprintf(&b, "### %s\n\nload during the profile: %s/s=%s p50=%s ms p99=%s ms (embedded server)\n", c.name, "ops", fnum(st.Throughput), fnum(st.P50), fnum(st.P99))
		if runErr != nil {
			fmt.Fprintf(&b, "\nload error: %v\n", runErr)
		}
		for _, p := range []struct {
			kind, path string
			err        error
			args       []string
		}{
			{"CPU", cpuPath, perr, []string{"-top", "-nodecount=18"}},
			{"CPU (cumulative)", cpuPath, perr, []string{"-top", "-cum", "-nodecount=14"}},
			{"CPU under varplane's own functions (cumulative)", cpuPath, perr, []string{"-top", "-cum", "-focus=varplane/varplane", "-nodecount=14"}},
			{"allocations (alloc_space)", allocPath, aerr, []string{"-top", "-sample_index=alloc_space", "-nodecount=12"}},
		} {
			if p.err != nil {
				fmt.Fprintf(&b, "\n%s profile failed: %v\n", p.kind, p.err)
				continue
			}
			out, err := exec.Command("go", append(append([]string{"tool", "pprof"}, p.args...), p.path)...).CombinedOutput()
			if err != nil {
				fmt.Fprintf(&b, "\n%s: go tool pprof failed: %v\n", p.kind, err)
				continue
			}
			fmt.Fprintf(&b, "\n%s:\n\n```\n%s\n```\n", p.kind, trimPprof(string(out)))
		}
		rep.Profiles = append(rep.Profiles, b.String())
		logf("profiled %s", c.name)
	}
	if ctx.Err() == nil && (cfg.profiles == nil || cfg.profiles["restart"]) {
		rep.Profiles = append(rep.Profiles, profileRestart(ctx, cfg, dir))
	}
}

// profileRestart profiles the file store's replay through its own package
// benchmark (a 1,000,000-event log), keeping only the replay's samples.
func profileRestart(ctx context.Context, cfg *config, dir string) string {
	prof := filepath.Join(dir, "restart.cpu.prof")
	args := []string{"test", "-run", "^$", "-bench", "^BenchmarkRestart$", "-benchtime", "2x", "-cpuprofile", prof, "-o", filepath.Join(dir, "file.test"), "./store/file/"}
	var b strings.Builder
	shown := strings.ReplaceAll(strings.Join(args, " "), dir, "$TMP/profiles")
	fmt.Fprintf(&b, "### restart (file store replay)\n\n`go %s` (in the repository root), samples under the replay (`replay`, `decodeLog`) only:\n", shown)
	c, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, "go", args...)
	cmd.Dir = cfg.repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		fmt.Fprintf(&b, "\nfailed: %v: %s\n", err, lastLines(string(out), 5))
		return b.String()
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "BenchmarkRestart") {
			fmt.Fprintf(&b, "\n```\n%s\n```\n", strings.Join(strings.Fields(l), " "))
		}
	}
	for _, v := range [][]string{{"-top", "-focus=replay|decodeLog", "-nodecount=18"}, {"-top", "-cum", "-focus=replay|decodeLog", "-nodecount=14"}} {
		po, err := exec.Command("go", append(append([]string{"tool", "pprof"}, v...), prof)...).CombinedOutput()
		if err != nil {
			fmt.Fprintf(&b, "\ngo tool pprof failed: %v\n", err)
			continue
		}
		fmt.Fprintf(&b, "\n```\n%s\n```\n", trimPprof(string(po)))
	}
	logf("profiled restart")
	return b.String()
}

// trimPprof drops pprof's header lines that name local files.
func trimPprof(s string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

func fetchTo(ctx context.Context, u, path string) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func profileCases() []profileCase {
	readSetup := func(inm bool) func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
		return func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			a := newAdmin(vp.base)
			defer a.close()
			if _, err := a.commit(ctx, "bench.read", makeDoc(cfg.docSize, "read", 0), 0); err != nil {
				return side{}, err
			}
			body, etag, _, err := fetchOnce(ctx, vp.base+"?key=bench.read")
			if err != nil {
				return side{}, err
			}
			if inm {
				return rawReadSide(cfg, "read-304", vp.p.pid(), vp.addr, getRequest(vp.addr, "/vars?key=bench.read", etag), 304, 0), nil
			}
			return rawReadSide(cfg, "read-200", vp.p.pid(), vp.addr, getRequest(vp.addr, "/vars?key=bench.read", ""), 200, len(body)), nil
		}
	}
	return []profileCase{
		{"read-200", readSetup(false)},
		{"read-304", readSetup(true)},
		{"commit-1", func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			return vpCommitSide(cfg, "commit-1", vp, 1, "bench.p1"), nil
		}},
		{"commit-64", func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			return vpCommitSide(cfg, "commit-64", vp, 64, "bench.p64"), nil
		}},
		{"publish-1", func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			return vpPublishSide(cfg, "publish-1", vp, 1, "bench.pp1"), nil
		}},
		{"publish-64", func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			return vpPublishSide(cfg, "publish-64", vp, 64, "bench.pp64"), nil
		}},
		{"contended-64", func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			return vpContendedSide(ctx, cfg, vp)
		}},
		{"push-sse-1000", func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			return vpPushSSESide(ctx, cfg, vp, "bench.push")
		}},
		{"push-grpc-1000", func(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
			return vpPushGRPCSide(ctx, cfg, vp, "bench.push")
		}},
	}
}
