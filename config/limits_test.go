package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

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

// TestHostileBodies: the bodies that took the previous decoder past 17 GB
// (a path string per level) and 480 MB (YAML with long keys) are refused
// with a limit error, and what the whole request allocates stays within a
// bound proportional to the body (generous: 64 MiB), under the engine's
// default limits.
func TestHostileBodies(t *testing.T) {
	svc, _ := newService(t)
	h := Handler(svc, HandlerOptions{Logger: quietLog()})
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

// TestErrorBodiesHaveOneShape: every error answer of the values service is
// the project's one body, JSON whatever Accept says, with the status of its
// code.
func TestErrorBodiesHaveOneShape(t *testing.T) {
	svc, _ := newService(t)
	h := Handler(svc, HandlerOptions{Logger: quietLog(), Limits: varplane.Limits{MaxBodyBytes: 4096}, Authorizer: tokens(map[string]varplane.Identity{
		"reader": {ID: "reader", Roles: []string{RoleGet}},
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

// TestOwnedScopes: with config.Owner given to the engine, only the values
// service writes configuration scopes; every other writer is refused
// scope-owned and nothing is stored, and other scopes stay writable.
func TestOwnedScopes(t *testing.T) {
	ctx := context.Background()
	svc, eng := newService(t, Owner)
	epoch := svc.Deployment().Components["alpha.bare"].Epoch
	scope := Scope("alpha.bare", epoch)
	isOwned := func(err error) bool {
		var ve *varplane.Error
		return errors.As(err, &ve) && ve.Code == varplane.CodeScopeOwned
	}
	// The schema requires an integer n; around the service, a string.
	if _, err := eng.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(`{"n":"x"}`), Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("CreateRevision around the service = %v, want scope-owned", err)
	}
	if _, err := eng.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(`{"n":"x"}`), Actor: "mallory", Owner: "someone else"}); !isOwned(err) {
		t.Fatalf("CreateRevision as another owner = %v, want scope-owned", err)
	}
	rev := varplane.Revision("sha256:" + strings.Repeat("0", 64))
	if _, err := eng.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev, Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("Activate = %v, want scope-owned", err)
	}
	res := mustCreate(t, svc, "alpha.bare", `{"n":1}`, "ops")
	if _, err := eng.Deactivate(ctx, varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: varplane.Generation(res.Created), Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("Deactivate = %v, want scope-owned", err)
	}
	if _, err := eng.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: varplane.Generation(res.Created), Actor: "mallory"}); !isOwned(err) {
		t.Fatalf("Rollback = %v, want scope-owned", err)
	}
	// The service's own writes pass, and its schema still applies.
	if _, err := svc.Create(ctx, CreateRequest{Component: "alpha.bare", Configuration: json.RawMessage(`{"n":"x"}`), Originator: "ops"}); varplane.ErrorCode(err) != CodeInvalidConfiguration {
		t.Fatalf("invalid create = %v", err)
	}
	v, ok, err := svc.Get(ctx, "alpha.bare", "")
	if err != nil || !ok || string(v.Configuration) != `{"n":1}` || v.Created != res.Created || v.Originator != "ops" {
		t.Fatalf("after the refused writes: %+v %v %v", v, ok, err)
	}
	// Only configuration scopes are owned.
	for s, want := range map[varplane.Scope]bool{
		scope:                            true,
		Scope("x.y", epoch):              true,
		"alpha.bare":                     false,
		"alpha.bare@short":               false,
		"alpha@" + varplane.Scope(epoch): false,
	} {
		if got := Owner.Owns(s); got != want {
			t.Errorf("Owner.Owns(%s) = %v, want %v", s, got, want)
		}
	}
	if _, err := eng.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "alpha.bare", Document: json.RawMessage(`{}`), Actor: "x"}); err != nil {
		t.Fatalf("a scope of no owner: %v", err)
	}
}

// TestPageLimitsAndYAML: the page's form is read within the limits and by
// the one converter.
func TestPageLimitsAndYAML(t *testing.T) {
	svc, _ := newService(t)
	h := Handler(svc, HandlerOptions{Logger: quietLog(), Limits: varplane.Limits{MaxBodyBytes: 4096, MaxDepth: 8}})
	post := func(text string) *httptest.ResponseRecorder {
		return serve(h, "POST", "/.configuration", "application/x-www-form-urlencoded", []byte("component=alpha.bare&configuration="+url.QueryEscape(text)))
	}
	if rec := post("n: 0644"); rec.Code != 400 || !strings.Contains(rec.Body.String(), "line 1: an integer with a leading zero") {
		t.Errorf("0644 on the page = %d\n%s", rec.Code, rec.Body)
	}
	if rec := post("n: 1\nx: " + string(nested("[", "", "]", 20))); rec.Code != 400 || !strings.Contains(rec.Body.String(), "depth") {
		t.Errorf("deep form = %d\n%s", rec.Code, rec.Body)
	}
	if rec := post("n: " + strings.Repeat("1", 5000)); rec.Code != 413 {
		t.Errorf("large form = %d", rec.Code)
	}
	if rec := post(`{"n": 7}`); rec.Code != 201 || !strings.Contains(rec.Body.String(), "Created ") {
		t.Errorf("JSON on the page = %d\n%s", rec.Code, rec.Body)
	}
}
