// Package procstat reads the CPU time of processes from Linux's /proc, for
// benchmarks that report CPU per operation (of the server under test, or of
// a database and all its backends) instead of wall-clock speed alone. On
// other systems, or for a process that cannot be read, it reports nothing.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// fields returns the fields of /proc/pid/stat after the command name (the
// state first), or nil.
func fields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name may hold spaces and parentheses; the fields resume
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// seconds sums clock-tick fields as seconds.
func seconds(fs ...string) float64 {
	var t float64
	for _, s := range fs {
		v, _ := strconv.ParseFloat(s, 64)
		t += v
	}
	return t / 100 // USER_HZ is 100 on Linux
}

// CPU returns the user+system CPU seconds pid has used so far, or 0 when
// it cannot be read.
func CPU(pid int) float64 {
	f := fields(pid)
	if len(f) < 13 {
		return 0
	}
	return seconds(f[11], f[12])
}

// Parent returns the parent of pid, or 0 when it cannot be read.
func Parent(pid int) int {
	f := fields(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TreeCPU returns the CPU seconds of pid, of its children that exited (and
// were reaped by it) and of its live children, or -1 when pid cannot be
// read. For a PostgreSQL postmaster that is the whole cluster: every
// backend and background process.
func TreeCPU(pid int) float64 {
	f := fields(pid)
	if len(f) < 15 {
		return -1
	}
	total := seconds(f[11], f[12], f[13], f[14])
	ents, _ := os.ReadDir("/proc")
	parent := strconv.Itoa(pid)
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if cf := fields(child); len(cf) >= 13 && cf[1] == parent {
			total += seconds(cf[11], cf[12])
		}
	}
	return total
}

// ContextSwitches returns how many times the threads of pid now alive have
// been switched off their CPU, voluntarily (a wait: a futex, epoll, a disk
// flush) or not (preempted), or -1 when pid cannot be read. A benchmark
// reads it before and after a load: on a virtual machine, where waking a
// sleeping thread costs tens of microseconds, switches per request explain
// a server's latency where its CPU time alone does not. Threads that exit
// in between take their counts with them, so it is exact only for a
// process whose threads outlive the measurement (a Go server's do).
func ContextSwitches(pid int) int64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	var total int64
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/status")
		if err != nil {
			continue // the thread exited meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				total += n
			}
		}
	}
	return total
}
