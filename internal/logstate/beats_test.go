package logstate_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

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
		t.Fatalf("a report two hours old = %q, want kept", m)
	}
	clk.Advance(logstate.BeatReportTTL - 2*logstate.BeatStatusTTL - 2*time.Second)
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

// TestBeatsHoldAnHour: a status stopped being written 30 minutes ago is
// still held (deletion protection names its instance as seen), one 61
// minutes old is not.
func TestBeatsHoldAnHour(t *testing.T) {
	b, _, clk := newBeats()
	ctx := context.Background()
	if err := b.WriteStatus(ctx, "gone-early", []byte("1")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Minute)
	if err := b.WriteStatus(ctx, "gone-late", []byte("2")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Minute)
	m, err := b.InstanceStatuses(ctx)
	if err != nil || len(m) != 1 || string(m["gone-late"]) != "2" {
		t.Fatalf("statuses 30 and 61 minutes old = %q, %v; want the 30-minute one alone", m, err)
	}
	page, _, err := b.InstanceStatusPage(ctx, "", 10)
	if err != nil || len(page) != 1 || page[0].ID != "gone-late" {
		t.Fatalf("page of statuses 30 and 61 minutes old = %+v, %v; want the 30-minute one alone", page, err)
	}
}

// TestBeatsEvictAtBound: at the bound a new instance's status takes the
// place of the one written longest ago once that one is more than
// varplane.StatusFresh old; a status that young is never evicted (it
// counts as live), so with every held status fresh the write is refused,
// and a held instance's rewrite never is.
func TestBeatsEvictAtBound(t *testing.T) {
	b, _, clk := newBeats()
	logstate.SetStatusBound(b, 3)
	ctx := context.Background()
	held := func() string {
		t.Helper()
		m, err := b.InstanceStatuses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(slices.Sorted(maps.Keys(m)), ",")
	}
	for _, step := range []struct {
		advance time.Duration
		id      string
		refused bool
		held    string
	}{
		{0, "a", false, "a"},
		{0, "b", false, "a,b"},
		{0, "c", false, "a,b,c"},
		{0, "d", true, "a,b,c"},                                     // every held status is fresh
		{varplane.StatusFresh, "d", true, "a,b,c"},                  // exactly StatusFresh old: still fresh
		{time.Second, "a", false, "a,b,c"},                          // a live instance rewrites: never refused
		{0, "d", false, "a,c,d"},                                    // b, the oldest, is no longer fresh
		{0, "e", false, "a,d,e"},                                    // then c
		{0, "f", true, "a,d,e"},                                     // a, d and e are fresh
		{varplane.StatusFresh / 2, "a", false, "a,d,e"},             // a rewritten
		{varplane.StatusFresh/2 + time.Second, "f", false, "a,e,f"}, // d is past StatusFresh, a is not
	} {
		clk.Advance(step.advance)
		err := b.WriteStatus(ctx, step.id, []byte(step.id))
		if step.refused != (err != nil) || (err != nil && varplane.ErrorCode(err) != varplane.CodeLimitExceeded) {
			t.Fatalf("write %s after %v = %v, want refused %v", step.id, step.advance, err, step.refused)
		}
		if got := held(); got != step.held {
			t.Fatalf("after writing %s: held %s, want %s", step.id, got, step.held)
		}
	}
}

// TestBeatsBoundProperty: against a model of the rule, over random writes
// of a few ids and random steps of the clock (monotone, as the process
// clock is): the table holds at most its bound, exactly the unexpired
// statuses the model holds, with their last values; a rewrite of a held
// instance is never refused; a new one is refused (limit-exceeded) only
// when every held status is fresh, and otherwise evicts the one written
// longest ago.
func TestBeatsBoundProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		b, _, clk := newBeats()
		bound := rapid.IntRange(1, 6).Draw(rt, "bound")
		logstate.SetStatusBound(b, bound)
		ctx := context.Background()
		type held struct {
			value   string
			written time.Time
			seq     int
		}
		model := map[string]held{}
		for i := range rapid.IntRange(1, 80).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "advance") {
			case 0:
				clk.Advance(time.Duration(rapid.IntRange(0, 70).Draw(rt, "minutes")) * time.Minute)
			case 1, 2, 3:
				clk.Advance(time.Duration(rapid.IntRange(0, 90).Draw(rt, "seconds")) * time.Second)
			}
			now := clk.Now()
			maps.DeleteFunc(model, func(_ string, h held) bool { return !now.Before(h.written.Add(logstate.BeatStatusTTL)) })
			id := fmt.Sprintf("i%d", rapid.IntRange(0, 9).Draw(rt, "id"))
			value := fmt.Sprint(i)
			_, had := model[id]
			wantRefused := false
			if !had && len(model) >= bound {
				oldest := ""
				for k, h := range model {
					if oldest == "" || h.seq < model[oldest].seq {
						oldest = k
					}
				}
				if now.Sub(model[oldest].written) <= varplane.StatusFresh {
					wantRefused = true
				} else {
					delete(model, oldest)
				}
			}
			err := b.WriteStatus(ctx, id, []byte(value))
			if wantRefused != (err != nil) {
				rt.Fatalf("write %s (held %v, %d of %d held) = %v, want refused %v", id, had, len(model), bound, err, wantRefused)
			}
			if err != nil && varplane.ErrorCode(err) != varplane.CodeLimitExceeded {
				rt.Fatalf("refusal %v, want limit-exceeded", err)
			}
			if !wantRefused {
				model[id] = held{value: value, written: now, seq: i}
			}
			got, err := b.InstanceStatuses(ctx)
			if err != nil {
				rt.Fatal(err)
			}
			if len(got) > bound || len(got) != len(model) {
				rt.Fatalf("holds %d statuses, the model %d (bound %d)", len(got), len(model), bound)
			}
			for k, h := range model {
				if string(got[k]) != h.value {
					rt.Fatalf("status of %s = %q, want %q", k, got[k], h.value)
				}
			}
		}
	})
}
