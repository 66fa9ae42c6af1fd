package client_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/control/controltest"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// TestChangeReports reads a window's reports through the SDK: the
// server's verdicts arrive as sent, and an error answer is the server's
// *varplane.Error.
func TestChangeReports(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	guard := control.NewGuard()
	e := varplane.NewEngine(st, varplane.Options{Owners: guard.Owners()})
	in := &controltest.Instances{}
	svc := control.New(e, guard, control.Options{Instances: in})
	api := httpapi.NewHandler(e, httpapi.Options{Base: "/", Authorizer: varplane.AllowAll, Logger: slog.New(slog.DiscardHandler), Control: svc})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); api.Close(); e.Close(); _ = st.Close() })
	a, err := client.NewAdmin(srv.URL, client.AdminOptions{Base: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var c control.Change
	if err := a.Call(ctx, http.MethodPost, "/control/changes", nil, map[string]any{"scope": "app.x", "base": 0, "document": json.RawMessage(`{"a":1}`)}, &c); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ChangeReports(ctx, c.ID); varplane.ErrorCode(err) != varplane.CodeNotFound {
		t.Fatalf("reports of a change without a window: %v, want not-found", err)
	}
	if err := a.Call(ctx, http.MethodPost, "/control/changes/"+c.ID+":canary", nil, map[string]any{"duration": "10m", "minInstances": 1}, &c); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	in.SetStatuses(control.InstanceStatus{Instance: "i1", At: now}, control.InstanceStatus{Instance: "i2", At: now})
	in.SetReports(c.Canary.ID, varplane.CanaryReport{Window: c.Canary.ID, Instance: "i1", FiledAs: "i1", Decoded: 3, At: now}, varplane.CanaryReport{Window: "elsewhere", Instance: "i3", FiledAs: "i3"})
	got, err := a.ChangeReports(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Change != c.ID || got.Window.ID != c.Canary.ID || got.Window.State != control.WindowOpen || got.Window.MinInstances != 1 || got.Window.ClosesAt.IsZero() {
		t.Fatalf("window = %+v", got.Window)
	}
	if len(got.Reports) != 2 || got.Reports[0].Decoded != 3 || got.Reports[0].Doubtful || !got.Reports[1].Doubtful || got.Reports[1].Doubt == "" {
		t.Fatalf("reports = %+v", got.Reports)
	}
	if len(got.Unreported) != 1 || got.Unreported[0] != "i2" {
		t.Fatalf("unreported = %v, want [i2]", got.Unreported)
	}

	// A delete answers 204 with no body: Call takes it with out nil.
	var p control.Policy
	if err := a.Call(ctx, http.MethodPut, "/control/policies/app", nil, map[string]any{"approvals": 1}, &p); err != nil || p.Scope != "app" {
		t.Fatalf("put policy: %+v %v", p, err)
	}
	if err := a.Call(ctx, http.MethodDelete, "/control/policies/app", nil, nil, nil); err != nil {
		t.Fatalf("delete policy: %v", err)
	}
	if err := a.Call(ctx, http.MethodDelete, "/control/policies/app", nil, nil, nil); varplane.ErrorCode(err) != varplane.CodeNotFound {
		t.Fatalf("delete again: %v, want not-found", err)
	}
}
