package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/ui"
)

// The values service's routes (values.go), over the deployment of
// config's test manifests (valuesDeployment).

// valuesOptions are what a test sets of the handler serving the values
// service: the authorizer, the engine's limits and the logger.
type valuesOptions struct {
	Authorizer varplane.Authorizer
	Limits     varplane.Limits
	Logger     *slog.Logger
}

// valuesServer returns a values service over a memory store and the
// handler serving it under opts, with its page (package ui) mounted as
// serve mounts it without the console.
func valuesServer(t testing.TB, opts valuesOptions) (*config.Service, http.Handler) {
	t.Helper()
	store := memory.New()
	eng := varplane.NewEngine(store, varplane.Options{Limits: opts.Limits})
	t.Cleanup(func() { eng.Close(); _ = store.Close() })
	svc, err := config.NewService(eng, valuesDeployment(t))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Authorizer == nil {
		opts.Authorizer = varplane.AllowAll
	}
	h := httpapi.NewHandler(eng, httpapi.Options{Authorizer: opts.Authorizer, Logger: opts.Logger, Values: svc, DisableOps: true,
		Stream: httpapi.StreamOptions{Heartbeat: 15 * time.Second}})
	t.Cleanup(h.Close)
	// The service's page, as serve mounts it with the console off.
	h.Mount("/.configuration", ui.ValuesPage(svc, ui.ValuesPageOptions{Authorizer: opts.Authorizer, Logger: opts.Logger}))
	return svc, h
}

