package config

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newServer(t *testing.T, authz varplane.Authorizer) (*Service, *httptest.Server) {
	t.Helper()
	svc, _ := newService(t)
	srv := httptest.NewServer(Handler(svc, HandlerOptions{Authorizer: authz, Limits: varplane.Limits{MaxBodyBytes: 4096}, Logger: quietLog()}))
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

func TestHTTPResources(t *testing.T) {
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

func TestHTTPIdentityAndRoles(t *testing.T) {
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

func TestHTTPFailingAuthorizerFailsClosed(t *testing.T) {
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

func TestHTTPWatch(t *testing.T) {
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
	var ev CreatedEvent
	if err := json.Unmarshal([]byte(data), &ev); err != nil || name != "created" {
		t.Fatalf("event %s %s: %v", name, data, err)
	}
	if ev.Component != "alpha.bare" || ev.ID != res.ID || ev.Created != 1 || ev.Originator != "dave" || string(ev.Configuration) != `{"n":5}` || ev.Epoch != res.Epoch {
		t.Errorf("event = %+v", ev)
	}
}

func TestPage(t *testing.T) {
	svc, srv := newServer(t, nil)
	mustCreate(t, svc, "alpha.bare", `{"n":4}`, "erin")
	resp, body := do(t, srv, request{method: "GET", path: "/.configuration"})
	page := string(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	epoch := svc.Deployment().Components["alpha.bare"].Epoch
	for _, want := range []string{"alpha.bare", "dummies.dummy", epoch, ">created<", ">defaults<", `&#34;n&#34;: 4`, `<form method="post" action="/.configuration">`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, bad := range []string{"<script", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("page carries %s: it must need no external asset", bad)
		}
	}

	post := func(component, text string) (int, string) {
		form := url.Values{"component": {component}, "configuration": {text}}
		resp, body := do(t, srv, request{method: "POST", path: "/.configuration", contentType: "application/x-www-form-urlencoded", body: form.Encode()})
		return resp.StatusCode, string(body)
	}
	status, page := post("alpha.bare", "n: 9")
	if status != 201 || !strings.Contains(page, "Created ") || !strings.Contains(page, `&#34;n&#34;: 9`) {
		t.Errorf("form create = %d\n%s", status, page)
	}
	status, page = post("alpha.bare", `{"n": "nine"}`)
	if status != 422 || !strings.Contains(page, `id="issues"`) || !strings.Contains(page, "/n") || !strings.Contains(page, "document.type") {
		t.Errorf("form invalid = %d\n%s", status, page)
	}
	// The rejected draft stays in the form, escaped.
	if !strings.Contains(page, `{&#34;n&#34;: &#34;nine&#34;}`) {
		t.Error("the rejected draft is not kept in the form")
	}
	status, _ = post("alpha.bare", "n: [")
	if status != 400 {
		t.Errorf("undecodable form = %d", status)
	}
	// A cross-site form post is refused.
	req, _ := http.NewRequest("POST", srv.URL+"/.configuration", strings.NewReader("component=alpha.bare&configuration=n%3A+1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site post = %d, want 403", resp.StatusCode)
	}
}
