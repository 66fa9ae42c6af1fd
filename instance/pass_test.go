package instance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// gateStore counts concurrent State calls and blocks them while gated.
type gateStore struct {
	varplane.Store
	mu       sync.Mutex
	gate     chan struct{} // nil: open
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	calls    atomic.Int32
}

func (g *gateStore) State(ctx context.Context, sc varplane.Scope) (*varplane.ScopeState, error) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	g.calls.Add(1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, varplane.Unavailable(ctx.Err())
		}
	}
	return g.Store.State(ctx, sc)
}

func (g *gateStore) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateStore) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

// TestPassConcurrencyAndOverrun: a pass reads at most 4 documents at a
// time; while a pass outlasts the interval no second pass starts beside
// it, and the next starts as soon as it ends.
func TestPassConcurrencyAndOverrun(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	for i := range 20 {
		publish(t, mem, varplane.Scope(fmt.Sprintf("app.s%d", i)), `{"n":1}`)
	}
	g := &gateStore{Store: mem}
	clk := newFakeClock()
	c, _ := newCache(t, g, clk, nil)
	ctx := context.Background()
	for i := range 20 {
		if _, err := c.Get(ctx, varplane.Scope(fmt.Sprintf("app.s%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	g.close()
	clk.Advance(DefaultRevalidateInterval)
	waitFor(t, "4 reads in flight", func() bool { return g.inFlight.Load() == 4 })
	// Two more ticks while the pass is stuck: no second pass.
	clk.Advance(DefaultRevalidateInterval)
	clk.Advance(DefaultRevalidateInterval)
	time.Sleep(20 * time.Millisecond)
	if p := c.Stats().Passes; p != 1 {
		t.Fatalf("%d passes started while the first one runs, want 1", p)
	}
	if m := g.maxSeen.Load(); m != 4 {
		t.Fatalf("at most %d reads in flight, want 4", m)
	}
	g.open()
	// The overrun pass is followed at once by the next, without a tick.
	waitFor(t, "the next pass right after the overrun one", func() bool { return c.Stats().Passes == 2 })
	waitFor(t, "it to end", func() bool { return g.inFlight.Load() == 0 && c.Stats().Confirms >= 42 })
	if m := g.maxSeen.Load(); m > 4 {
		t.Fatalf("%d reads in flight, want at most 4", m)
	}
}

// TestSlowDecodeDoesNotHoldPasses: a pass held up only by a decode running
// past 30 s goes on without it (or, with no read in flight and nothing
// confirmed for 30 s, is abandoned at the next tick), so passes keep
// running while the decode does; the decode installs and confirms its
// document when it ends.
func TestSlowDecodeDoesNotHoldPasses(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.slow", `{"n":1}`)
	release := make(chan struct{})
	var slow atomic.Bool
	clk := newFakeClock()
	c, _ := newCache(t, mem, clk, func(o *Options[value]) {
		o.Decode = func(ctx context.Context, rec *varplane.RevisionRecord) (value, error) {
			if rec.Scope == "app.slow" && slow.Load() {
				<-release
			}
			return decodeValue(ctx, rec)
		}
	})
	ctx := context.Background()
	if _, err := c.Get(ctx, "app.slow"); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	publish(t, mem, "app.slow", `{"n":2}`) // its invalidation's decode blocks
	clk.Advance(DefaultRevalidateInterval)
	waitFor(t, "a pass", func() bool { return c.Stats().Passes == 1 })
	// 30 s without confirmation and no read in flight: abandoned at a tick.
	for range 4 {
		clk.Advance(DefaultRevalidateInterval)
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, "the pass to go on without the slow decode", func() bool {
		st := c.Stats()
		return st.Abandoned >= 1 || st.SlowDecodes >= 1
	})
	for range 2 {
		clk.Advance(DefaultRevalidateInterval)
	}
	waitFor(t, "passes to keep running during the decode", func() bool { return c.Stats().Passes >= 2 })
	close(release)
	waitFor(t, "the slow decode to install its document", func() bool {
		d, err := c.Get(ctx, "app.slow")
		return err == nil && d.Value.N == 2
	})
}
