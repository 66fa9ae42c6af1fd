package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/varplane/varplane/internal/procstat"
)

// proc is one process the harness started. It is stopped by its own PID (and
// its process group, which only it leads), never by name.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

var (
	procsMu sync.Mutex
	procs   []*proc
)

// startProc starts bin with args in its own process group, its output going
// to logPath, and registers it so that stopAll can end it.
func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group the harness created for p, waits
// up to 5 s, then SIGKILLs it.
func (p *proc) stop() {
	if p == nil || p.exited() {
		return
	}
	pid := p.pid()
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	procsMu.Lock()
	for i, q := range procs {
		if q == p {
			procs = append(procs[:i], procs[i+1:]...)
			break
		}
	}
	procsMu.Unlock()
}

// stopAll stops every process the harness started and has not stopped yet.
func stopAll() {
	procsMu.Lock()
	ps := append([]*proc(nil), procs...)
	procsMu.Unlock()
	for _, p := range ps {
		p.stop()
	}
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func mustFreePort() int {
	p, err := freePort()
	if err != nil {
		fatalf("%v", err)
	}
	return p
}

// waitTCP waits until addr accepts connections, p exits, or timeout passes.
func waitTCP(ctx context.Context, p *proc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before listening on %s: %v", p.name, addr, p.err)
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not listening on %s after %v", p.name, addr, timeout)
}

// cpuTimes returns the user+system CPU seconds of pid so far.
func cpuTimes(pid int) float64 { return procstat.CPU(pid) }

// rssKiB returns VmRSS of pid in KiB.
func rssKiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// cpuIdle measures the fraction of CPU time the whole machine spent idle
// over d, from /proc/stat.
func cpuIdle(d time.Duration) float64 {
	read := func() (idle, total float64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, s := range f[1:] {
			v, _ := strconv.ParseFloat(s, 64)
			if i >= 8 { // guest times are already in user/nice
				break
			}
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return idle, total
	}
	i0, t0 := read()
	time.Sleep(d)
	i1, t1 := read()
	if t1 <= t0 {
		return 1
	}
	return (i1 - i0) / (t1 - t0)
}

// waitIdle waits until the machine was at least threshold idle over one
// sample window, or max passes; it returns the last idle fraction seen (the
// run records it, so a measurement taken on a busy machine shows as such).
func waitIdle(ctx context.Context, threshold float64, sample, max time.Duration) float64 {
	deadline := time.Now().Add(max)
	var idle float64
	for {
		idle = cpuIdle(sample)
		if idle >= threshold || time.Now().After(deadline) || ctx.Err() != nil {
			return idle
		}
	}
}

func cmdOutput(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// findEtcd returns the etcd binary, installing Debian's etcd-server with
// apt-get when none is on PATH and install is set.
func findEtcd(install bool) (string, error) {
	for _, c := range []string{"etcd", "/usr/bin/etcd", "/usr/local/bin/etcd"} {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	if !install {
		return "", errors.New("etcd not found (install Debian's etcd-server, or run without -no-install)")
	}
	logf("etcd not found: installing Debian's etcd-server (apt-get update && apt-get install -y etcd-server)")
	for _, args := range [][]string{{"update"}, {"install", "-y", "etcd-server"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, lastLines(string(out), 10))
		}
	}
	// The package may register a system service; the harness never uses it
	// (it runs its own instance on free ports) and leaves it alone.
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd still not found after installing etcd-server: %w", err)
	}
	return p, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
