package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

func TestBatchRead(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	rev := p.create("a.b", `{"x":1}`)
	p.activate("a.b", rev, 0)
	grev := p.create("g", `{"g.k":2}`)
	p.activate("g", grev, 0)

	rec := p.do("GET", "/vars/batch?key=a.b&key=x.y&group=g&key=a.b", "")
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got struct {
		Items []map[string]any `json:"items"`
	}
	mustJSON(t, rec.Body.Bytes(), &got)
	want := []struct {
		scope, status, values string
	}{
		{"a.b", "ok", `{"a.b":{"x":1}}`},
		{"x.y", "no-head", "null"},
		{"g", "ok", `{"g.k":2}`},
		{"a.b", "ok", `{"a.b":{"x":1}}`},
	}
	if len(got.Items) != len(want) {
		t.Fatalf("items = %d, want %d: %s", len(got.Items), len(want), rec.Body)
	}
	for i, w := range want {
		it := got.Items[i]
		if it["scope"] != w.scope || it["status"] != w.status || jsonString(it["values"]) != w.values {
			t.Errorf("item %d = %v, want %+v", i, it, w)
		}
	}
	if it := got.Items[0]; it["revision"] != string(rev) || it["generation"] != 1.0 || it["effectiveAt"] == nil {
		t.Errorf("item 0 lacks read fields: %v", it)
	}
	if _, has := got.Items[1]["generation"]; has {
		t.Errorf("no-head item has a generation: %v", got.Items[1])
	}

	t.Run("limits", func(t *testing.T) {
		wantError(t, p.do("GET", "/vars/batch", ""), 400, varplane.CodeBadRequest)
		wantError(t, p.do("GET", "/vars/batch?key=a", ""), 400, varplane.CodeBadRequest)
		q := strings.Repeat("key=a.b&", httpapi.MaxBatchScopes)
		if rec := p.do("GET", "/vars/batch?"+q, ""); rec.Code != 200 {
			t.Errorf("%d scopes: status %d", httpapi.MaxBatchScopes, rec.Code)
		}
		wantError(t, p.do("GET", "/vars/batch?"+q+"group=g", ""), 400, varplane.CodeBadRequest)
	})
}

