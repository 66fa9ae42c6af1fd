package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, headroom uint64
		want           int
	}{
		{10 * mib, 64 * mib, 640},
		{64 * mib, 64 * mib, 100},
		{640 * mib, 64 * mib, 100}, // never below the default
		{1 * mib, 64 * mib, 1600},  // capped: the smallest goal is then 64 MiB
		{0, 64 * mib, 1600},
		{10 * mib, 0, 100}, // no headroom: the default
		{3 * mib, 64 * mib, 1600},
		{20 * mib, 64 * mib, 320},
		{1 * mib, 2 * mib, 100}, // a headroom below the runtime's smallest goal
	} {
		if got := Percent(tc.live, tc.headroom); got != tc.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", tc.live, tc.headroom, got, tc.want)
		}
	}
}

// gogc reads the GC percent in force.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestStart: the percent follows the live heap (high while it is small,
// the default once it outgrows the headroom) and stop puts back the one in
// force before.
func TestStart(t *testing.T) {
	t.Setenv("GOGC", "")
	prev := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prev)
	stop, ok := Start(32 << 20)
	if !ok {
		t.Fatal("Start refused with GOGC unset")
	}
	runtime.GC()
	waitFor(t, "a percent above the default for a small heap", func() bool { return gogc() > 200 })
	big := make([]byte, 96<<20)
	for i := range big {
		big[i] = 1
	}
	runtime.GC()
	waitFor(t, "the default once the live heap outgrows the headroom", func() bool { return gogc() == DefaultPercent })
	runtime.KeepAlive(big)
	stop()
	if got := gogc(); got != 150 {
		t.Errorf("after stop the percent is %d, want 150", got)
	}
}

// TestStartRespectsGOGC: with GOGC set, Start changes nothing.
func TestStartRespectsGOGC(t *testing.T) {
	t.Setenv("GOGC", "100")
	prev := debug.SetGCPercent(130)
	defer debug.SetGCPercent(prev)
	stop, ok := Start(64 << 20)
	defer stop()
	if ok {
		t.Error("Start took over although GOGC is set")
	}
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	if got := gogc(); got != 130 {
		t.Errorf("percent %d, want 130 untouched", got)
	}
	if _, ok := Start(0); ok {
		t.Error("Start with no headroom took over")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %s; percent %d", what, gogc())
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStartShared: two users share one tuner; the percent is put back
// only when both have stopped.
func TestStartShared(t *testing.T) {
	t.Setenv("GOGC", "")
	prev := debug.SetGCPercent(170)
	defer debug.SetGCPercent(prev)
	stopA, _ := Start(32 << 20)
	stopB, _ := Start(32 << 20)
	runtime.GC()
	waitFor(t, "a raised percent", func() bool { return gogc() > 200 })
	stopA()
	stopA() // a second call is a no-op
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	if got := gogc(); got == 170 {
		t.Error("the percent was put back while B still runs")
	}
	stopB()
	if got := gogc(); got != 170 {
		t.Errorf("after both stopped the percent is %d, want 170", got)
	}
}

// sink keeps the garbage of TestLimitCapsTheLag on the heap.
var sink []byte

// memLimit reads the memory limit in force.
func memLimit() int64 { return debug.SetMemoryLimit(-1) }

// TestLimitCapsTheLag: while the cleanup that retunes has not run yet
// (held here by holding the tuner's lock), a live heap that jumped from
// next to nothing to 48 MiB is collected near live plus the headroom, not
// at the goal the percent computed for the small heap would give (sixteen
// times the new live heap: 800 MiB).
func TestLimitCapsTheLag(t *testing.T) {
	t.Setenv("GOGC", "")
	prevLimit := memLimit()
	stop, ok := Start(32 << 20)
	if !ok {
		t.Fatal("Start refused with GOGC unset")
	}
	runtime.GC()
	waitFor(t, "a percent above the default for a small heap", func() bool { return gogc() > 400 })
	if l := memLimit(); l == math.MaxInt64 || l > 256<<20 {
		t.Fatalf("memory limit %d while the heap is small, want about the headroom", l)
	}

	tuner.mu.Lock()
	live := make([][]byte, 48)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	var peak uint64
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	for i := 0; i < 4000; i++ {
		sink = make([]byte, 64<<10)
		metrics.Read(s)
		peak = max(peak, s[0].Value.Uint64())
	}
	tuner.mu.Unlock()
	runtime.KeepAlive(live)
	t.Logf("heap objects peaked at %d MiB, percent %d", peak>>20, gogc())
	if peak > 200<<20 {
		t.Errorf("heap objects reached %d MiB during the lag, want near 48 + 32 MiB", peak>>20)
	}

	stop()
	if got := memLimit(); got != prevLimit {
		t.Errorf("after stop the memory limit is %d, want %d back", got, prevLimit)
	}
}
