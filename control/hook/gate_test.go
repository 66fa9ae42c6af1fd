package hook_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/control/controltest"
	"github.com/varplane/varplane/control/hook"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/memory"
)

// TestGateVerdicts: a webhook asked as a rollout's gate passes with no
// issue and fails with issues (its evidence); a Prometheus query result
// passes when empty and fails naming each firing series; another status
// or body brings no verdict (an error: the gate stays pending).
func TestGateVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		pass, err  bool
		evidence   string
	}{
		{"no issue", `{"issues":[]}`, 200, true, false, ""},
		{"issues", `{"issues":[{"code":"slo","message":"error rate 4%"}]}`, 200, false, false, "error rate 4%"},
		{"prometheus quiet", `{"status":"success","data":{"resultType":"vector","result":[]}}`, 200, true, false, ""},
		{"prometheus firing", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"HighErrorRate"},"value":[1,"1"]}]}}`, 200, false, false, "HighErrorRate"},
		{"server error", `oops`, 500, false, true, ""},
		{"not a verdict", `{"verdict":"ok"}`, 200, false, true, ""},
		{"huge", `{"issues":[],"pad":"` + strings.Repeat("x", hook.MaxAnswerBytes) + `"}`, 200, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got hook.GateRequest
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(b, &got)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			chk, err := hook.New("slo", srv.URL, hook.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			pass, ev, err := chk.Gate(context.Background(), control.GateInput{Rollout: "ro-1", Scope: "app.flags", Step: 1, Steps: 2, Share: 5000})
			if (err != nil) != tc.err || pass != tc.pass || !strings.Contains(strings.Join(ev, "\n"), tc.evidence) {
				t.Fatalf("Gate = %v %q %v", pass, ev, err)
			}
			if got.Check != "slo" || got.Rollout != "ro-1" || got.Scope != "app.flags" || got.Share != 5000 {
				t.Fatalf("the webhook was asked %+v", got)
			}
		})
	}
}

// TestRolloutStoppedByCheck: a rollout whose external check answers fail
// during a bake is rolled back by itself, the check's evidence recorded
// on the rollback event; while the check answers pass it goes on.
func TestRolloutStoppedByCheck(t *testing.T) {
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"CheckoutErrors"}}]}}`)
			return
		}
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	defer srv.Close()
	chk, err := hook.New("alerts", srv.URL, hook.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	guard := control.NewGuard()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	eng := varplane.NewEngine(st, varplane.Options{Owners: guard.Owners(), Now: clock})
	t.Cleanup(eng.Close)
	svc := control.New(eng, guard, control.Options{Now: clock, Instances: &controltest.Instances{}, Gates: map[string]control.Gate{"alerts": chk}})
	ctx := context.Background()
	if _, err := eng.Publish(ctx, varplane.PublishRequest{Scope: "app.flags", Document: json.RawMessage(`{"v":1}`), Actor: "seed"}); err != nil {
		t.Fatal(err)
	}
	alice, bob := varplane.Identity{ID: "alice"}, varplane.Identity{ID: "bob"}
	c, err := svc.Propose(ctx, alice, control.ProposeRequest{Scope: "app.flags", Base: 1, Document: json.RawMessage(`{"v":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Approve(ctx, bob, c.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.StartRollout(ctx, alice, c.ID, control.StartRolloutRequest{Strategy: rollout.Strategy{Kind: rollout.KindLinear}, Gates: control.Gates{Checks: []string{"nope"}}}); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Fatalf("an unknown check: %v", err)
	}
	s, _ := rollout.Linear(3, time.Minute)
	r, err := svc.StartRollout(ctx, alice, c.ID, control.StartRolloutRequest{Strategy: s, Gates: control.Gates{Checks: []string{"alerts"}}})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if err := svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if got, _ := svc.GetRollout(ctx, r.ID); got.Step != 1 {
		t.Fatalf("a passing check held the rollout: %+v", got)
	}
	failing.Store(true)
	if err := svc.RolloutPass(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	got, err := svc.GetRollout(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := got.Events[len(got.Events)-1]
	if got.State != varplane.RolloutRolledBack || last.Kind != "rollback" || !strings.Contains(last.Note, "check:alerts") || !strings.Contains(strings.Join(last.Evidence[2].Evidence, " "), "CheckoutErrors") {
		t.Fatalf("after the check fired: %s %+v", got.State, last)
	}
	if h, _ := st.State(ctx, "app.flags"); h.Generation != 1 {
		t.Fatalf("head %d after a rollback", h.Generation)
	}
}
