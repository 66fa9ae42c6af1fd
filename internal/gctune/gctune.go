// Package gctune keeps a floor under the heap headroom of a server
// process's garbage collector.
//
// The Go collector starts a cycle once the heap has grown by GOGC percent
// (100 by default) over the live heap the last cycle left. A server whose
// live heap is small (a control plane holding its installed documents: a
// few MiB to tens of MiB) and which allocates for every request then
// collects many times a second: in the publish path of varplane serve on
// PostgreSQL about a fifth of the server's CPU went to the collector.
// Start raises the percent so that the heap may always grow by at least
// a set headroom before the next cycle, and lets it fall back to the
// default once the live heap is larger than that headroom: the goal is
// the larger of twice the live heap (the default) and the live heap plus
// the headroom. It is recomputed after every collection, so the process
// holds at most the headroom in garbage beyond what the default allows,
// and a large heap is collected exactly as by default.
//
// The percent applies to the live heap of the cycle after the one it was
// computed from, and a cleanup sets it only once that cycle has ended: a
// heap whose live part jumps (from 3 MiB at start-up to 30 MiB under a
// burst) would meanwhile have a goal of sixteen times the new live heap.
// So Start also sets the runtime's memory limit to the goal it means
// (plus what the runtime holds beside heap objects), moved with the
// percent: the limit caps the goal during that window, and the next
// collection's cleanup moves it up when the live heap really grew.
//
// The process's own setting wins: with GOGC in the environment, Start
// changes nothing; a GOMEMLIMIT in the environment stays the ceiling.
package gctune

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultPercent is the runtime's GOGC default, the floor of Percent.
const DefaultPercent = 100

// minHeap is the runtime's smallest heap goal at GOGC=100 (4 MiB); it
// scales with the percent, so Percent stays low enough that the smallest
// goal is at most the headroom.
const minHeap = 4 << 20

// Percent returns the GC percent that lets a heap whose last cycle left
// live bytes grow by at least headroom bytes before the next cycle: at
// least DefaultPercent, and at most the percent whose smallest heap goal
// is headroom (a nearly empty heap).
func Percent(live, headroom uint64) int {
	top := max(DefaultPercent, int(headroom*100/minHeap))
	if live == 0 || headroom/live >= uint64(top/100) {
		return top
	}
	return min(top, max(DefaultPercent, int(headroom*100/live)))
}

// tuner is the process's one tuner; Start shares it.
var tuner struct {
	mu       sync.Mutex
	users    int
	before   int
	limit    int64 // the memory limit in force before the first Start
	headroom uint64
	epoch    uint64 // the running tuner's; a cleanup of an older one stops
}

// Start keeps the GC percent at Percent(live heap, headroom), recomputed
// after every collection, until the returned stop is called; the last
// stop puts back the percent in force before the first Start. It changes
// nothing (ok false) when headroom is 0 or GOGC is set in the environment.
// The percent is the process's: a Start while another one's tuner runs
// (two servers in one test process) shares that tuner and its headroom.
func Start(headroom uint64) (stop func(), ok bool) {
	if headroom == 0 || os.Getenv("GOGC") != "" {
		return func() {}, false
	}
	tuner.mu.Lock()
	defer tuner.mu.Unlock()
	tuner.users++
	if tuner.users == 1 {
		tuner.epoch++
		tuner.headroom = headroom
		tuner.limit = debug.SetMemoryLimit(-1)
		tuner.before = debug.SetGCPercent(DefaultPercent)
		tune()
		arm(tuner.epoch)
	}
	var once sync.Once
	return func() { once.Do(release) }, true
}

func release() {
	tuner.mu.Lock()
	defer tuner.mu.Unlock()
	tuner.users--
	if tuner.users == 0 {
		tuner.epoch++ // the pending cleanup finds itself stale
		debug.SetGCPercent(tuner.before)
		debug.SetMemoryLimit(tuner.limit)
	}
}

// sentinel is allocated on its own (it is larger than the tiny
// allocator's 16 bytes), so that it becomes unreachable, and its cleanup
// runs, right after the next collection.
type sentinel struct{ _ [32]byte }

// arm registers a cleanup that retunes after the next collection and arms
// the one after it.
func arm(epoch uint64) {
	runtime.AddCleanup(new(sentinel), retune, epoch)
}

func retune(epoch uint64) {
	tuner.mu.Lock()
	defer tuner.mu.Unlock()
	if epoch != tuner.epoch {
		return
	}
	tune()
	arm(epoch)
}

// tune sets the percent and the limit for the live heap the last cycle
// left; tuner.mu is held.
func tune() {
	live := liveHeap()
	p := Percent(live, tuner.headroom)
	limit := tuner.limit
	if p > DefaultPercent {
		// The goal the percent means, plus what the runtime holds beside
		// heap objects, which the limit counts too.
		goal := live + max(live, tuner.headroom)
		limit = min(limit, int64(min(goal+overhead(), math.MaxInt64/2)))
	}
	// The limit first when it falls, so that the goal is never above both.
	debug.SetMemoryLimit(limit)
	debug.SetGCPercent(p)
}

// overhead is the memory the runtime holds beside heap objects and that
// it cannot give back: stacks, metadata, unused parts of spans in use.
// Free spans it has not yet returned to the system are not counted: the
// runtime returns them when the limit comes near.
func overhead() uint64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	metrics.Read(s)
	total := uint64(0)
	for i, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return 0
		}
		if i == 0 {
			total = v.Value.Uint64()
		} else if total < v.Value.Uint64() {
			return 0
		} else {
			total -= v.Value.Uint64()
		}
	}
	return total
}

// liveHeap is the heap the last collection left live, 0 before the first.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