// valuesDeployment is the deployment of config's test manifests:
// dummies.dummy with defaults (a secret among them), alpha.bare without
// any.
func valuesDeployment(t testing.TB) *config.Deployment {
	t.Helper()
	ms, err := config.LoadManifests(filepath.Join("..", "config", "testdata", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := config.NewDeployment(ms, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustCreate(t *testing.T, svc *config.Service, component, conf, originator string) config.Created {
	t.Helper()
	res, err := svc.Create(context.Background(), config.CreateRequest{Component: component, Configuration: json.RawMessage(conf), Originator: originator})
	if err != nil {
		t.Fatalf("Create(%s, %s): %v", component, conf, err)
	}
	return res
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newServer(t *testing.T, authz varplane.Authorizer) (*config.Service, *httptest.Server) {
	t.Helper()
	svc, h := valuesServer(t, valuesOptions{Authorizer: authz, Limits: varplane.Limits{MaxBodyBytes: 4096}, Logger: quietLog()})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return svc, srv
}

// tokens is an authorizer over a fixed map of tokens, shaped as the tokens
// file's (access.ScopedAuthorizer): 401 without a token, 403 for an unknown
// one.
func tokens(ids map[string]varplane.Identity) varplane.Authorizer {
	return varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
		if a.Kind != varplane.KindIdentify {
			return varplane.Identity{}, errors.New("the values service asks only who the caller is")
		}
		if a.Token == "" {
			return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
		}
		id, ok := ids[a.Token]
		if !ok {
			return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "the token is not accepted")
		}
		return id, nil
	})
}

type request struct {
	method, path, contentType, accept, token, body string
}

func do(t *testing.T, srv *httptest.Server, r request) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestValuesResources(t *testing.T) {
	_, srv := newServer(t, nil)
	const values = "/configuration/values/"
	tests := []struct {
		name       string
		req        request
		wantStatus int
		wantCode   string
		wantBody   string // substring
		wantCT     string
	}{
		{"list", request{method: "GET", path: values}, 200, "", `"component":"alpha.bare"`, "application/json"},
		{"get defaults", request{method: "GET", path: values + "dummies.dummy/"}, 200, "", `"configuration":{"bar":1,"foo":"bar","key":"$API_KEY"}`, "application/json"},
		{"get none is 404", request{method: "GET", path: values + "alpha.bare/"}, 404, "not-found", "", ""},
		{"get unknown is 404", request{method: "GET", path: values + "no.body/"}, 404, "not-found", "", ""},
		{"get as YAML", request{method: "GET", path: values + "dummies.dummy/", accept: "application/yaml"}, 200, "", "foo: bar", "application/yaml"},
		{"JSON preferred by q", request{method: "GET", path: values + "dummies.dummy/", accept: "application/yaml;q=0.5, application/json"}, 200, "", `"epoch"`, "application/json"},
		{"create JSON", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"configuration":{"n":1}}`}, 201, "", `"epoch":"`, "application/json"},
		{"create YAML", request{method: "POST", path: values + "alpha.bare/", contentType: "application/yaml", body: "configuration:\n  n: 2\n"}, 201, "", `"id":"`, ""},
		{"create answers YAML", request{method: "POST", path: values + "alpha.bare/", contentType: "application/x-yaml", accept: "text/yaml", body: "configuration: {n: 3}"}, 201, "", "epoch: ", "application/yaml"},
		{"invalid is 422", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"configuration":{"n":"x"}}`}, 422, "invalid-configuration", `"path":"/n"`, ""},
		{"unknown is 422", request{method: "POST", path: values + "no.body/", contentType: "application/json", body: `{"configuration":{}}`}, 422, "unknown-component", "", ""},
		{"unsupported media type", request{method: "POST", path: values + "alpha.bare/", contentType: "text/plain", body: `{"configuration":{}}`}, 415, "unsupported-media-type", "", ""},
		{"no content type is JSON", request{method: "POST", path: values + "alpha.bare/", body: `{"configuration":{"n":3}}`}, 201, "", `"id":"`, "application/json"},
		{"YAML 1.1 octal refused naming the line", request{method: "POST", path: values + "alpha.bare/", contentType: "application/yaml", body: "configuration:\n  n: 1\n  mode: 0644\n"}, 400, "bad-request", "line 3", ""},
		{"YAML 010 refused", request{method: "POST", path: values + "alpha.bare/", contentType: "text/yaml", body: "configuration: {n: 010}\n"}, 400, "bad-request", "leading zero", ""},
		{"YAML anchors refused", request{method: "POST", path: values + "alpha.bare/", contentType: "application/yaml", body: "configuration: &c {n: 1}\n"}, 400, "bad-request", "anchors", ""},
		{"unknown field", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"configuration":{"n":1},"originator":"mallory"}`}, 400, "bad-request", "unknown field originator", ""},
		{"null configuration is checked", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"configuration":null}`}, 422, "invalid-configuration", "", ""},
		{"too deep", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"configuration":{"n":1,"x":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}}`}, 400, "limit-exceeded", "", ""},
		{"JSON with a charset", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json; charset=utf-8", body: `[]`}, 200, "", "[]", ""},
		{"undecodable JSON", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"configuration":`}, 400, "bad-request", "", ""},
		{"undecodable YAML", request{method: "POST", path: values + "alpha.bare/", contentType: "application/yaml", body: "configuration: [\n"}, 400, "bad-request", "", ""},
		{"no configuration", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"n":1}`}, 400, "bad-request", "", ""},
		{"too large", request{method: "POST", path: values + "alpha.bare/", contentType: "application/json", body: `{"configuration":{"s":"` + strings.Repeat("x", 5000) + `"}}`}, 413, "payload-too-large", "", ""},
		{"fetch", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json", body: `[{"component":"dummies.dummy"},{"component":"no.body","epoch":"` + strings.Repeat("0", 64) + `"}]`}, 200, "", `"configuration":null,"created":0`, ""},
		{"fetch bad body", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json", body: `{"x":1}`}, 400, "bad-request", "", ""},
		{"fetch pairs object", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json", body: `{"pairs":[{"component":"dummies.dummy"}]}`}, 200, "", `"created":0`, ""},
		{"fetch YAML", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/yaml", body: "- component: dummies.dummy\n"}, 200, "", `"foo":"bar"`, ""},
		{"fetch pair without component", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json", body: `[{"epoch":""}]`}, 400, "bad-request", "pair 0", ""},
		{"fetch pair unknown field", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json", body: `[{"component":"a.b","x":1}]`}, 400, "bad-request", "pair 0", ""},
		{"fetch not a list", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json", body: `"x"`}, 400, "bad-request", "", ""},
		{"fetch empty body", request{method: "POST", path: "/configuration/values:fetch", contentType: "application/json"}, 400, "bad-request", "", ""},
		{"bad epoch", request{method: "GET", path: values + "dummies.dummy/?epoch=zz"}, 400, "bad-request", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, srv, tt.req)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantCT != "" && resp.Header.Get("Content-Type") != tt.wantCT {
				t.Errorf("Content-Type = %s, want %s", resp.Header.Get("Content-Type"), tt.wantCT)
			}
			if tt.wantCode != "" {
				var e struct {
					Code  string `json:"code"`
					Error string `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Code != tt.wantCode || e.Error == "" {
					t.Errorf("error body = %s, want code %s", body, tt.wantCode)
				}
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("body = %s, want it to contain %s", body, tt.wantBody)
			}
		})
	}

	// The YAML answer decodes to the same values, numbers as numbers.
	_, body := do(t, srv, request{method: "GET", path: values + "dummies.dummy/", accept: "application/yaml"})
	var y struct {
		Configuration map[string]any `yaml:"configuration"`
		Epoch         string         `yaml:"epoch"`
	}
	if err := yaml.Unmarshal(body, &y); err != nil || y.Configuration["bar"] != 1 || len(y.Epoch) != 64 {
		t.Errorf("YAML answer = %s (%v)", body, err)
	}
	// After the creates, get serves the last one.
	_, body = do(t, srv, request{method: "GET", path: values + "alpha.bare/"})
	if !strings.Contains(string(body), `"configuration":{"n":3}`) {
		t.Errorf("get after creates = %s", body)
	}
}

