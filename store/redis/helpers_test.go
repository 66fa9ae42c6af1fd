package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// sharedURL returns the base URL of the shared Redis, skipping the test when
// it does not answer (failing instead under VARPLANE_REQUIRE_SERVICES).
func sharedURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("VARPLANE_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	c, err := rueidis.NewClient(mustOpt(tb, u))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = c.Do(ctx, c.B().Ping().Build()).Error()
		cancel()
		c.Close()
	}
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			tb.Fatalf("redis at VARPLANE_REDIS_URL is required and unreachable: %v", err)
		}
		tb.Skipf("redis not reachable (set VARPLANE_REDIS_URL; VARPLANE_REQUIRE_SERVICES makes this fail): %v", err)
	}
	return u
}

func mustOpt(tb testing.TB, u string) rueidis.ClientOption {
	tb.Helper()
	_, opt, _, err := parseURL(u)
	if err != nil {
		tb.Fatal(err)
	}
	opt.DisableCache = true
	return opt
}

// withPrefix returns u with the prefix query parameter set.
func withPrefix(tb testing.TB, u, prefix string) string {
	tb.Helper()
	p, err := url.Parse(u)
	if err != nil {
		tb.Fatal(err)
	}
	q := p.Query()
	q.Set("prefix", prefix)
	p.RawQuery = q.Encode()
	return p.String()
}

// testPrefix returns a prefix unique to this test run and registers the
// deletion of every key under it.
func testPrefix(tb testing.TB, u string) string {
	tb.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "vptest-" + hex.EncodeToString(b)
	tb.Cleanup(func() { deletePrefix(tb, u, prefix) })
	return prefix
}

// deletePrefix removes every key under prefix with SCAN + DEL.
func deletePrefix(tb testing.TB, u, prefix string) {
	tb.Helper()
	c, err := rueidis.NewClient(mustOpt(tb, u))
	if err != nil {
		tb.Logf("cleanup of %s: %v", prefix, err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := redistest.DeletePrefix(ctx, c, prefix); err != nil {
		tb.Logf("cleanup of %s: %v", prefix, err)
	}
}

// rawClient returns a plain client on u for tests that poke at Redis.
func rawClient(tb testing.TB, u string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(mustOpt(tb, u))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// openStore opens a Store on u and closes it at cleanup.
func openStore(tb testing.TB, u string, opts Options) *Store {
	tb.Helper()
	s, err := Open(context.Background(), u, opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// privateRedis is a redis-server of the test's own, on a free port, stopped
// by PID at cleanup. The shared instance is never reconfigured.
type privateRedis struct {
	tb   testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startPrivateRedis starts redis-server with extra arguments (appendonly in a
// temporary directory, so a restart keeps what it acknowledged).
func startPrivateRedis(tb testing.TB, extra ...string) *privateRedis {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			tb.Fatal("redis-server is required and not installed")
		}
		tb.Skip("redis-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	p := &privateRedis{tb: tb, port: port, dir: tb.TempDir()}
	p.args = append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
		"--appendfsync", "always", "--dir", p.dir, "--logfile", filepath.Join(p.dir, "redis.log"),
	}, extra...)
	p.cmd = exec.Command(bin, p.args...)
	p.start()
	tb.Cleanup(p.stop)
	return p
}

func (p *privateRedis) start() {
	p.tb.Helper()
	p.cmd = exec.Command(p.cmd.Path, p.args...)
	if err := p.cmd.Start(); err != nil {
		p.tb.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", p.addr(), 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.tb.Fatalf("private redis on %s did not start", p.addr())
}

// stop terminates the server by its PID and waits for it.
func (p *privateRedis) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd.Process = nil
}

func (p *privateRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// url returns the URL of the private server, with user credentials when
// given as "user:password".
func (p *privateRedis) url(cred string) string {
	if cred != "" {
		return fmt.Sprintf("redis://%s@%s/0", cred, p.addr())
	}
	return fmt.Sprintf("redis://%s/0", p.addr())
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
