package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/ui"
)

// strictSchemas is a validator whose schema "strict" refuses a document
// holding a member "bad" anywhere at its top level (or in a group's key
// documents), and whose schema "loose" accepts every document.
type strictSchemas struct{}

func (strictSchemas) Validate(id string, doc json.RawMessage) ([]varplane.Issue, error) {
	switch id {
	case "loose":
		return nil, nil
	case "strict":
	default:
		return nil, varplane.ErrUnknownSchema
	}
	if strings.Contains(string(doc), `"bad"`) {
		return []varplane.Issue{{Code: "schema.forbidden", Path: "/bad", Message: "bad is not allowed"}}, nil
	}
	return nil, nil
}

func (strictSchemas) IDs() []string { return []string{"loose", "strict"} }

// promisePlane is the handler with every feature on, as serve builds it:
// the owners of the reserved scopes, the schema bindings (the control
// service's guard as the engine's binder), the control API with the
// instances' heartbeats and reports, OFREP, the access API, the values
// service and the watch; the authorizer is the tokens file combined with
// the store's principals.
type promisePlane struct {
	t     *testing.T
	store varplane.Store
	h     *httpapi.Handler
}

// The identities of promisePlane: root and writer hold every kind, scope
// and role (and the instance role, given by name); reader may only read
// and holds no role the server checks.
const (
	rootToken   = "root-token"
	writerToken = "writer-token"
	readerToken = "reader-token"
	forgedToken = "vpt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
)

func newPromisePlane(t *testing.T) *promisePlane {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	return newPromisePlaneOn(t, st)
}

