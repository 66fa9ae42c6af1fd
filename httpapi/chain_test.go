package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

// armedStore is a memory store whose reads panic once armed, so that every
// kind of route (each reads the store) panics inside its own code.
type armedStore struct {
	*memory.Store
	armed atomic.Bool
}

func (s *armedStore) State(ctx context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	if s.armed.Load() {
		panic("armed store: State")
	}
	return s.Store.State(ctx, scope)
}

// fullHandler is a handler with every service of the route table (the
// watch, control, access, the values service) and a mounted handler, over
// an armed store; logs go to the returned buffer.
func fullHandler(t *testing.T) (*httpapi.Handler, *armedStore, *bytes.Buffer) {
	t.Helper()
	st := &armedStore{Store: memory.New()}
	t.Cleanup(func() { _ = st.Close() })
	guard := control.NewGuard()
	e := varplane.NewEngine(st, varplane.Options{Owners: append(guard.Owners(), access.Owner, config.Owner)})
	t.Cleanup(e.Close)
	hub := push.New(e, push.Options{})
	t.Cleanup(hub.Close)
	dep := valuesDeployment(t)
	values, err := config.NewService(e, dep)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h := httpapi.NewHandler(e, httpapi.Options{
		Authorizer: varplane.AllowAll,
		Logger:     slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Hub:        hub,
		Control:    control.New(e, guard, control.Options{Instances: control.StoreInstances(e)}),
		Access:     access.NewService(e),
		Values:     values,
	})
	t.Cleanup(h.Close)
	h.Mount("/mounted/", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("mounted handler") }))
	return h, st, &logs
}

// serveCanceled sends a request whose context has already ended, so that a
// stream route answers and returns at once.
func serveCanceled(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestPanicInEveryKindOfRoute: a panic in a route of each kind (the var
// API, the watch, control, instance ingest, the values service, access
// tokens, a mounted handler) is recovered, logged with the request's path,
// answered 500 internal with nothing of the panic, and counted under its
// route.
func TestPanicInEveryKindOfRoute(t *testing.T) {
	h, st, logs := fullHandler(t)
	st.armed.Store(true)
	for _, c := range []struct{ kind, target, route string }{
		{"var API", "/vars?key=a.b", "GET /vars"},
		{"watch", "/vars/watch?key=a.b", "GET /vars/watch"},
		{"control", "/vars/control/documents/a.b", "GET /vars/control/documents/{scope}"},
		{"instance ingest", "/vars/control/windows", "GET /vars/control/windows"},
		{"values", "/configuration/values/", "GET /configuration/values/{$}"},
		{"access", "/vars/access/tokens", "GET /vars/access/tokens"},
		{"mounted", "/mounted/x", "/mounted/"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			logs.Reset()
			rec := serveCanceled(h, "GET", c.target, "")
			e := wire.ParseError(rec.Code, rec.Body.Bytes())
			if rec.Code != http.StatusInternalServerError || e.Code != varplane.CodeInternal || strings.Contains(rec.Body.String(), "armed") || strings.Contains(rec.Body.String(), "mounted handler") {
				t.Errorf("answer %d %s, want 500 internal without the panic", rec.Code, rec.Body)
			}
			log := logs.String()
			path, _, _ := strings.Cut(c.target, "?")
			if !strings.Contains(log, `"msg":"handler panicked"`) || !strings.Contains(log, `"path":"`+path+`"`) {
				t.Errorf("log lacks the panic of %s:\n%s", path, log)
			}
			if !strings.Contains(log, `"route":"`+c.route+`"`) || !strings.Contains(log, `"status":500`) {
				t.Errorf("log lacks the request line of route %q:\n%s", c.route, log)
			}
			if got := scrape(t, h, c.route, "500"); got == 0 {
				t.Errorf("no 500 counted under route %q", c.route)
			}
		})
	}
}

// TestEveryRouteInMetrics: a request to each registered route is counted
// under its pattern in varplane_http_requests_total, whatever it answers.
func TestEveryRouteInMetrics(t *testing.T) {
	h, _, _ := fullHandler(t)
	wildcard := regexp.MustCompile(`\{[^}]*\}`)
	routes := httpapi.RoutePatterns(h)
	for _, pattern := range routes {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "GET", pattern
		}
		if strings.HasPrefix(path, "/mounted/") {
			continue // it panics: TestPanicInEveryKindOfRoute
		}
		path = strings.ReplaceAll(path, "{$}", "")
		path = wildcard.ReplaceAllString(path, "x")
		body := ""
		if method == "POST" || method == "PUT" {
			body = "{}"
		}
		serveCanceled(h, method, path, body)
	}
	for _, pattern := range routes {
		if strings.HasPrefix(pattern, "/mounted/") {
			continue
		}
		if scrape(t, h, pattern, "") == 0 {
			t.Errorf("route %q is not in the request metrics", pattern)
		}
	}
	if len(routes) < 40 {
		t.Errorf("%d routes registered; the full table has more", len(routes))
	}
}

// scrape returns the number of varplane_http_requests_total series of
// route (with code, when given) on /metrics.
func scrape(t *testing.T, h *httpapi.Handler, route, code string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := `varplane_http_requests_total{code="` + code
	n := 0
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "varplane_http_requests_total{") && strings.Contains(line, `route="`+route+`"`) &&
			(code == "" || strings.HasPrefix(line, want+`"`)) {
			n++
		}
	}
	return n
}
