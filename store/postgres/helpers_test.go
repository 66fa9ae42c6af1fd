package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/varplane/varplane"
)

// testDB is the database this package's tests use on the shared server:
// created by TestMain, dropped when the tests end. Empty when the server
// does not answer (skipErr says why).
var (
	testDB  string
	skipErr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	admin := adminURL()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	conn, err := pgx.Connect(ctx, admin)
	cancel()
	if err != nil {
		skipErr = err
		return m.Run()
	}
	name := "varplane_test_" + randHex(6)
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	cancel()
	if err != nil {
		skipErr = fmt.Errorf("create database %s: %w", name, err)
		_ = conn.Close(context.Background())
		return m.Run()
	}
	testDB = name
	code := m.Run()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
		fmt.Fprintf(os.Stderr, "drop database %s: %v\n", name, err)
	}
	_ = conn.Close(ctx)
	return code
}

// adminURL is the shared server's URL (VARPLANE_POSTGRES_URL, by default
// the local server as the postgres user).
func adminURL() string {
	if u := os.Getenv("VARPLANE_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sharedURL returns the URL of this package's test database, skipping the
// test when the shared server does not answer (failing instead under
// VARPLANE_REQUIRE_SERVICES).
func sharedURL(tb testing.TB) string {
	tb.Helper()
	if testDB == "" {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			tb.Fatalf("postgres at VARPLANE_POSTGRES_URL is required and unusable: %v", skipErr)
		}
		tb.Skipf("postgres not reachable (set VARPLANE_POSTGRES_URL; VARPLANE_REQUIRE_SERVICES makes this fail): %v", skipErr)
	}
	return withDatabase(tb, adminURL(), testDB)
}

// withDatabase returns u naming database db.
func withDatabase(tb testing.TB, u, db string) string {
	tb.Helper()
	p, err := url.Parse(u)
	if err != nil {
		tb.Fatal(err)
	}
	p.Path = "/" + db
	return p.String()
}

// withParam returns u with query parameter k set to v.
func withParam(tb testing.TB, u, k, v string) string {
	tb.Helper()
	p, err := url.Parse(u)
	if err != nil {
		tb.Fatal(err)
	}
	q := p.Query()
	q.Set(k, v)
	p.RawQuery = q.Encode()
	return p.String()
}

// freshSchema returns u with a schema of its own, unique to the test.
func freshSchema(tb testing.TB, u string) string {
	tb.Helper()
	return withParam(tb, u, "schema", "t_"+randHex(6))
}

// rawConn returns a plain connection on u for tests that poke at the
// database, closed at cleanup.
func rawConn(tb testing.TB, u string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, opts, schema, _, err := parseURL(u, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	_ = opts
	cc := cfg.ConnConfig.Copy()
	cc.RuntimeParams["search_path"] = schema
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// openStore opens a Store on u and closes it at cleanup.
func openStore(tb testing.TB, u string, opts Options) *Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The outage tests use a short command timeout, which is also the
	// connect timeout: on a loaded machine a fresh cluster may take longer
	// than that to take its first connections, so Open is tried again while
	// the database is merely unavailable.
	for attempt := 0; ; attempt++ {
		s, err := Open(ctx, u, opts)
		if err == nil {
			tb.Cleanup(func() { _ = s.Close() })
			return s
		}
		if varplane.ErrorCode(err) != varplane.CodeStoreUnavailable || attempt == 9 || ctx.Err() != nil {
			tb.Fatalf("Open: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// privatePG is a PostgreSQL cluster of the test's own, initialised in a
// temporary directory and run as the postgres user (PostgreSQL refuses to
// run as root) on a free port. The test stops, pauses and restarts it by
// the PIDs it started; the shared server is never touched.
type privatePG struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// pgBinDir finds the server binaries, skipping (or failing under
// VARPLANE_REQUIRE_SERVICES) when there are none.
func pgBinDir(tb testing.TB) string {
	tb.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			matches = []string{p}
		}
	}
	if len(matches) == 0 {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			tb.Fatal("the PostgreSQL server binaries (initdb, postgres) are required and not installed")
		}
		tb.Skip("the PostgreSQL server binaries (initdb, postgres) are not installed: install Debian's postgresql to run the failure tests")
	}
	return filepath.Dir(matches[len(matches)-1])
}

// asPostgres runs the command as the postgres user when this process is
// root, as itself otherwise.
func asPostgres(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("setpriv", append([]string{"--reuid=postgres", "--regid=postgres", "--init-groups", name}, args...)...)
	}
	return exec.Command(name, args...)
}

var initdbOnce sync.Mutex

// startPrivatePG initialises and starts a private cluster.
func startPrivatePG(tb testing.TB) *privatePG {
	tb.Helper()
	bin := pgBinDir(tb)
	dir, err := os.MkdirTemp("", "varplane-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Skipf("running as root without a postgres user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdbOnce.Lock()
	out, err := asPostgres(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8").CombinedOutput()
	initdbOnce.Unlock()
	if err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	p := &privatePG{tb: tb, bin: bin, dir: dir, port: port}
	p.start()
	tb.Cleanup(p.stop)
	return p
}

// start runs the postmaster in the foreground of a child process.
func (p *privatePG) start() {
	p.tb.Helper()
	p.cmd = asPostgres(filepath.Join(p.bin, "postgres"), "-D", filepath.Join(p.dir, "data"), "-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+p.dir, "-c", "fsync=on",
		"-c", "synchronous_commit=on", "-c", "max_connections=50")
	logf, err := os.OpenFile(filepath.Join(p.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.tb.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.tb.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); _ = logf.Close(); close(p.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		c, err := pgx.Connect(ctx, p.url())
		if err == nil {
			_ = c.Close(ctx)
			cancel()
			return
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
	p.tb.Fatalf("private postgres on port %d did not start:\n%s", p.port, log)
}

// pids returns the postmaster's PID and those of its children (the
// backends and auxiliary processes): all of them were started by this test.
func (p *privatePG) pids() []int {
	root := p.cmd.Process.Pid
	// Under setpriv the postmaster is the process setpriv exec'd, so the
	// root PID is the postmaster itself.
	out := []int{root}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// stat is "pid (comm) state ppid ..."; comm may hold spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == root {
				out = append(out, pid)
			}
		}
	}
	return out
}

// signal sends sig to the whole cluster (postmaster first for SIGSTOP,
// last for SIGCONT, so nothing notices a half-paused server).
func (p *privatePG) signal(sig syscall.Signal) {
	pids := p.pids()
	if sig == syscall.SIGCONT {
		for i := len(pids) - 1; i >= 0; i-- {
			_ = syscall.Kill(pids[i], sig)
		}
		return
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// stop shuts the cluster down (fast shutdown, SIGINT) and waits for it.
func (p *privatePG) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		p.cmd = nil
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case a test left it paused
	p.signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// url is the private cluster's postgres database.
func (p *privatePG) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// eventually polls cond until it holds or the timeout passes.
func eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