func TestValuesIdentityAndRoles(t *testing.T) {
	svc, srv := newServer(t, tokens(map[string]varplane.Identity{
		"root":   {ID: "root-user", Roles: []string{"system"}},
		"star":   {ID: "star", Roles: []string{"*"}},
		"conf":   {ID: "conf-user", Roles: []string{"system:configuration"}},
		"reader": {ID: "reader", Roles: []string{"system:configuration:get"}},
		"writer": {ID: "writer", Roles: []string{"system:configuration:create"}},
		"other":  {ID: "other", Roles: []string{"system:other", "system:configurationx"}},
	}))
	get := func(tok string) request { return request{method: "GET", path: "/configuration/values/", token: tok} }
	create := func(tok string) request {
		return request{method: "POST", path: "/configuration/values/alpha.bare/", token: tok, contentType: "application/json", body: `{"configuration":{"n":1}}`}
	}
	tests := []struct {
		name string
		req  request
		want int
		code varplane.Code
	}{
		{"no identity reads", get(""), 401, varplane.CodeUnauthorized},
		{"unknown token reads", get("nope"), 403, varplane.CodeForbidden},
		{"no identity creates", create(""), 401, varplane.CodeUnauthorized},
		{"system reads", get("root"), 200, ""},
		{"system creates", create("root"), 201, ""},
		{"* creates", create("star"), 201, ""},
		{"system:configuration reads", get("conf"), 200, ""},
		{"system:configuration creates", create("conf"), 201, ""},
		{"reader reads", get("reader"), 200, ""},
		{"reader cannot create", create("reader"), 403, varplane.CodeForbidden},
		{"writer cannot read", get("writer"), 403, varplane.CodeForbidden},
		{"writer creates", create("writer"), 201, ""},
		{"unrelated roles", get("other"), 403, varplane.CodeForbidden},
		{"fetch needs get", request{method: "POST", path: "/configuration/values:fetch", token: "writer", contentType: "application/json", body: `[]`}, 403, varplane.CodeForbidden},
		{"watch needs get", request{method: "GET", path: "/configuration/values:watch", token: "writer"}, 403, varplane.CodeForbidden},
		{"page needs get", request{method: "GET", path: "/.configuration", token: "writer"}, 403, varplane.CodeForbidden},
		{"page form needs create", request{method: "POST", path: "/.configuration", token: "reader", contentType: "application/x-www-form-urlencoded", body: "component=alpha.bare&configuration=n%3A+1"}, 403, varplane.CodeForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, srv, tt.req)
			if resp.StatusCode != tt.want {
				t.Errorf("status = %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.code != "" {
				if got := wire.ParseError(resp.StatusCode, body).Code; got != tt.code {
					t.Errorf("code = %s, want %s", got, tt.code)
				}
			}
		})
	}
	// The identity's ID is the originator.
	v, _, _ := svc.Get(context.Background(), "alpha.bare", "")
	if v.Originator != "writer" {
		t.Errorf("originator = %q, want writer", v.Originator)
	}
	// seed 001's "Authorization: Token <t>" carries the token too.
	req, _ := http.NewRequest("GET", srv.URL+"/configuration/values/", nil)
	req.Header.Set("Authorization", "Token reader")
	if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("Token scheme: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Basic authentication carries the token for browsers, on the page only.
	basic := func(path, password string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.SetBasicAuth("me", password)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := basic("/.configuration", "reader"); resp.StatusCode != 200 {
		t.Errorf("basic auth page = %d", resp.StatusCode)
	}
	if resp := basic("/configuration/values/", "reader"); resp.StatusCode != 401 {
		t.Errorf("basic auth on the API = %d, want 401: Basic is for the page", resp.StatusCode)
	}
	// A mistyped password is asked for again (401 with the invitation),
	// not held on to as a 403.
	for _, password := range []string{"", "mistyped"} {
		resp := basic("/.configuration", password)
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("page with password %q = %d %q, want 401 inviting to authenticate", password, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	resp, _ := do(t, srv, request{method: "GET", path: "/.configuration"})
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("the page's 401 does not invite a browser to authenticate")
	}
}

func TestValuesFailingAuthorizerFailsClosed(t *testing.T) {
	for name, authz := range map[string]varplane.Authorizer{
		"error": varplane.AuthorizerFunc(func(context.Context, varplane.Access) (varplane.Identity, error) {
			return varplane.Identity{}, errors.New("backend down: secret-detail")
		}),
		"panic": varplane.AuthorizerFunc(func(context.Context, varplane.Access) (varplane.Identity, error) {
			panic("secret-detail")
		}),
		"no id": varplane.AuthorizerFunc(func(context.Context, varplane.Access) (varplane.Identity, error) {
			return varplane.Identity{Roles: []string{"*"}}, nil
		}),
	} {
		t.Run(name, func(t *testing.T) {
			_, srv := newServer(t, authz)
			for _, r := range []request{{method: "GET", path: "/configuration/values/"}, {method: "GET", path: "/.configuration"}} {
				resp, body := do(t, srv, r)
				if resp.StatusCode != 500 || strings.Contains(string(body), "secret-detail") || wire.ParseError(500, body).Code != varplane.CodeInternal {
					t.Errorf("%s: status = %d, body = %s", r.path, resp.StatusCode, body)
				}
			}
		})
	}
}

func TestValuesWatch(t *testing.T) {
	svc, srv := newServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/configuration/values:watch", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %s", ct)
	}
	r := bufio.NewReader(resp.Body)
	readEvent := func() (string, string) {
		t.Helper()
		var name, data string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "" && name != "":
				return name, data
			case strings.HasPrefix(line, "event: "):
				name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data = line[len("data: "):]
			}
		}
	}
	if name, _ := readEvent(); name != "ready" {
		t.Fatalf("first event = %s, want ready", name)
	}
	res := mustCreate(t, svc, "alpha.bare", `{"n":5}`, "dave")
	name, data := readEvent()
	var ev config.CreatedEvent
	if err := json.Unmarshal([]byte(data), &ev); err != nil || name != "created" {
		t.Fatalf("event %s %s: %v", name, data, err)
	}
	if ev.Component != "alpha.bare" || ev.ID != res.ID || ev.Created != 1 || ev.Originator != "dave" || string(ev.Configuration) != `{"n":5}` || ev.Epoch != res.Epoch {
		t.Errorf("event = %+v", ev)
	}
}

