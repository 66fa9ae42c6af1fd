package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/postgres/pgtest"
)

// canaryAuthz: alice and bob write; the cons-* tokens are consumers that
// may only read (and say who they are), as a narrowed read token would,
// and are instance identities (they file statuses and reports).
var canaryAuthz = varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
	switch {
	case a.Token == "":
		return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "token required")
	case a.Token == "alice" || a.Token == "bob":
		return varplane.Identity{ID: a.Token, Roles: []string{"*"}}, nil
	case strings.HasPrefix(a.Token, "cons-"):
		if a.Kind != varplane.KindRead && a.Kind != varplane.KindIdentify {
			return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "read only")
		}
		return varplane.Identity{ID: a.Token, Roles: []string{varplane.InstanceRole}}, nil
	}
	return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "unknown token")
})

// canaryServer is a varplane server in process over st: the var API and
// the control API, as serve mounts them.
type canaryServer struct {
	t      *testing.T
	engine *varplane.Engine
	svc    *control.Service
	srv    *httptest.Server
}

func startCanaryServer(t *testing.T, st varplane.Store) *canaryServer {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	guard := control.NewGuard()
	e := varplane.NewEngine(st, varplane.Options{Owners: guard.Owners()})
	svc := control.New(e, guard, control.Options{Logger: quiet, Instances: control.StoreInstances(e)})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: canaryAuthz, DisableOps: true, Logger: quiet, Control: svc})
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.Close()
		api.Close()
		e.Close()
		_ = st.Close()
	})
	return &canaryServer{t: t, engine: e, svc: svc, srv: srv}
}

func (s *canaryServer) publish(scope varplane.Scope, doc string) {
	s.t.Helper()
	ctx := context.Background()
	st, err := s.engine.Store().State(ctx, scope)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.engine.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: json.RawMessage(doc), ExpectedGeneration: st.Generation, Actor: "seed"}); err != nil {
		s.t.Fatal(err)
	}
}

// call sends a control request as token and decodes the answer into out.
func (s *canaryServer) call(method, path, token string, body any, out any) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, s.srv.URL+"/vars/control"+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&e)
		s.t.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, e)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			s.t.Fatal(err)
		}
	}
}

// openWindow proposes doc on scope at base as alice and opens a window.
func (s *canaryServer) openWindow(scope varplane.Scope, base varplane.Generation, doc, d string, minInstances int) control.Change {
	s.t.Helper()
	var c control.Change
	s.call("POST", "/changes", "alice", map[string]any{"scope": scope, "base": base, "document": json.RawMessage(doc)}, &c)
	if c.State != control.StateChecked {
		s.t.Fatalf("proposed change = %+v, want checked", c)
	}
	s.call("POST", "/changes/"+c.ID+":canary", "alice", map[string]any{"duration": d, "minInstances": minInstances}, &c)
	return c
}

