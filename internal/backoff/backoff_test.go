package backoff_test

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/varplane/varplane/internal/backoff"
)

// TestDuration: every wait is in (0, min(lo·2^attempt, hi)], the bound grows
// by attempt and stops at hi, and the draws spread over the interval (full
// jitter, not a fixed or half-fixed wait).
func TestDuration(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lo := time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "lo"))
		hi := time.Duration(rapid.Int64Range(int64(lo), int64(time.Minute)).Draw(t, "hi"))
		attempt := rapid.IntRange(0, 200).Draw(t, "attempt")
		bound := lo
		for i := 0; i < attempt && bound < hi; i++ {
			bound *= 2
		}
		bound = min(bound, hi)
		if d := backoff.Duration(attempt, lo, hi); d <= 0 || d > bound {
			t.Fatalf("Duration(%d, %v, %v) = %v, want in (0, %v]", attempt, lo, hi, d, bound)
		}
	})
	low, high := 0, 0
	for range 1000 {
		d := backoff.Duration(3, 100*time.Millisecond, time.Minute) // bound 800ms
		if d < 200*time.Millisecond {
			low++
		}
		if d > 600*time.Millisecond {
			high++
		}
	}
	if low < 100 || high < 100 {
		t.Errorf("draws are not spread over (0, 800ms]: %d below 200ms, %d above 600ms of 1000", low, high)
	}
	if d := backoff.Duration(0, 0, 0); d <= 0 || d > 100*time.Millisecond {
		t.Errorf("Backoff with zero bounds = %v, want the 100ms default", d)
	}
}

// TestRetry: waits grow with the attempts, Reset starts again, and a
// cancelled context ends the wait at once.
func TestRetry(t *testing.T) {
	r := backoff.Retry{Min: time.Millisecond, Max: 4 * time.Millisecond}
	ctx := context.Background()
	for range 3 {
		if !r.Wait(ctx) {
			t.Fatal("Wait ended early")
		}
	}
	if r.Attempt() != 3 {
		t.Errorf("attempt %d after 3 waits", r.Attempt())
	}
	r.Reset()
	if r.Attempt() != 0 {
		t.Error("Reset kept the attempts")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	slow := backoff.Retry{Min: time.Hour, Max: time.Hour}
	if slow.Wait(cancelled) {
		t.Error("Wait on a cancelled context reported true")
	}
}