// newPromisePlaneOn is newPromisePlane over st.
func newPromisePlaneOn(t *testing.T, st varplane.Store) *promisePlane {
	t.Helper()
	guard := control.NewGuard()
	e := varplane.NewEngine(st, varplane.Options{Logger: quiet, Validator: strictSchemas{},
		Owners: append(guard.Owners(), access.Owner, config.Owner), Binder: guard})
	t.Cleanup(e.Close)
	hub := push.New(e, push.Options{Logger: quiet})
	t.Cleanup(hub.Close)
	values, err := config.NewService(e, valuesDeployment(t))
	if err != nil {
		t.Fatal(err)
	}
	file, err := access.Scoped([]access.Grant{
		{Token: rootToken, ID: "root", Roles: []string{"*", varplane.InstanceRole}},
		{Token: writerToken, ID: "writer", Roles: []string{"*", varplane.InstanceRole}},
		{Token: readerToken, ID: "reader", Kinds: []varplane.Kind{varplane.KindRead}, Roles: []string{"viewer"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	authz := access.Combine(file, access.NewAuthorizer(st))
	h := httpapi.NewHandler(e, httpapi.Options{
		Authorizer: authz,
		Logger:     quiet,
		Hub:        hub,
		Control:    control.New(e, guard, control.Options{Logger: quiet, Instances: control.StoreInstances(e)}),
		Access:     access.NewService(e),
		Values:     values,
	})
	t.Cleanup(h.Close)
	// The handlers serve mounts beside the route table.
	h.Mount("/ui/", ui.New(ui.Options{API: h, Base: "/vars", Prefix: "/ui", Authorizer: authz, Limits: e.Limits(), Logger: quiet}))
	h.Mount("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	h.Mount("/.configuration", ui.ComponentsRedirect("/ui"))
	rpcPath, connect := rpc.NewHandlerWith(hub, authz, rpc.HandlerOptions{Logger: quiet})
	h.Mount(rpcPath, connect)
	return &promisePlane{t: t, store: st, h: h}
}

// send sends one request with token (none when empty) and a JSON body
// (none when empty), and decodes a JSON answer into a map.
func (p *promisePlane) send(token, method, target, body string) (int, map[string]any, string) {
	p.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, req)
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Code, m, rec.Body.String()
}

// must sends as root and fails the test unless the answer is 2xx; it
// returns the decoded answer.
func (p *promisePlane) must(method, target, body string) map[string]any {
	p.t.Helper()
	st, m, raw := p.send(rootToken, method, target, body)
	if st/100 != 2 {
		p.t.Fatalf("%s %s: %d %s", method, target, st, raw)
	}
	return m
}

// storeView is everything the store holds that a request could change:
// every scope's state and events (without bodies), and the instances'
// statuses and canary reports.
type storeView struct {
	States   map[varplane.Scope]varplane.ScopeState
	Events   map[varplane.Scope][]varplane.Event
	Statuses map[string]string
	Reports  map[string]map[string]string
}

func (p *promisePlane) view(windows ...string) storeView {
	p.t.Helper()
	return viewOf(p.t, p.store, windows...)
}

// viewOf is what st holds (see storeView).
func viewOf(t *testing.T, st varplane.Store, windows ...string) storeView {
	t.Helper()
	ctx := context.Background()
	v := storeView{States: map[varplane.Scope]varplane.ScopeState{}, Events: map[varplane.Scope][]varplane.Event{},
		Statuses: map[string]string{}, Reports: map[string]map[string]string{}}
	scopes, err := st.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scopes {
		state, err := st.State(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		v.States[s] = *state
		evs, err := st.EventHistory(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			evs[i].Document = nil
		}
		v.Events[s] = evs
	}
	statuses, ok := varplane.StoreAs[varplane.StatusReader](st)
	reports, ok2 := varplane.StoreAs[varplane.ReportReader](st)
	if !ok || !ok2 {
		t.Fatalf("store %s keeps no statuses or reports", st.Name())
	}
	sts, err := statuses.InstanceStatuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range sts {
		v.Statuses[id] = string(b)
	}
	for _, w := range windows {
		reps, err := reports.CanaryReports(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		v.Reports[w] = map[string]string{}
		for id, b := range reps {
			v.Reports[w][id] = string(b)
		}
	}
	return v
}

// unchanged fails unless after holds exactly what before held, but for
// the record of a refused document (a scope's last rejection, which moves
// its audit chain), which must name actor.
func unchanged(t *testing.T, what string, before, after storeView, actor string) {
	t.Helper()
	for s, evs := range after.Events {
		kept := evs[:min(len(before.Events[s]), len(evs))]
		for _, ev := range evs[len(kept):] {
			if ev.Kind != varplane.EventRejected {
				kept = append(kept, ev)
			} else if ev.Actor != actor || actor == "" {
				t.Errorf("%s: the rejection recorded in %s names %q, want %q", what, s, ev.Actor, actor)
			}
		}
		after.Events[s] = kept
	}
	for s, st := range after.States {
		if lr := st.LastRejected; lr != nil && (before.States[s].LastRejected == nil || lr.Seq != before.States[s].LastRejected.Seq) {
			if lr.Actor != actor || actor == "" {
				t.Errorf("%s: the rejection recorded in %s names %q, want %q", what, s, lr.Actor, actor)
			}
		}
		prev, had := before.States[s]
		if !had && st.Generation == 0 && st.Head == nil && len(after.Events[s]) == 0 {
			delete(after.States, s) // only a rejection recorded
			delete(after.Events, s)
			continue
		}
		st.LastRejected, st.Chain = prev.LastRejected, prev.Chain
		after.States[s] = st
	}
	if !reflect.DeepEqual(before, after) {
		b, _ := json.Marshal(before)
		a, _ := json.Marshal(after)
		t.Errorf("%s changed what is stored:\nbefore %s\nafter  %s", what, b, a)
	}
}

// written returns the events after holds beyond before, by scope.
func written(before, after storeView) map[varplane.Scope][]varplane.Event {
	out := map[varplane.Scope][]varplane.Event{}
	for s, evs := range after.Events {
		if n := len(before.Events[s]); len(evs) > n {
			out[s] = evs[n:]
		}
	}
	return out
}

// writeCase is one way to write through a route of the table. Setup
// prepares what the write needs (as root) and returns the request's
// target and body. The write succeeds as writer; it is refused without a
// token, with a forged one, and with reader's (which holds neither the
// kind nor the role); invalid, when set, is a body whose document a bound
// schema rejects (422 revision-invalid, nothing stored). Audit names the
// scope whose history records the write (with writer as its actor), or
// telemetry is set: an instance's status or report, which is kept under
// the caller's identity, not in a history.
type writeCase struct {
	name          string
	setup         func(p *promisePlane) (target, body string)
	invalid       string
	invalidChange bool
	audit         varplane.Scope
	telemetry     bool
	// window is the canary window whose reports the view includes.
	window func(p *promisePlane) string
}

// readCase is a route that answers a non-GET method without writing (a
// validation, an evaluation, a batch fetch): nothing stored changes,
// whoever asks.
type readCase struct {
	target, body string
}

// promiseRoutes is the table the promises are checked on: every non-GET
// route of the handler has a write case or a read case (TestWritePromises
// fails for a route without one). Mounted handlers (the console, the RPC
// transport, the values page) decide for themselves and are covered by
// their own tests; the console writes through this handler's routes.
var promiseWrites = map[string][]writeCase{
	"POST /vars/admin/revisions": {{name: "create",
		setup: func(*promisePlane) (string, string) {
			return "/vars/admin/revisions", `{"scope":"app.a","document":{"x":1}}`
		},
		invalid: `{"scope":"app.a","document":{"bad":1}}`, audit: "app.a"}},
	"POST /vars/admin/publish": {{name: "publish",
		setup: func(*promisePlane) (string, string) {
			return "/vars/admin/publish", `{"scope":"app.a","document":{"x":1},"expectedGeneration":0}`
		},
		invalid: `{"scope":"app.a","document":{"bad":1},"expectedGeneration":0}`, audit: "app.a"},
		{name: "publish a group",
			setup: func(*promisePlane) (string, string) {
				return "/vars/admin/publish", `{"scope":"app","document":{"app.k":{"x":1}},"expectedGeneration":0}`
			},
			invalid: `{"scope":"app","document":{"app.k":{"bad":1}},"expectedGeneration":0}`, audit: "app"}},
	"POST /vars/admin/activate": {{name: "activate",
		setup: func(p *promisePlane) (string, string) {
			m := p.must("POST", "/vars/admin/revisions", `{"scope":"app.a","document":{"x":1}}`)
			return "/vars/admin/activate", fmt.Sprintf(`{"scope":"app.a","revision":%q,"expectedGeneration":0}`, m["revision"])
		}, audit: "app.a"}},
	"POST /vars/admin/deactivate": {{name: "deactivate",
		setup: func(p *promisePlane) (string, string) {
			p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":1},"expectedGeneration":0}`)
			return "/vars/admin/deactivate", `{"scope":"app.a","expectedGeneration":1}`
		}, audit: "app.a"}},
	"POST /vars/admin/rollback": {{name: "rollback",
		setup: func(p *promisePlane) (string, string) {
			p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":1},"expectedGeneration":0}`)
			p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":2},"expectedGeneration":1}`)
			return "/vars/admin/rollback", `{"scope":"app.a","expectedGeneration":2}`
		}, audit: "app.a"}},
	"PUT /vars/admin/schemas/bindings/{scope}": {{name: "bind",
		setup: func(*promisePlane) (string, string) {
			return "/vars/admin/schemas/bindings/other", `{"schemaId":"strict"}`
		},
		audit: "varplane-control.schemas"}},
	"DELETE /vars/admin/schemas/bindings/{scope}": {{name: "unbind",
		setup: func(p *promisePlane) (string, string) {
			p.must("PUT", "/vars/admin/schemas/bindings/other", `{"schemaId":"strict"}`)
			return "/vars/admin/schemas/bindings/other", ""
		}, audit: "varplane-control.schemas"}},
	"POST /vars/control/documents/{scope}": {{name: "propose a rollback",
		setup: func(p *promisePlane) (string, string) {
			p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":1},"expectedGeneration":0}`)
			p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":2},"expectedGeneration":1}`)
			return "/vars/control/documents/app.a:rollback", `{"revision":1}`
		}, audit: "varplane-control.change."}},
	"POST /vars/control/changes": {{name: "propose",
		setup: func(*promisePlane) (string, string) {
			return "/vars/control/changes", `{"scope":"app.a","base":0,"document":{"x":1}}`
		},
		invalid: `{"scope":"app.a","base":0,"document":{"bad":1}}`, invalidChange: true, audit: "varplane-control.change."}},
	"POST /vars/control/changes/{id}": {
		transition("approve", `{"note":"ok"}`, nil, "varplane-control.change."),
		transition("reject", `{"note":"no"}`, nil, "varplane-control.change."),
		transition("publish", "", nil, "app.a"),
		transition("canary", `{"duration":"10m","minInstances":1}`, nil, "varplane-control.change."),
		{name: "withdraw", // only the author withdraws: writer proposes, then withdraws
			setup: func(p *promisePlane) (string, string) {
				st, m, raw := p.send(writerToken, "POST", "/vars/control/changes", `{"scope":"app.a","base":0,"document":{"x":1}}`)
				if st != 201 {
					p.t.Fatalf("propose as writer: %d %s", st, raw)
				}
				return fmt.Sprintf("/vars/control/changes/%s:withdraw", m["id"]), ""
			}, audit: "varplane-control.change."},
		transition("rebase", `{"base":1}`, func(p *promisePlane) {
			p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":0},"expectedGeneration":0}`)
		}, "varplane-control.change."),
		transition("rollout", `{"strategy":"linear:2:1m"}`, nil, varplane.RolloutScope),
	},
	"POST /vars/control/rollouts/{id}": {
		rolloutControl("pause", nil),
		rolloutControl("resume", func(p *promisePlane, rid string) {
			p.must("POST", "/vars/control/rollouts/"+rid+":pause", `{}`)
		}),
		rolloutControl("abort", nil),
	},
	"PUT /vars/control/policies/{scope}": {{name: "put a policy",
		setup: func(*promisePlane) (string, string) { return "/vars/control/policies/app", `{"approvals":1}` },
		audit: "varplane-control.policies"}},
	"DELETE /vars/control/policies/{scope}": {{name: "delete a policy",
		setup: func(p *promisePlane) (string, string) {
			p.must("PUT", "/vars/control/policies/app", `{"approvals":1}`)
			return "/vars/control/policies/app", ""
		}, audit: "varplane-control.policies"}},
	"PUT /vars/control/instances/{id}/status": {{name: "file a status",
		setup: func(*promisePlane) (string, string) {
			return "/vars/control/instances/writer/status", `{"instance":"writer","ready":true,"root":"app","documents":[{"scope":"app.a","generation":0}]}`
		}, telemetry: true}},
	"PUT /vars/control/windows/{window}/reports/{id}": {{name: "file a report",
		setup: func(p *promisePlane) (string, string) {
			win := p.openWindow()
			return "/vars/control/windows/" + win + "/reports/writer",
				fmt.Sprintf(`{"window":%q,"instance":"writer","decoded":1,"errors":0,"at":"2026-12-04T00:00:00Z"}`, win)
		}, telemetry: true, window: (*promisePlane).openWindow}},
	"POST /vars/access/tokens": {{name: "create a token",
		setup: func(*promisePlane) (string, string) {
			return "/vars/access/tokens", `{"id":"ci","kinds":["read"],"prefixes":["app."]}`
		},
		audit: access.Scope}},
	"DELETE /vars/access/tokens/{id}": {{name: "revoke a token",
		setup: func(p *promisePlane) (string, string) {
			p.must("POST", "/vars/access/tokens", `{"id":"ci","kinds":["read"],"prefixes":["app."]}`)
			return "/vars/access/tokens/ci", ""
		}, audit: access.Scope}},
	"POST /configuration/values/{component}/{$}": {{name: "create a configuration",
		setup: func(*promisePlane) (string, string) {
			return "/configuration/values/alpha.bare/", `{"configuration":{"n":1}}`
		}, audit: "alpha.bare@"}},
}

// promiseMounted says, for each handler mounted as serve mounts them, why
// its writes keep the promises; TestWritePromises fails for a mount not
// listed. The console's write forms are tried here without a session.
var promiseMounted = map[string]string{
	"/ui/":                      "the console: every action is a request to this handler with the session's token (ui.Options.API), so the route table's cases hold for it",
	"/ui":                       "a redirect",
	"/.configuration":           "a redirect to the console's components page",
	"/varplane.v1.PushService/": "the RPC transport: Subscribe and Watch, streams that only read",
}

// consoleWrites are the console's forms that write (ui/ui.go).
var consoleWrites = []string{"/ui/publish", "/ui/rollback", "/ui/deactivate", "/ui/change", "/ui/policies", "/ui/schemas", "/ui/components", "/ui/signout"}

var promiseReads = map[string]readCase{
	"POST /vars/admin/validate":                   {"/vars/admin/validate", `{"scope":"app.a","document":{"x":1}}`},
	"POST /vars/ofrep/v1/evaluate/flags/{key...}": {"/vars/ofrep/v1/evaluate/flags/app.a", `{"context":{"targetingKey":"u"}}`},
	"POST /vars/ofrep/v1/evaluate/flags":          {"/vars/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u"}}`},
	"POST /configuration/values:fetch":            {"/configuration/values:fetch", `[{"component":"alpha.bare","epoch":0}]`},
}

// transition is the case of one transition of a change root proposed on
// app.a (after prepare, when given).
func transition(op, body string, prepare func(p *promisePlane), audit varplane.Scope) writeCase {
	return writeCase{name: op, audit: audit, setup: func(p *promisePlane) (string, string) {
		m := p.must("POST", "/vars/control/changes", `{"scope":"app.a","base":0,"document":{"x":1}}`)
		if prepare != nil {
			prepare(p)
		}
		return fmt.Sprintf("/vars/control/changes/%s:%s", m["id"], op), body
	}}
}

// rolloutControl is a case of a person's control of a rollout (pause,
// resume, abort) that root started on a change root proposed; prepare,
// when set, runs as root before it (a resume needs a pause).
func rolloutControl(op string, prepare func(p *promisePlane, rid string)) writeCase {
	return writeCase{name: op + " a rollout", audit: varplane.RolloutScope, setup: func(p *promisePlane) (string, string) {
		c := p.must("POST", "/vars/control/changes", `{"scope":"app.a","base":0,"document":{"x":1}}`)
		r := p.must("POST", fmt.Sprintf("/vars/control/changes/%s:rollout", c["id"]), `{"strategy":"linear:2:1m"}`)
		rid, _ := r["id"].(string)
		if prepare != nil {
			prepare(p, rid)
		}
		return "/vars/control/rollouts/" + rid + ":" + op, `{}`
	}}
}

// openWindow opens a canary window on a change root proposed on app.w and
// returns its id (the same one on every call).
func (p *promisePlane) openWindow() string {
	p.t.Helper()
	st, m, _ := p.send(rootToken, "GET", "/vars/control/windows", "")
	if ws, _ := m["windows"].([]any); st == 200 && len(ws) > 0 {
		return ws[0].(map[string]any)["window"].(string)
	}
	c := p.must("POST", "/vars/control/changes", `{"scope":"app.w","base":0,"document":{"x":1}}`)
	c = p.must("POST", fmt.Sprintf("/vars/control/changes/%s:canary", c["id"]), `{"duration":"10m","minInstances":1}`)
	return c["canary"].(map[string]any)["id"].(string)
}

// TestWritePromises holds the promises of writes on every route of the
// handler with every feature on: each route that writes refuses a request
// without a token (401 unauthorized), with a forged token (403 forbidden)
// and without the right (403 forbidden), and a document a bound schema
// rejects (422 revision-invalid), each leaving the store as it was; its
// success leaves an event naming the caller in the history of the scope
// that records it (or, for an instance's status or report, a record filed
// under the caller). A route without a case fails the test.
func TestWritePromises(t *testing.T) {
	listed := map[string]bool{}
	for _, rt := range newPromisePlane(t).h.Routes() {
		key := strings.TrimSpace(rt.Method + " " + rt.Pattern)
		listed[key] = true
		if rt.Mounted {
			if _, ok := promiseMounted[rt.Pattern]; !ok {
				t.Errorf("mounted handler %s has no entry in promiseMounted: say how its writes keep the promises", rt.Pattern)
			}
			continue
		}
		if rt.Method == http.MethodGet {
			continue
		}
		_, w := promiseWrites[key]
		_, r := promiseReads[key]
		if !w && !r {
			t.Errorf("route %s has no case in promiseWrites or promiseReads: say how its writes are authorized, audited and validated", key)
		}
	}
	for key := range promiseWrites {
		if !listed[key] {
			t.Errorf("promiseWrites names %s, which the handler does not serve", key)
		}
	}
	for key := range promiseReads {
		if !listed[key] {
			t.Errorf("promiseReads names %s, which the handler does not serve", key)
		}
	}

	t.Run("console forms without a session", func(t *testing.T) {
		p := newPromisePlane(t)
		p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":1},"expectedGeneration":0}`)
		before := p.view()
		for _, path := range consoleWrites {
			for _, cookie := range []string{"", "varplane_session=forged"} {
				req := httptest.NewRequest("POST", path, strings.NewReader("s=app.a&document=%7B%7D&expected=1&csrf=x"))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Authorization", "Bearer "+writerToken) // a token is no session
				if cookie != "" {
					req.Header.Set("Cookie", cookie)
				}
				rec := httptest.NewRecorder()
				p.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusUnauthorized {
					t.Errorf("POST %s (cookie %q): %d, want 401", path, cookie, rec.Code)
				}
				unchanged(t, "POST "+path, before, p.view(), "")
			}
		}
	})
	for key, c := range promiseReads {
		t.Run(key, func(t *testing.T) {
			p := newPromisePlane(t)
			p.must("POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":1},"expectedGeneration":0}`)
			before := p.view()
			method, _, _ := strings.Cut(key, " ")
			for _, token := range []string{"", forgedToken, readerToken, writerToken} {
				p.send(token, method, c.target, c.body)
				unchanged(t, "a request that only reads", before, p.view(), "")
			}
		})
	}
	for key, cases := range promiseWrites {
		method, _, _ := strings.Cut(key, " ")
		for _, c := range cases {
			t.Run(key+"/"+c.name, func(t *testing.T) {
				p := newPromisePlane(t)
				// Every document under app is bound to the strict schema.
				p.must("PUT", "/vars/admin/schemas/bindings/app", `{"schemaId":"strict"}`)
				as := writerToken
				target, body := c.setup(p)
				var windows []string
				if c.window != nil {
					windows = append(windows, c.window(p))
				}
				before := p.view(windows...)
				for _, refused := range []struct {
					who, token string
					status     int
					code       varplane.Code
				}{
					{"no token", "", 401, varplane.CodeUnauthorized},
					{"a forged token", forgedToken, 403, varplane.CodeForbidden},
					{"a token without the right", readerToken, 403, varplane.CodeForbidden},
				} {
					st, _, raw := p.send(refused.token, method, target, body)
					if e := wire.ParseError(st, []byte(raw)); st != refused.status || e.Code != refused.code {
						t.Errorf("with %s: %d %s, want %d %s", refused.who, st, raw, refused.status, refused.code)
					}
					unchanged(t, "a request with "+refused.who, before, p.view(windows...), "")
				}
				if c.invalid != "" && c.invalidChange {
					st, m, raw := p.send(as, method, target, c.invalid)
					if st != 201 || m["state"] != "failed" {
						t.Errorf("a document the bound schema rejects: %d %s, want 201 a failed change", st, raw)
					}
					after := p.view(windows...)
					for s := range written(before, after) {
						if !strings.HasPrefix(string(s), "varplane-control.change.") {
							t.Errorf("a failed change wrote %s", s)
						}
					}
					before = after
				} else if c.invalid != "" {
					st, _, raw := p.send(as, method, target, c.invalid)
					if e := wire.ParseError(st, []byte(raw)); st != 422 || e.Code != varplane.CodeRevisionInvalid {
						t.Errorf("a document the bound schema rejects: %d %s, want 422 revision-invalid", st, raw)
					}
					unchanged(t, "a document the bound schema rejects", before, p.view(windows...), "writer")
				}
				st, _, raw := p.send(as, method, target, body)
				if st/100 != 2 {
					t.Fatalf("as writer: %d %s", st, raw)
				}
				after := p.view(windows...)
				if c.telemetry {
					filed := false
					for id, v := range after.Statuses {
						filed = filed || (v != before.Statuses[id] && strings.Contains(v, `"identity":"writer"`))
					}
					for _, w := range windows {
						for id, v := range after.Reports[w] {
							filed = filed || (v != before.Reports[w][id] && strings.HasPrefix(id, "writer"))
						}
					}
					if !filed {
						t.Errorf("nothing filed under writer: %+v / %+v", after.Statuses, after.Reports)
					}
					return
				}
				evs := written(before, after)
				audited := false
				for s, list := range evs {
					audited = audited || s == c.audit || strings.HasPrefix(string(s), string(c.audit))
					for _, ev := range list {
						// The control service's own records (the staged
						// canary windows) name the system and the change
						// they serve, whose record names the caller.
						if ev.Actor == "varplane:control" && s == varplane.StagedScope {
							continue
						}
						if ev.Actor != "writer" || ev.Unauthenticated {
							t.Errorf("event %s of %s names actor %q (unauthenticated %v), want writer", ev.Kind, s, ev.Actor, ev.Unauthenticated)
						}
					}
				}
				if !audited {
					t.Errorf("no event in the history of %s; written: %+v", c.audit, evs)
				}
			})
		}
	}
}

// TestChangeRoutesAuthenticateFirst: the routes of one change answer a
// request without a token, or with a forged one, the same whether the
// change exists or not: existence is not told before authentication.
func TestChangeRoutesAuthenticateFirst(t *testing.T) {
	p := newPromisePlane(t)
	c := p.must("POST", "/vars/control/changes", `{"scope":"app.a","base":0,"document":{"x":1}}`)
	for _, id := range []string{c["id"].(string), "ch-0123456789abcdef"} {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/vars/control/changes/" + id, ""},
			{"GET", "/vars/control/changes/" + id + "/reports", ""},
			{"POST", "/vars/control/changes/" + id + ":approve", `{}`},
		} {
			for _, a := range []struct {
				token  string
				status int
				code   varplane.Code
			}{{"", 401, varplane.CodeUnauthorized}, {forgedToken, 403, varplane.CodeForbidden}} {
				st, _, raw := p.send(a.token, r.method, r.path, r.body)
				if e := wire.ParseError(st, []byte(raw)); st != a.status || e.Code != a.code {
					t.Errorf("%s %s with token %q: %d %s, want %d %s", r.method, r.path, a.token, st, raw, a.status, a.code)
				}
			}
		}
	}
}