// pass runs the canary pass and returns the change.
func (s *canaryServer) pass(id string) *control.Change {
	s.t.Helper()
	if err := s.svc.CanaryPass(context.Background(), "pass"); err != nil {
		s.t.Fatal(err)
	}
	c, err := s.svc.Get(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

func canaryClient(t *testing.T, s *canaryServer, token, id string, interval time.Duration, eval func(context.Context, client.Value, client.Value) error) *client.Client {
	t.Helper()
	c, err := client.New(s.srv.URL, client.Options{Token: token, Transport: client.TransportPoll, PollInterval: 20 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Canary: &client.CanaryOptions{InstanceID: id, Interval: interval, Evaluate: eval}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register("app.flags"); err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Fetch(ctx, "app.flags"); err != nil {
		t.Fatal(err)
	}
	return c
}

type flags struct {
	N int `json:"n"`
}

// runCanaryE2E: two SDK consumers take part in the windows of a server on
// st. A clean window closes only once both reported; a candidate error
// from one consumer's hook blocks the next one.
func runCanaryE2E(t *testing.T, st varplane.Store) {
	s := startCanaryServer(t, st)
	s.publish("app.flags", `{"n":1}`)

	// a beats on its own every 20ms; b beats once at start, then only when
	// told, so the window sees a fresh b that has not reported.
	var mu sync.Mutex
	var seen []string // what b's hook saw: candidate n / current n
	hook := func(_ context.Context, cand, cur client.Value) error {
		var c, k flags
		if err := json.Unmarshal(cand.Raw, &c); err != nil {
			return err
		}
		if err := json.Unmarshal(cur.Raw, &k); err != nil {
			return err
		}
		mu.Lock()
		seen = append(seen, string(cand.Raw)+"/"+string(cur.Raw))
		mu.Unlock()
		if c.N >= 3 {
			return errors.New("n must stay below 3")
		}
		return nil
	}
	a := canaryClient(t, s, "cons-a", "cons-a", 20*time.Millisecond, nil)
	b := canaryClient(t, s, "cons-b", "cons-b:pod-1", time.Hour, hook)
	waitFor(t, "both consumers' first heartbeat", func() bool {
		return a.CanaryStats().Beats > 0 && b.CanaryStats().Beats > 0
	})

	c := s.openWindow("app.flags", 1, `{"n":2}`, "300ms", 2)
	waitFor(t, "a's report", func() bool { return reportsOf(s, c.Canary.ID)["cons-a"] != nil })
	time.Sleep(350 * time.Millisecond) // past the window's duration
	// b has a fresh status (its first beat) and no report: the window stays
	// open, however long a's reports have been in.
	got := s.pass(c.ID)
	if got.State != control.StateCanary || got.Canary.State != control.WindowOpen || !strings.Contains(got.Canary.Reason, `"cons-b:pod-1" has a fresh status but no report`) {
		t.Fatalf("before b reported: %s, window %+v; want canary, open waiting for cons-b:pod-1", got.State, got.Canary)
	}
	if err := b.Beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	var br struct {
		Window, Instance string
		Decoded, Errors  int64
		CandidateError   string
	}
	if err := json.Unmarshal(reportsOf(s, c.Canary.ID)["cons-b:pod-1"], &br); err != nil || br.Window != c.Canary.ID || br.Instance != "cons-b:pod-1" || br.Decoded != 1 || br.Errors != 0 || br.CandidateError != "" {
		t.Fatalf("b's report = %+v, %v; want one clean decode", br, err)
	}
	// Both reported cleanly: the window passes.
	got = s.pass(c.ID)
	if got.State != control.StateChecked || got.Canary.State != control.WindowPassed {
		t.Fatalf("after both reported: %s, window %+v; want checked, passed", got.State, got.Canary)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != `{"n":2}/{"n":1}` {
		t.Fatalf("b's hook saw %q, want the candidate beside the held value once", seen)
	}
	mu.Unlock()

	// A candidate error from b's hook blocks the window.
	c3 := s.openWindow("app.flags", 1, `{"n":3}`, "1h", 2)
	if err := b.Beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = s.pass(c3.ID)
	if got.State != control.StateFailed || got.Canary.State != control.WindowBlocked || !strings.Contains(got.Canary.Reason, "cons-b:pod-1") {
		t.Fatalf("after b's hook refused the candidate: %s, window %+v; want failed, blocked by cons-b:pod-1", got.State, got.Canary)
	}
	if r := string(reportsOf(s, c3.Canary.ID)["cons-b:pod-1"]); !strings.Contains(r, "fails evaluation: n must stay below 3") {
		t.Fatalf("b's report of the blocked window = %s, want its hook's error", r)
	}
	// The window is unstaged: the consumers drop its report.
	var ws struct {
		Windows []json.RawMessage `json:"windows"`
	}
	s.call("GET", "/windows", "cons-a", nil, &ws)
	if len(ws.Windows) != 0 {
		t.Fatalf("open windows after every one closed: %s", ws.Windows)
	}
}

// reportsOf reads the reports of window from the store of record.
func reportsOf(s *canaryServer, window string) map[string][]byte {
	r, err := s.engine.Store().(interface {
		CanaryReports(context.Context, string) (map[string][]byte, error)
	}).CanaryReports(context.Background(), window)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// TestCanaryWithSDKConsumersOnFileStore: the end-to-end canary test on a
// file-store server.
func TestCanaryWithSDKConsumersOnFileStore(t *testing.T) {
	st, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log"), file.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCanaryE2E(t, st)
}

// TestCanaryWithSDKConsumersOnPostgres: the same on PostgreSQL (skipped
// when it does not answer, unless VARPLANE_REQUIRE_SERVICES is set).
func TestCanaryWithSDKConsumersOnPostgres(t *testing.T) {
	u := pgtest.SchemaURL(t, "canary", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, u, postgres.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCanaryE2E(t, st)
}

// TestCanaryOptions: an InstanceID that could not be filed is refused by
// New, Beat needs Options.Canary, and an id of another identity is refused
// by the server (nothing filed, the heartbeat counted as failed).
func TestCanaryOptions(t *testing.T) {
	for _, id := range []string{"", "a b", "a/b", "a{b}", strings.Repeat("x", varplane.MaxInstanceID+1)} {
		if _, err := client.New("http://127.0.0.1:1", client.Options{Canary: &client.CanaryOptions{InstanceID: id}}); err == nil {
			t.Errorf("New with InstanceID %q: no error", id)
		}
	}
	plain, err := client.New("http://127.0.0.1:1", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Beat(context.Background()); !errors.Is(err, client.ErrNoCanary) {
		t.Fatalf("Beat without Options.Canary = %v, want ErrNoCanary", err)
	}

	st, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log"), file.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := startCanaryServer(t, st)
	s.publish("app.flags", `{"n":1}`)
	forger, err := client.New(s.srv.URL, client.Options{Token: "cons-a", Transport: client.TransportNone, Logger: slog.New(slog.DiscardHandler),
		Canary: &client.CanaryOptions{InstanceID: "cons-b:pod-1", Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	err = forger.Beat(context.Background())
	if varplane.ErrorCode(err) != varplane.CodeForbidden {
		t.Fatalf("a beat under another identity's id = %v, want forbidden", err)
	}
	if forger.CanaryStats().BeatErrors != 1 {
		t.Fatalf("stats = %+v, want one failed beat", forger.CanaryStats())
	}
	list, err := control.StoreInstances(s.engine).Statuses(context.Background())
	if err != nil || len(list) != 0 {
		t.Fatalf("statuses after a forged beat = %+v, %v; want none", list, err)
	}
}