func TestWatchRoute(t *testing.T) {
	t.Run("not configured", func(t *testing.T) {
		p := newPlane(t, httpapi.Options{})
		wantError(t, p.do("GET", "/vars/watch?key=a.b", ""), 404, varplane.CodeNotFound)
	})
	t.Run("streams the parsed targets", func(t *testing.T) {
		p, _ := newPlaneHub(t, httpapi.Options{})
		for _, sc := range []string{"g", "a.b.x", "c.d", "e.f"} {
			p.activate(sc, p.create(sc, `{"`+sc+`.v":1}`), 0)
		}
		rec := p.watch("/vars/watch?group=g&prefix=a.b&key=c.d", 200*time.Millisecond)
		if rec.Code != 200 || !rec.Flushed {
			t.Fatalf("status %d flushed %v body %q", rec.Code, rec.Flushed, rec.Body)
		}
		var ids []string
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			if id, ok := strings.CutPrefix(line, "id: "); ok {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		if want := []string{"a.b.x@1", "c.d@1", "g@1"}; !slices.Equal(ids, want) {
			t.Errorf("events %v, want %v (a group, a prefix's descendant, a key; not e.f)", ids, want)
		}
		wantError(t, p.do("GET", "/vars/watch", ""), 400, varplane.CodeBadRequest)
		wantError(t, p.do("GET", "/vars/watch?prefix=a..b", ""), 400, varplane.CodeBadRequest)
	})
}

func TestHealthAndReadiness(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	if rec := p.do("GET", "/healthz", ""); rec.Code != 200 {
		t.Errorf("healthz = %d", rec.Code)
	}
	rec := p.do("GET", "/readyz", "")
	var ready httpapi.ReadyResponse
	mustJSON(t, rec.Body.Bytes(), &ready)
	if rec.Code != 200 || ready.Status != "ready" || ready.Checks["store"] != "ok" {
		t.Errorf("readyz = %d %+v", rec.Code, ready)
	}

	t.Run("ready hook", func(t *testing.T) {
		q := newPlane(t, httpapi.Options{Ready: func(context.Context) error {
			return errors.New("maxmemory-policy is allkeys-lru, want noeviction")
		}})
		rec := q.do("GET", "/readyz", "")
		var ready httpapi.ReadyResponse
		mustJSON(t, rec.Body.Bytes(), &ready)
		if rec.Code != 503 || ready.Status != "unavailable" || !strings.Contains(ready.Checks["ready"], "noeviction") {
			t.Errorf("readyz = %d %+v", rec.Code, ready)
		}
	})
	t.Run("closed store", func(t *testing.T) {
		st := memory.New()
		q := newPlaneOn(t, st, httpapi.Options{})
		_ = st.Close()
		if rec := q.do("GET", "/readyz", ""); rec.Code != 503 {
			t.Errorf("readyz on a closed store = %d %s", rec.Code, rec.Body)
		}
		if rec := q.do("GET", "/healthz", ""); rec.Code != 200 {
			t.Errorf("healthz on a closed store = %d", rec.Code)
		}
	})
	t.Run("ops routes can be disabled", func(t *testing.T) {
		q := newPlane(t, httpapi.Options{DisableOps: true})
		wantError(t, q.do("GET", "/healthz", ""), 404, varplane.CodeNotFound)
		rec := httptest.NewRecorder()
		q.h.OpsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != 200 {
			t.Errorf("OpsHandler healthz = %d", rec.Code)
		}
	})
}

func TestMetrics(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	p.h.SetSubscribers(func() int { return 7 })
	rev := p.create("a.b", `1`)
	p.activate("a.b", rev, 0)
	p.do("GET", "/vars?key=a.b", "")
	p.do("GET", "/vars?key=a.b", "", "If-None-Match", string(rev))
	p.do("GET", "/vars?key=zz.top", "")
	p.do("GET", "/no/such/route", "")
	p.do("POST", "/vars/admin/deactivate", `{"scope":"a.b","expectedGeneration":1}`)

	rec := p.do("GET", "/metrics", "")
	if rec.Code != 200 {
		t.Fatalf("metrics = %d", rec.Code)
	}
	text := rec.Body.String()
	for _, want := range []string{
		`varplane_http_requests_total{code="200",route="GET /vars"} 1`,
		`varplane_http_requests_total{code="304",route="GET /vars"} 1`,
		`varplane_http_requests_total{code="404",route="GET /vars"} 1`,
		`varplane_http_requests_total{code="404",route="unmatched"} 1`,
		`varplane_http_requests_total{code="201",route="POST /vars/admin/revisions"} 1`,
		`varplane_http_request_duration_seconds_count{route="GET /vars"} 3`,
		`varplane_commits_total{kind="activated"} 1`,
		`varplane_commits_total{kind="deactivated"} 1`,
		`varplane_store_commit_duration_seconds_count{op="activate"} 1`,
		`varplane_store_commit_duration_seconds_count{op="deactivate"} 1`,
		`varplane_scopes_with_head 0`,
		`varplane_subscribers 7`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(text, "zz.top") || strings.Contains(text, "/no/such") {
		t.Error("metrics carry request values as labels")
	}

	p.activate("a.b", rev, 2)
	if !strings.Contains(p.do("GET", "/metrics", "").Body.String(), "varplane_scopes_with_head 1") {
		t.Error("scopes_with_head did not follow the activation")
	}
}

func TestMountedUnderAPrefix(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	e := newEngineOn(t, st)
	inner := httpapi.NewHandler(e, httpapi.Options{Base: "/cnos/vars", Authorizer: varplane.AllowAll, Logger: quiet})
	t.Cleanup(inner.Close)
	plain := httpapi.NewHandler(e, httpapi.Options{Authorizer: varplane.AllowAll, Logger: quiet})
	t.Cleanup(plain.Close)

	mux := http.NewServeMux()
	mux.Handle("/cnos/vars", inner)
	mux.Handle("/cnos/vars/", inner)
	mux.HandleFunc("/app/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "app") })
	stripped := http.NewServeMux()
	stripped.Handle("/svc/", http.StripPrefix("/svc", plain))

	send := func(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
		t.Helper()
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, r))
		return rec
	}
	rec := send(mux, "POST", "/cnos/vars/admin/revisions", `{"scope":"a.b","document":{"on":true}}`)
	if rec.Code != 201 {
		t.Fatalf("create under prefix: %d %s", rec.Code, rec.Body)
	}
	var created varplane.CreateRevisionResult
	mustJSON(t, rec.Body.Bytes(), &created)
	if rec := send(mux, "POST", "/cnos/vars/admin/activate", jsonf(`{"scope":"a.b","revision":%q,"expectedGeneration":0}`, created.Revision)); rec.Code != 200 {
		t.Fatalf("activate under prefix: %d %s", rec.Code, rec.Body)
	}
	if rec := send(mux, "GET", "/cnos/vars?key=a.b", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"values":{"a.b":{"on":true}}`) {
		t.Errorf("read under prefix: %d %s", rec.Code, rec.Body)
	}
	if rec := send(mux, "GET", "/app/x", ""); rec.Body.String() != "app" {
		t.Errorf("host route: %q", rec.Body)
	}
	if rec := send(mux, "GET", "/cnos/vars/nope", ""); rec.Code != 404 {
		t.Errorf("unknown route under prefix: %d", rec.Code)
	}
	// The second plane shares the engine: it sees the same head.
	if rec := send(stripped, "GET", "/svc/vars?key=a.b", ""); rec.Code != 200 {
		t.Errorf("read through StripPrefix on the second plane: %d %s", rec.Code, rec.Body)
	}
	// Both planes count commits of the shared engine.
	for _, h := range []*httpapi.Handler{inner, plain} {
		if !strings.Contains(send(h, "GET", "/metrics", "").Body.String(), `varplane_commits_total{kind="activated"} 1`) {
			t.Errorf("plane %q did not count the commit", h.Base())
		}
	}
}

func TestRootBase(t *testing.T) {
	p := newPlane(t, httpapi.Options{Base: "/"})
	if p.h.Base() != "" {
		t.Fatalf("Base() = %q, want empty", p.h.Base())
	}
	rec := p.do("POST", "/admin/revisions", `{"scope":"a.b","document":1}`)
	if rec.Code != 201 {
		t.Fatalf("create at root: %d %s", rec.Code, rec.Body)
	}
	wantError(t, p.do("GET", "/?key=a.b", ""), 404, varplane.CodeNoHead)
}

// detailedStore is a memory store with a readiness rule and details of its
// own, as the shared stores and the read replica have.
type detailedStore struct {
	*memory.Store
	notReady error
}

func (s *detailedStore) Ready(context.Context) error { return s.notReady }
func (s *detailedStore) ReadyDetails() any {
	return map[string]any{"installedScopes": 3, "readOnly": true}
}

// TestReadyzAsksTheStore: /readyz runs the store's own readiness rule
// (varplane.Readier) and shows its details under its name
// (varplane.ReadyDetailer), in the handler's one body.
func TestReadyzAsksTheStore(t *testing.T) {
	st := &detailedStore{Store: memory.New()}
	t.Cleanup(func() { _ = st.Close() })
	p := newPlaneOn(t, st, httpapi.Options{})
	rec := p.do("GET", "/readyz", "")
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
		Memory map[string]any    `json:"memory"`
	}
	mustJSON(t, rec.Body.Bytes(), &body)
	if rec.Code != 200 || body.Status != "ready" || body.Checks["ready"] != "ok" || body.Memory["installedScopes"] != float64(3) {
		t.Fatalf("readyz = %d %s", rec.Code, rec.Body)
	}
	st.notReady = varplane.Errorf(varplane.CodeNotReady, "the root document is not installed yet")
	rec = p.do("GET", "/readyz", "")
	mustJSON(t, rec.Body.Bytes(), &body)
	if rec.Code != 503 || body.Status != "unavailable" || !strings.Contains(body.Checks["ready"], "root document") || body.Memory == nil {
		t.Fatalf("readyz of a store not ready = %d %s", rec.Code, rec.Body)
	}
}

// writeRefusingStore is a store that says whether it accepts writes.
type writeRefusingStore struct {
	varplane.Store
	refuse error
}

func (s *writeRefusingStore) WriteReady(context.Context) error { return s.refuse }

// TestReadyzFailsWhileWritesAreRefused: a store that still reads but
// refuses writes (a full disk, a failed fdatasync, a database gone
// read-only) makes /readyz fail, saying why; a store opened read-only
// (store-unsupported) is a replica and stays ready.
func TestReadyzFailsWhileWritesAreRefused(t *testing.T) {
	st := &writeRefusingStore{Store: memory.New()}
	t.Cleanup(func() { _ = st.Close() })
	p := newPlaneOn(t, st, httpapi.Options{})
	for _, tc := range []struct {
		name     string
		refuse   error
		code     int
		inChecks string
	}{
		{"accepts writes", nil, 200, "ok"},
		{"refuses writes", varplane.Unavailable(errors.New("file store: a write failed: no space left on device")), 503, "unavailable"},
		{"opened read-only", varplane.Errorf(varplane.CodeStoreUnsupported, "the store was opened read-only"), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st.refuse = tc.refuse
			rec := p.do("GET", "/readyz", "")
			var ready httpapi.ReadyResponse
			mustJSON(t, rec.Body.Bytes(), &ready)
			if rec.Code != tc.code || !strings.Contains(ready.Checks["writes"], tc.inChecks) || (tc.inChecks == "") != (ready.Checks["writes"] == "") {
				t.Fatalf("readyz = %d %s", rec.Code, rec.Body)
			}
		})
	}
}

// movingStore commits a new revision of scope right after each read of it:
// the worst case of a batch read racing with commits.
type movingStore struct {
	varplane.Store
	scope varplane.Scope
	on    bool
	n     int
}

func (m *movingStore) State(ctx context.Context, sc varplane.Scope) (*varplane.ScopeState, error) {
	st, err := m.Store.State(ctx, sc)
	if err != nil || sc != m.scope || !m.on {
		return st, err
	}
	m.n++
	ev := storetest.CreatedEvent(sc, json.RawMessage(fmt.Sprintf(`{"n":%d}`, m.n)))
	if _, err := m.Store.AppendPublish(ctx, ev, storetest.ActivatedEvent(sc, ev.Revision, st.Generation), st.Generation); err != nil {
		return nil, err
	}
	return st, nil
}

// TestBatchReadOneRevisionPerScope: a batch read that names a scope twice
// answers one revision of it in both places, however the scope moves while
// the request is served.
func TestBatchReadOneRevisionPerScope(t *testing.T) {
	st := &movingStore{Store: memory.New(), scope: "a.b"}
	p := newPlaneOn(t, st, httpapi.Options{})
	p.activate("a.b", p.create("a.b", `{"n":0}`), 0)
	st.on = true
	rec := p.do("GET", "/vars/batch?key=a.b&key=x.y&key=a.b", "")
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got struct {
		Items []map[string]any `json:"items"`
	}
	mustJSON(t, rec.Body.Bytes(), &got)
	if len(got.Items) != 3 || got.Items[0]["revision"] == nil || got.Items[0]["revision"] != got.Items[2]["revision"] {
		t.Fatalf("a scope named twice answered %v and %v; want one revision", got.Items[0]["revision"], got.Items[len(got.Items)-1]["revision"])
	}
}
