package logstate_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newBeats() (*logstate.Beats, *logstate.Reads, *fakeClock) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	r := &logstate.Reads{}
	r.Init(logstate.New())
	b := &logstate.Beats{}
	b.InitBeats(r, clk.Now)
	return b, r, clk
}

// TestBeatsExpire: a status lives BeatStatusTTL after its last write and a
// report BeatReportTTL, each write renewing it; the sweep then drops them.
func TestBeatsExpire(t *testing.T) {
	b, _, clk := newBeats()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.WriteStatus(ctx, "a", []byte("1")))
	must(b.WriteStatus(ctx, "b", []byte("1")))
	must(b.WriteCanaryReport(ctx, "w", "a", []byte("r")))
	clk.Advance(logstate.BeatStatusTTL - time.Second)
	must(b.WriteStatus(ctx, "a", []byte("2"))) // renews a only
	clk.Advance(2 * time.Second)
	if m, _ := b.InstanceStatuses(ctx); len(m) != 1 || string(m["a"]) != "2" {
		t.Fatalf("statuses past b's lifetime = %q, want a's alone", m)
	}
	clk.Advance(logstate.BeatStatusTTL)
	if m, _ := b.InstanceStatuses(ctx); len(m) != 0 {
		t.Fatalf("statuses past every lifetime = %q, want none", m)
	}
	if m, _ := b.CanaryReports(ctx, "w"); len(m) != 1 {
		t.Fatalf("a report four minutes old = %q, want kept", m)
	}
	clk.Advance(logstate.BeatReportTTL - 4*time.Minute - time.Second)
	must(b.WriteCanaryReport(ctx, "w", "a", []byte("r2"))) // renews it
	clk.Advance(logstate.BeatReportTTL - time.Second)
	if m, _ := b.CanaryReports(ctx, "w"); string(m["a"]) != "r2" {
		t.Fatalf("a renewed report = %q, want kept", m)
	}
	clk.Advance(2 * time.Second)
	if m, _ := b.CanaryReports(ctx, "w"); len(m) != 0 {
		t.Fatalf("a report past its lifetime = %q, want none", m)
	}
}

// TestBeatsBounded: the table refuses to grow past its bounds with
// limit-exceeded, keeps answering what it holds, and has room again once
// the expired values are swept.
func TestBeatsBounded(t *testing.T) {
	b, r, clk := newBeats()
	ctx := context.Background()
	for i := range logstate.MaxBeatStatuses {
		if err := b.WriteStatus(ctx, fmt.Sprint(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WriteStatus(ctx, "one-more", nil); varplane.ErrorCode(err) != varplane.CodeLimitExceeded {
		t.Fatalf("a status past the bound = %v, want limit-exceeded", err)
	}
	if err := b.WriteStatus(ctx, "0", []byte("again")); err != nil {
		t.Fatalf("rewriting a held status at the bound = %v", err)
	}
	for i := range logstate.MaxBeatReports {
		if err := b.WriteCanaryReport(ctx, "w", fmt.Sprint(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WriteCanaryReport(ctx, "w", "one-more", nil); varplane.ErrorCode(err) != varplane.CodeLimitExceeded {
		t.Fatalf("a report past the bound = %v, want limit-exceeded", err)
	}
	clk.Advance(logstate.BeatStatusTTL)
	if err := b.WriteStatus(ctx, "one-more", nil); err != nil {
		t.Fatalf("a status once the others expired = %v", err)
	}
	if m, _ := b.InstanceStatuses(ctx); len(m) != 1 {
		t.Fatalf("statuses after the sweep = %d, want 1", len(m))
	}
	for i := range logstate.MaxBeatWindows - 1 {
		if err := b.WriteCanaryReport(ctx, fmt.Sprintf("w%d", i), "a", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WriteCanaryReport(ctx, "w-new", "a", nil); varplane.ErrorCode(err) != varplane.CodeLimitExceeded {
		t.Fatalf("a window past the bound = %v, want limit-exceeded", err)
	}
	r.Shut()
	if err := b.WriteStatus(ctx, "x", nil); !errors.Is(err, varplane.ErrClosed) {
		t.Fatalf("a write after shut = %v, want ErrClosed", err)
	}
}
