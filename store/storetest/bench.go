package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// BenchmarkHeadRead measures State on a scope with an active head: the hot
// read path (target: under 100 ns and 0 allocations for in-memory stores).
func BenchmarkHeadRead(b *testing.B, h Harness) {
	s := open(b, h)
	ctx := context.Background()
	const scope = varplane.Scope("bench.read.k")
	// Other scopes so that the shard maps are not trivially small.
	for i := range 1000 {
		mustCreate(b, s, varplane.Scope(fmt.Sprintf("bench.fill.k%d", i)), Doc(i))
	}
	mustActivate(b, s, scope, mustCreate(b, s, scope, Doc(1)), 0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st, err := s.State(ctx, scope)
		if err != nil || st.Head == nil {
			b.Fatalf("state: %v %v", st, err)
		}
	}
}

// BenchmarkCreateActivate measures one revision-created plus one activation
// of it, each iteration in a scope of its own.
func BenchmarkCreateActivate(b *testing.B, h Harness) {
	s := open(b, h)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		scope := varplane.Scope(fmt.Sprintf("bench.ca.k%d", i))
		ev := CreatedEvent(scope, Doc(i))
		if err := s.Append(ctx, ev, 0); err != nil {
			b.Fatal(err)
		}
		if err := s.Append(ctx, ActivatedEvent(scope, ev.Revision, 0), 0); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkActivate measures activations from parallelism goroutines, each on
// a scope of its own, and reports commits/s.
func BenchmarkActivate(b *testing.B, h Harness, parallelism int) {
	ActivateLoad(b, open(b, h), parallelism)
}

// ActivateLoad runs b.N activations on s from parallelism goroutines, each
// alternating two revisions on a scope of its own with the right expected
// generation, and reports commits/s. It is the body of BenchmarkActivate for
// stores whose benchmarks report extra metrics of their own.
func ActivateLoad(b *testing.B, s varplane.Store, parallelism int) {
	ctx := context.Background()
	type worker struct {
		scope varplane.Scope
		revs  [2]varplane.Revision
		gen   varplane.Generation
	}
	ws := make([]*worker, parallelism)
	for i := range ws {
		scope := varplane.Scope(fmt.Sprintf("bench.act.p%d", i))
		w := &worker{scope: scope}
		st, err := s.State(ctx, scope)
		if err != nil {
			b.Fatal(err)
		}
		w.gen = st.Generation
		for j := range w.revs {
			doc := Doc(i*2 + j)
			w.revs[j] = RevisionOf(doc)
			if err := s.Append(ctx, CreatedEvent(scope, doc), 0); err != nil && !isExists(err) {
				b.Fatal(err)
			}
		}
		ws[i] = w
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per, extra := b.N/parallelism, b.N%parallelism
	for i, w := range ws {
		n := per
		if i < extra {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				ev := ActivatedEvent(w.scope, w.revs[k%2], w.gen)
				if err := s.Append(ctx, ev, w.gen); err != nil {
					b.Error(err)
					return
				}
				w.gen++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if elapsed > 0 {
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	}
}

func isExists(err error) bool { return err != nil && errors.Is(err, varplane.ErrRevisionExists) }

// CommitToWatch measures, per b.N, the time from an activation committed
// through a to its delivery to a Watch listener of bs, another replica of
// the same shared store, and reports p50 and p99.
func CommitToWatch(b *testing.B, a, bs varplane.Store) {
	ctx := context.Background()
	scope := varplane.Scope("bench.watch.k")
	var revs [2]varplane.Revision
	for i := range revs {
		ev := CreatedEvent(scope, Doc(i))
		if err := a.Append(ctx, ev, 0); err != nil {
			b.Fatal(err)
		}
		revs[i] = ev.Revision
	}
	got := make(chan time.Time, 1)
	var want atomic.Uint64
	cancel := bs.Watch(func(c varplane.Commit) {
		if c.Scope == scope && uint64(c.Changes[0].Generation) == want.Load() {
			got <- time.Now()
		}
	})
	defer cancel()
	var lat []time.Duration
	gen := varplane.Generation(0)
	b.ResetTimer()
	for b.Loop() {
		want.Store(uint64(gen + 1))
		start := time.Now()
		if err := a.Append(ctx, ActivatedEvent(scope, revs[gen%2], gen), gen); err != nil {
			b.Fatal(err)
		}
		select {
		case t := <-got:
			lat = append(lat, t.Sub(start))
		case <-time.After(5 * time.Second):
			b.Fatalf("generation %d not delivered to B", gen+1)
		}
		gen++
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
