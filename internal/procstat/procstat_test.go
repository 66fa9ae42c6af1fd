package procstat

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

func TestCPUAndTree(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	self := os.Getpid()
	if p := Parent(self); p != os.Getppid() {
		t.Fatalf("Parent = %d, want %d", p, os.Getppid())
	}
	c0 := CPU(self)
	for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
	}
	c1 := CPU(self)
	if c1 <= c0 {
		t.Fatalf("CPU did not grow while spinning: %v then %v", c0, c1)
	}
	// A child that has run and exited counts in its parent's tree once
	// reaped; a live child counts as it runs.
	tree0 := TreeCPU(self)
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Skipf("no shell to run a child: %v", err)
	}
	if tree1 := TreeCPU(self); tree1 <= tree0 || tree1 < CPU(self) {
		t.Fatalf("TreeCPU after a child ran: %v, before %v, own %v", tree1, tree0, CPU(self))
	}
}

func TestUnreadable(t *testing.T) {
	const none = 1 << 30 // beyond any pid_max
	if CPU(none) != 0 || Parent(none) != 0 || TreeCPU(none) != -1 {
		t.Fatalf("an absent process: CPU %v Parent %v TreeCPU %v", CPU(none), Parent(none), TreeCPU(none))
	}
}

// TestContextSwitches checks that the count grows by at least the number
// of times a thread of this process slept and was woken, and that a
// process that does not exist reads as -1.
func TestContextSwitches(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	self := os.Getpid()
	c0 := ContextSwitches(self)
	if c0 < 0 {
		t.Fatalf("ContextSwitches(self) = %d", c0)
	}
	const sleeps = 20
	for range sleeps {
		time.Sleep(time.Millisecond) // each parks a thread in the kernel at least once
	}
	if c1 := ContextSwitches(self); c1-c0 < sleeps {
		t.Fatalf("after %d sleeps the count grew by %d", sleeps, c1-c0)
	}
	if got := ContextSwitches(1 << 30); got != -1 {
		t.Fatalf("ContextSwitches of no process = %d, want -1", got)
	}
}
