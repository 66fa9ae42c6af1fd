package redis

import (
	"context"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// TestCanaryReports: an instance's report of a window replaces its
// previous one, both keys live ReportTTL after the last write, a report
// that expired is not answered though still listed, a read-only store
// writes them, and a window id that would break the hash tag is refused.
func TestCanaryReports(t *testing.T) {
	u := sharedURL(t)
	prefix := testPrefix(t, u)
	s := openStore(t, withPrefix(t, u, prefix), Options{ReadOnly: true})
	ctx := context.Background()
	for _, w := range []struct{ id, v string }{{"pod-a", `{"decoded":1}`}, {"pod-a", `{"decoded":2}`}, {"pod-b", `{"decoded":5}`}} {
		if err := s.WriteCanaryReport(ctx, "ch-1-3", w.id, []byte(w.v)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.CanaryReports(ctx, "ch-1-3")
	if err != nil || len(got) != 2 || string(got["pod-a"]) != `{"decoded":2}` || string(got["pod-b"]) != `{"decoded":5}` {
		t.Fatalf("reports = %q %v, want pod-a's second and pod-b's", got, err)
	}
	raw := rawClient(t, u)
	for _, k := range []string{s.keys.reportKey("ch-1-3", "pod-a"), s.keys.reportIndex("ch-1-3")} {
		ttl, err := raw.Do(ctx, raw.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil || time.Duration(ttl)*time.Millisecond < ReportTTL-time.Minute || time.Duration(ttl)*time.Millisecond > ReportTTL {
			t.Fatalf("PTTL %s = %d %v, want about %v", k, ttl, err, ReportTTL)
		}
	}
	if err := raw.Do(ctx, raw.B().Del().Key(s.keys.reportKey("ch-1-3", "pod-b")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.CanaryReports(ctx, "ch-1-3"); err != nil || len(got) != 1 {
		t.Fatalf("reports after pod-b's expired = %q %v, want pod-a's only", got, err)
	}
	if got, err := s.CanaryReports(ctx, "ch-other"); err != nil || len(got) != 0 {
		t.Fatalf("reports of a window nobody reported on = %q %v", got, err)
	}
	if err := s.WriteCanaryReport(ctx, "a}b", "pod-a", []byte(`{}`)); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Fatalf("a window with a brace = %v, want bad-request", err)
	}
}