// serve runs one request through h in process and returns the recorder.
func serve(h http.Handler, method, path, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// nested returns depth levels of open, then leaf, then depth levels of
// close.
func nested(open, leaf, closing string, depth int) []byte {
	return []byte(strings.Repeat(open, depth) + leaf + strings.Repeat(closing, depth))
}

// TestValuesHostileBodies: the bodies that took the previous decoder past 17 GB
// (a path string per level) and 480 MB (YAML with long keys) are refused
// with a limit error, and what the whole request allocates stays within a
// bound proportional to the body (generous: 64 MiB), under the engine's
// default limits.
func TestValuesHostileBodies(t *testing.T) {
	svc, h := valuesServer(t, valuesOptions{Logger: quietLog()})
	key := strings.Repeat("k", 100)
	const fetch, create = "/configuration/values:fetch", "/configuration/values/alpha.bare/"
	tests := []struct {
		name, path, contentType string
		body                    []byte
		codes                   []varplane.Code
	}{
		{"fetch of 200 KB of [[[[", fetch, "application/json", nested("[", "", "]", 100_000), []varplane.Code{varplane.CodeLimitExceeded}},
		{"create of 200 KB of nested arrays", create, "application/json", append(append([]byte(`{"configuration":{"x":`), nested("[", "1", "]", 100_000)...), "}}"...), []varplane.Code{varplane.CodeLimitExceeded}},
		{"JSON of 300 KB with long keys", create, "application/json", append(append([]byte(`{"configuration":`), nested(`{"`+key+`":`, "1", "}", 2900)...), '}'), []varplane.Code{varplane.CodeLimitExceeded}},
		{"YAML of 300 KB with long keys", create, "application/yaml", append([]byte("configuration: "), nested("{"+key+": ", "1", "}", 2900)...), []varplane.Code{varplane.CodeLimitExceeded}},
		{"YAML fetch of 300 KB with long keys", fetch, "application/yaml", append([]byte("- component: a.b\n  x: "), nested("{"+key+": ", "1", "}", 2900)...), []varplane.Code{varplane.CodeLimitExceeded}},
		// yaml.v3's own nesting bound may answer first: bad-request.
		{"YAML of 200 KB of [[[[", fetch, "application/yaml", nested("[", "", "]", 100_000), []varplane.Code{varplane.CodeLimitExceeded, varplane.CodeBadRequest}},
		{"YAML of long keys at one level", create, "application/yaml", []byte("configuration:\n  ? " + strings.Repeat("k", 300_000) + "\n  : 1\n"), []varplane.Code{varplane.CodeLimitExceeded}},
		{"YAML alias bomb", create, "application/yaml", []byte("configuration:\n  a: &a [x, x, x, x, x, x, x, x, x]\n  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n  c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"), []varplane.Code{varplane.CodeBadRequest}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rec := serve(h, "POST", tt.path, tt.contentType, tt.body)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte body: %d %s; %.1f MiB allocated by the request", len(tt.body), rec.Code, firstLine(rec.Body.String()), float64(allocated)/(1<<20))
			code := wire.ParseError(rec.Code, rec.Body.Bytes()).Code
			ok := false
			for _, c := range tt.codes {
				ok = ok || c == code
			}
			if !ok || rec.Code != wire.Status(code) {
				t.Fatalf("answer %d %s, want one of %v", rec.Code, rec.Body, tt.codes)
			}
			if allocated > 64<<20 {
				t.Fatalf("the request allocated %d bytes for a %d-byte body", allocated, len(tt.body))
			}
		})
	}
	// Nothing was stored.
	if _, ok, _ := svc.Get(context.Background(), "alpha.bare", ""); ok {
		t.Fatal("a refused body left a configuration")
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// TestValuesErrorBodiesHaveOneShape: every error answer of the values service is
// the project's one body, JSON whatever Accept says, with the status of its
// code.
func TestValuesErrorBodiesHaveOneShape(t *testing.T) {
	_, h := valuesServer(t, valuesOptions{Logger: quietLog(), Limits: varplane.Limits{MaxBodyBytes: 4096}, Authorizer: tokens(map[string]varplane.Identity{
		"reader": {ID: "reader", Roles: []string{config.RoleGet}},
		"root":   {ID: "root", Roles: []string{"*"}},
	})})
	const values = "/configuration/values/"
	tests := []struct {
		name, method, path, token, contentType, accept, body string
		code                                                 varplane.Code
	}{
		{"no token", "GET", values, "", "", "", "", varplane.CodeUnauthorized},
		{"unknown token", "GET", values, "nope", "", "", "", varplane.CodeForbidden},
		{"no role", "POST", values + "alpha.bare/", "reader", "application/json", "", `{"configuration":{"n":1}}`, varplane.CodeForbidden},
		{"none", "GET", values + "alpha.bare/", "root", "", "application/yaml", "", varplane.CodeNotFound},
		{"bad epoch", "GET", values + "alpha.bare/?epoch=x", "root", "", "", "", varplane.CodeBadRequest},
		{"media type", "POST", values + "alpha.bare/", "root", "text/plain", "", `{}`, varplane.CodeUnsupportedMediaType},
		{"too large", "POST", values + "alpha.bare/", "root", "application/json", "", `{"configuration":"` + strings.Repeat("x", 5000) + `"}`, varplane.CodePayloadTooLarge},
		{"too deep", "POST", "/configuration/values:fetch", "root", "application/json", "", string(nested("[", "", "]", 1000)), varplane.CodeLimitExceeded},
		{"YAML octal", "POST", values + "alpha.bare/", "root", "application/yaml", "application/yaml", "configuration:\n  mode: 0644\n", varplane.CodeBadRequest},
		{"not JSON", "POST", values + "alpha.bare/", "root", "application/json", "", `{"configuration":`, varplane.CodeBadRequest},
		{"unknown field", "POST", values + "alpha.bare/", "root", "application/json", "", `{"config":{}}`, varplane.CodeBadRequest},
		{"invalid", "POST", values + "alpha.bare/", "root", "application/json", "application/yaml", `{"configuration":{"n":"x"}}`, varplane.CodeInvalidConfiguration},
		{"unknown component", "POST", values + "no.such/", "root", "application/json", "", `{"configuration":{}}`, varplane.CodeUnknownComponent},
		{"page form media type", "POST", "/.configuration", "root", "application/json", "", `{}`, varplane.CodeUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			for k, v := range map[string]string{"Content-Type": tt.contentType, "Accept": tt.accept} {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			checkErrorShape(t, rec, tt.code)
		})
	}
}

// checkErrorShape fails unless rec is the one error body with code and its
// status.
func checkErrorShape(t *testing.T, rec *httptest.ResponseRecorder, code varplane.Code) {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q: %s", ct, rec.Body)
	}
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	var b wire.ErrorBody
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("not the one error shape: %v: %s", err, rec.Body)
	}
	if b.Error == "" || (code != "" && b.Code != code) || rec.Code != wire.Status(b.Code) {
		t.Fatalf("%d %s, want code %s with its status %d", rec.Code, rec.Body, code, wire.Status(code))
	}
	if code == varplane.CodeInvalidConfiguration && len(b.Issues) == 0 {
		t.Fatalf("invalid-configuration without issues: %s", rec.Body)
	}
}

