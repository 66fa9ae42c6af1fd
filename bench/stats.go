package main

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// Stats is one run of one side of a scenario. Latencies are milliseconds,
// Throughput is successful operations per second.
type Stats struct {
	Ops        int                `json:"ops"`
	Errors     int                `json:"errors"`
	Seconds    float64            `json:"seconds"`
	Throughput float64            `json:"throughput"`
	P50        float64            `json:"p50Ms"`
	P99        float64            `json:"p99Ms"`
	Max        float64            `json:"maxMs"`
	Idle       float64            `json:"idleBefore"`
	Extra      map[string]float64 `json:"extra,omitempty"`
	FirstError string             `json:"firstError,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize fills the latency fields of s from lat (which it sorts).
func summarize(s *Stats, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	s.P50 = ms(pct(lat, 0.50))
	s.P99 = ms(pct(lat, 0.99))
	s.Max = ms(lat[len(lat)-1])
}

func pct(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[i]
}

// closedLoop runs op back to back on workers goroutines for dur after a
// warm-up, recording the latency of each successful call. op returns
// (false, nil) for an operation that completed but does not count as a
// success (a lost race), which is recorded in Extra["misses"].
func closedLoop(ctx context.Context, workers int, warm, dur time.Duration, op func(w int) (bool, error)) Stats {
	type acc struct {
		lat    []time.Duration
		errs   int
		misses int
		first  error
	}
	accs := make([]acc, workers)
	start := time.Now()
	measureFrom := start.Add(warm)
	end := measureFrom.Add(dur)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			a := &accs[w]
			a.lat = make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(end) {
					return
				}
				ok, err := op(w)
				t1 := time.Now()
				if t0.Before(measureFrom) {
					continue
				}
				switch {
				case err != nil:
					a.errs++
					if a.first == nil {
						a.first = err
					}
					if ctx.Err() != nil {
						return
					}
					time.Sleep(time.Millisecond) // an erroring op must not spin
				case !ok:
					a.misses++
				default:
					a.lat = append(a.lat, t1.Sub(t0))
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)
	var all []time.Duration
	var s Stats
	misses := 0
	for _, a := range accs {
		all = append(all, a.lat...)
		s.Errors += a.errs
		misses += a.misses
		if a.first != nil && s.FirstError == "" {
			s.FirstError = a.first.Error()
		}
	}
	s.Ops = len(all)
	s.Seconds = elapsed.Seconds()
	s.Throughput = float64(s.Ops) / s.Seconds
	if misses > 0 {
		s.Extra = map[string]float64{"misses": float64(misses)}
	}
	summarize(&s, all)
	return s
}

// median returns the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	c := append([]float64(nil), xs...)
	sort.Float64s(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

func minMax(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	lo, hi = xs[0], xs[0]
	for _, x := range xs[1:] {
		lo = math.Min(lo, x)
		hi = math.Max(hi, x)
	}
	return lo, hi
}
