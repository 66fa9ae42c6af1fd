// Package redistest gives tests their Redis: private servers (a Redis
// Cluster of three masters on loopback ports, each in a temporary
// directory, stopped by PID at cleanup), which tests that stop or
// reconfigure a server use, and a key prefix of a test's own on the shared
// server (PrefixURL), whose keys are deleted afterwards and which leaves the
// server itself alone.
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// skipUnlessInstalled skips tb when name is not installed, unless
// VARPLANE_REQUIRE_SERVICES is set, which makes it fail.
func skipUnlessInstalled(tb testing.TB, name string) string {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			tb.Fatalf("%s is required (VARPLANE_REQUIRE_SERVICES) and not installed", name)
		}
		tb.Skipf("%s not installed: the Redis Cluster tests need it (VARPLANE_REQUIRE_SERVICES makes this fail)", name)
	}
	return bin
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Cluster is a running three-master Redis Cluster.
type Cluster struct {
	Addrs []string
}

// URL returns a store URL naming every master (rueidis finds the cluster
// from any of them), with prefix.
func (c *Cluster) URL(prefix string) string {
	u := "redis://" + c.Addrs[0] + "/0?"
	for _, a := range c.Addrs[1:] {
		u += "addr=" + a + "&"
	}
	return u + "prefix=" + prefix
}

// StartCluster starts three redis-server processes with cluster mode on,
// joins them with `redis-cli --cluster create` (no replicas) and waits for
// cluster_state:ok on each. Cleanup stops each process by its PID.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	server := skipUnlessInstalled(tb, "redis-server")
	cli := skipUnlessInstalled(tb, "redis-cli")
	c := &Cluster{}
	for range 3 {
		port := freePort(tb)
		dir := tb.TempDir()
		cmd := exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { stop(cmd) })
		addr := "127.0.0.1:" + strconv.Itoa(port)
		waitListening(tb, addr)
		c.Addrs = append(c.Addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range c.Addrs {
		host, port, _ := net.SplitHostPort(a)
		for {
			out, _ := exec.Command(cli, "-h", host, "-p", port, "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("cluster node %s not ok: %s", a, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

func waitListening(tb testing.TB, addr string) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = conn.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("redis-server on %s did not start", addr)
}

// stop terminates one server by its PID and waits for it.
func stop(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Describe names the cluster for a log line.
func (c *Cluster) Describe() string { return fmt.Sprintf("redis cluster %v", c.Addrs) }

// Server is one private standalone redis-server.
type Server struct {
	Addr string
	tb   testing.TB
	bin  string
	args []string
	cmd  *exec.Cmd
}

// StartServer starts a standalone redis-server on a free loopback port in
// a temporary directory, with extra arguments; cleanup stops it by PID.
func StartServer(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	bin := skipUnlessInstalled(tb, "redis-server")
	port := freePort(tb)
	dir := tb.TempDir()
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), tb: tb, bin: bin, args: args}
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Start runs the server again on its port and directory after Stop (with
// "--appendonly", "yes" among the extra arguments of StartServer it comes
// back with its data), and waits until it listens.
func (s *Server) Start() {
	s.tb.Helper()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.bin, s.args...)
	if err := cmd.Start(); err != nil {
		s.tb.Fatal(err)
	}
	s.cmd = cmd
	waitListening(s.tb, s.Addr)
}

// Stop terminates the server by its PID and waits for it (an outage:
// connections to it fail until Start). Stopping a stopped server does
// nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot stop
	stop(s.cmd)
	s.cmd = nil
}

// URL returns a store URL of the server with prefix.
func (s *Server) URL(prefix string) string { return "redis://" + s.Addr + "/0?prefix=" + prefix }

// Pause stops the server with SIGSTOP (a hang: connections stay open and
// nothing answers); Resume continues it.
func (s *Server) Pause()  { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