// fuzzSeeds are bodies for both decoders: valid and invalid JSON and YAML,
// the policy's refusals, and bodies past the limits.
var fuzzSeeds = []string{
	`{"configuration":{"n":1}}`,
	`{"configuration":{"n":"x"}}`,
	`{"configuration":null}`,
	`{"configuration":{"n":1},"configuration":{"n":2}}`,
	`{"configuration":{"n":1,"n":2}}`,
	`[{"component":"alpha.bare"},{"component":"dummies.dummy","epoch":""}]`,
	`{"pairs":[{"component":"alpha.bare","epoch":"` + strings.Repeat("0", 64) + `"}]}`,
	`[{"component":""}]`,
	`[1,"x",null]`,
	"configuration:\n  n: 2\n",
	"configuration:\n  mode: 0644\n",
	"configuration: {n: 010}\n",
	"configuration: &a {n: 1}\nb: *a\n",
	"configuration:\n  <<: {n: 1}\n",
	"- component: dummies.dummy\n- {component: alpha.bare, epoch: ''}\n",
	"configuration: {n: .inf}\n",
	"configuration: !!binary aGVsbG8=\n",
	"a: 1\n---\nb: 2\n",
	strings.Repeat("[", 70) + strings.Repeat("]", 70),
	`{"configuration":{"k":"` + strings.Repeat("x", 300) + `"}}`,
	"\xff\xfe",
	"",
}

