package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// clock is a fake clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// identities maps bearer tokens to who they are.
var identities = map[string]varplane.Identity{
	"alice": {ID: "alice", Roles: []string{"dev"}},
	"bob":   {ID: "bob", Roles: []string{"reviewer"}},
	"carol": {ID: "carol", Roles: []string{"reviewer"}},
	"dave":  {ID: "dave"},
	"admin": {ID: "admin", Roles: []string{"*"}},
	// mallory may write (and say who she is) but not audit or read.
	"mallory": {ID: "mallory", Roles: []string{"reviewer"}},
	// reader is a consumer: it may only read (and say who it is), and it
	// is an instance identity (it files statuses and reports).
	"reader": {ID: "reader", Roles: []string{varplane.InstanceRole}},
	// viewer may only read, and is no instance.
	"viewer": {ID: "viewer"},
	// erin proposes changes and is an instance identity too.
	"erin": {ID: "erin", Roles: []string{"dev", varplane.InstanceRole}},
	// pod is an instance identity that may read below app. only.
	"pod": {ID: "pod", Roles: []string{varplane.InstanceRole}},
}

var authz = varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
	if a.Token == "" {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "token required")
	}
	id, ok := identities[a.Token]
	if !ok {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "unknown token")
	}
	if (id.ID == "reader" || id.ID == "viewer" || id.ID == "pod") && a.Kind != varplane.KindRead && a.Kind != varplane.KindIdentify {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "read only")
	}
	if id.ID == "mallory" && a.Kind != varplane.KindMutate && a.Kind != varplane.KindIdentify {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "mutate only")
	}
	if id.ID == "pod" && a.Kind == varplane.KindRead && !strings.HasPrefix(string(a.Scope), "app.") {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "app. only")
	}
	if a.Scope == "secret" && id.ID != "admin" {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "no access")
	}
	return id, nil
})

// rejectBad is a validator whose schema "strict" refuses a document with a
// "bad" member; its schema "loose" accepts every document. It lists them
// (IDs) as a schema registry does.
type rejectBad struct{}

func (rejectBad) Validate(id string, doc json.RawMessage) ([]varplane.Issue, error) {
	if id == "loose" { // "loose" accepts everything
		return nil, nil
	}
	if id != "strict" {
		return nil, varplane.ErrUnknownSchema
	}
	var m map[string]any
	_ = json.Unmarshal(doc, &m)
	if _, bad := m["bad"]; bad {
		return []varplane.Issue{{Code: "schema.forbidden", Path: "/bad", Message: "bad is not allowed"}}, nil
	}
	return nil, nil
}

func (rejectBad) IDs() []string { return []string{"loose", "strict"} }

type env struct {
	t      *testing.T
	store  varplane.Store
	engine *varplane.Engine
	svc    *control.Service
	clock  *clock
	srv    *httptest.Server
}

type envOpts struct {
	store     varplane.Store
	checks    []control.Check
	instances control.Instances
	expire    time.Duration
	detect    time.Duration
	// storeInstances gives the service control.StoreInstances of its
	// engine (the store of record's heartbeats), as serve does.
	storeInstances bool
	// owners are reservations of other subsystems, given to the engine
	// before the guard's.
	owners []varplane.Owner
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if o.store == nil {
		o.store = memory.New()
	}
	t.Cleanup(func() { _ = o.store.Close() })
	clk := newClock()
	guard := control.NewGuard()
	eng := varplane.NewEngine(o.store, varplane.Options{Validator: rejectBad{}, Now: clk.Now, Owners: append(o.owners, guard.Owners()...), Binder: guard})
	t.Cleanup(eng.Close)
	if o.storeInstances {
		o.instances = control.StoreInstances(eng)
	}
	svc := control.New(eng, guard, control.Options{Now: clk.Now, Checks: o.checks, Instances: o.instances, ExpireAfter: o.expire, DetectTimeout: o.detect})
	api := httpapi.NewHandler(eng, httpapi.Options{Base: "/v1", Authorizer: authz, Logger: slog.New(slog.DiscardHandler), Control: svc})
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &env{t: t, store: o.store, engine: eng, svc: svc, clock: clk, srv: srv}
}

// do sends a request as token and decodes a JSON answer into out (when
// not nil); it returns the status and the raw body.
func (e *env) do(method, path, token string, body any, out any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, b
}

// want fails unless status is wantStatus and, for an error, its code is
// wantCode.
func want(t *testing.T, what string, status int, body []byte, wantStatus int, wantCode varplane.Code) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("%s: status %d (%s), want %d", what, status, body, wantStatus)
	}
	if wantCode != "" {
		var eb struct {
			Code varplane.Code `json:"code"`
		}
		_ = json.Unmarshal(body, &eb)
		if eb.Code != wantCode {
			t.Fatalf("%s: code %q (%s), want %q", what, eb.Code, body, wantCode)
		}
	}
}

// publish activates doc on scope directly (no policy on it).
func (e *env) publish(scope varplane.Scope, doc string) varplane.Generation {
	e.t.Helper()
	st, err := e.store.State(context.Background(), scope)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.engine.Publish(context.Background(), varplane.PublishRequest{Scope: scope, Document: json.RawMessage(doc), ExpectedGeneration: st.Generation, Actor: "seed"})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Generation
}

func (e *env) propose(token string, scope varplane.Scope, base varplane.Generation, doc string) control.Change {
	e.t.Helper()
	var c control.Change
	st, b := e.do("POST", "/v1/control/changes", token, map[string]any{"scope": scope, "base": base, "document": json.RawMessage(doc), "note": "n"}, &c)
	want(e.t, "propose", st, b, http.StatusCreated, "")
	return c
}

func (e *env) act(token, id, op string, body any) (int, []byte, control.Change) {
	e.t.Helper()
	var c control.Change
	st, b := e.do("POST", "/v1/control/changes/"+id+":"+op, token, body, &c)
	return st, b, c
}

func (e *env) setPolicy(scope string, approvals int, roles []string, canary bool) {
	e.t.Helper()
	st, b := e.do("PUT", "/v1/control/policies/"+scope, "admin", map[string]any{"approvals": approvals, "roles": roles, "canary": canary}, nil)
	want(e.t, "put policy", st, b, http.StatusOK, "")
}

func headOf(t *testing.T, e *env, scope varplane.Scope) *varplane.ScopeState {
	t.Helper()
	st, err := e.store.State(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func isCode(err error, code varplane.Code) bool {
	var e *varplane.Error
	return errors.As(err, &e) && e.Code == code
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
