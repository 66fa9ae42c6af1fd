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
// The process's own setting wins: with GOGC in the environment, Start
// changes nothing.
package gctune

import (
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
		tuner.before = debug.SetGCPercent(Percent(liveHeap(), headroom))
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
	debug.SetGCPercent(Percent(liveHeap(), tuner.headroom))
	arm(epoch)
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