// fuzzHandler is a values service under small limits, so that the fuzzer
// reaches them.
func fuzzHandler(f *testing.F) (*config.Service, http.Handler) {
	return valuesServer(f, valuesOptions{Logger: quietLog(), Limits: varplane.Limits{MaxBodyBytes: 8192, MaxDepth: 16, MaxStringBytes: 256, MaxMembers: 64}})
}

func fuzzContentType(yaml bool) string {
	if yaml {
		return "application/yaml"
	}
	return "application/json"
}

// FuzzValuesCreate posts arbitrary bodies to create through the real
// handler: never a 500, every refusal the one error body with its status,
// and a refused body stores nothing.
func FuzzValuesCreate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	svc, h := fuzzHandler(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte, yaml bool) {
		before, _, err := svc.Get(ctx, "alpha.bare", "")
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(h, "POST", "/configuration/values/alpha.bare/", fuzzContentType(yaml), body)
		after, ok, err := svc.Get(ctx, "alpha.bare", "")
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Code {
		case http.StatusCreated:
			var res struct{ ID, Epoch string }
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || !ok || after.ID != res.ID || after.Created != before.Created+1 {
				t.Fatalf("201 %s, but served %+v", rec.Body, after)
			}
			// What is stored fits the schema (an integer n).
			if issues, err := svc.Deployment().Components["alpha.bare"].Validate(after.Configuration); err != nil || len(issues) > 0 {
				t.Fatalf("stored %s that does not fit: %v %v", after.Configuration, issues, err)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			checkErrorShape(t, rec, "")
			if after.Created != before.Created || after.ID != before.ID {
				t.Fatalf("a refused body (%d %s) changed what is served", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	})
}

// FuzzValuesFetch posts arbitrary bodies to fetch through the real handler:
// never a 500, an answer of one entry per pair, or the one error body.
func FuzzValuesFetch(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	_, h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, yaml bool) {
		rec := serve(h, "POST", "/configuration/values:fetch", fuzzContentType(yaml), body)
		switch rec.Code {
		case http.StatusOK:
			var got []config.Fetched
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("200 %s: %v", rec.Body, err)
			}
			for _, g := range got {
				if g.Component == "" || len(g.Configuration) == 0 {
					t.Fatalf("entry %+v", g)
				}
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			checkErrorShape(t, rec, "")
		default:
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	})
}
