package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
)

// recorder records every authorization request and answers with deny for
// the scopes in deny.
type recorder struct {
	mu   sync.Mutex
	got  []varplane.Access
	deny map[varplane.Scope]bool
}

func (r *recorder) Authorize(_ context.Context, req varplane.Access) (varplane.Identity, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, req)
	if r.deny[req.Scope] {
		return varplane.Identity{}, varplane.ErrForbidden
	}
	return varplane.Identity{ID: "recorder"}, nil
}

func (r *recorder) take() []varplane.Access {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

func TestAuthorizationKindsAndScopes(t *testing.T) {
	rec := &recorder{}
	watch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	p := newPlane(t, httpapi.Options{Authorizer: rec, Watch: watch})
	rev := p.create("a.b", `{"x":1}`)
	p.activate("a.b", rev, 0)
	rec.take()

	type want struct {
		kind    httpapi.Kind
		scope   varplane.Scope
		subtree bool
	}
	tests := []struct {
		name, method, target, body string
		want                       []want
	}{
		{"read key", "GET", "/vars?key=a.b", "", []want{{httpapi.KindRead, "a.b", false}}},
		{"read group", "GET", "/vars?group=g", "", []want{{httpapi.KindRead, "g", false}}},
		{"batch", "GET", "/vars/batch?key=a.b&group=g", "", []want{{httpapi.KindRead, "a.b", false}, {httpapi.KindRead, "g", false}}},
		{"watch", "GET", "/vars/watch?key=a.b&prefix=t.u&group=g", "", []want{{httpapi.KindRead, "a.b", false}, {httpapi.KindRead, "t.u", true}, {httpapi.KindRead, "g", false}}},
		{"status", "GET", "/vars/admin/status?scope=a.b", "", []want{{httpapi.KindAudit, "a.b", false}}},
		{"history", "GET", "/vars/admin/history?scope=c", "", []want{{httpapi.KindAudit, "c", false}}},
		{"replay", "GET", "/vars/admin/replay?scope=c.d&toGeneration=1", "", []want{{httpapi.KindAudit, "c.d", false}}},
		{"create", "POST", "/vars/admin/revisions", `{"scope":"m.n","document":1}`, []want{{httpapi.KindMutate, "m.n", false}}},
		{"validate with scope", "POST", "/vars/admin/validate", `{"scope":"v","document":{}}`, []want{{httpapi.KindMutate, "v", false}}},
		{"validate without scope", "POST", "/vars/admin/validate", `{"document":{}}`, []want{{httpapi.KindMutate, "", false}}},
		{"activate", "POST", "/vars/admin/activate", jsonf(`{"scope":"a.b","revision":%q,"expectedGeneration":9}`, rev), []want{{httpapi.KindMutate, "a.b", false}}},
		{"deactivate", "POST", "/vars/admin/deactivate", `{"scope":"x.y","expectedGeneration":9}`, []want{{httpapi.KindMutate, "x.y", false}}},
		{"rollback", "POST", "/vars/admin/rollback", `{"scope":"r.s","expectedGeneration":9}`, []want{{httpapi.KindMutate, "r.s", false}}},
		{"bad body is refused before the hook", "POST", "/vars/admin/activate", `{"scope":"a.b"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.do(tt.method, tt.target, tt.body, "Authorization", "Bearer tok-123")
			got := rec.take()
			if len(got) != len(tt.want) {
				t.Fatalf("authorize calls = %+v, want %+v", got, tt.want)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Kind != w.kind || g.Scope != w.scope || g.Subtree != w.subtree {
					t.Errorf("call %d = {%s %q subtree=%v}, want {%s %q subtree=%v}", i, g.Kind, g.Scope, g.Subtree, w.kind, w.scope, w.subtree)
				}
				if g.Token != "tok-123" {
					t.Errorf("call %d: token %q", i, g.Token)
				}
			}
		})
	}
}

func TestDeniedRequestsChangeNothing(t *testing.T) {
	rec := &recorder{deny: map[varplane.Scope]bool{"a.b": true, "t.u": true}}
	called := false
	watch := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })
	p := newPlane(t, httpapi.Options{Authorizer: rec, Watch: watch})
	for _, c := range []struct{ method, target, body string }{
		{"GET", "/vars?key=a.b", ""},
		{"GET", "/vars/batch?key=c.d&key=a.b", ""},
		{"GET", "/vars/watch?key=c.d&prefix=t.u", ""},
		{"GET", "/vars/admin/history?scope=a.b", ""},
		{"POST", "/vars/admin/revisions", `{"scope":"a.b","document":1}`},
		{"POST", "/vars/admin/deactivate", `{"scope":"a.b","expectedGeneration":0}`},
	} {
		wantError(t, p.do(c.method, c.target, c.body), 403, varplane.CodeForbidden)
	}
	if called {
		t.Error("watch handler ran for a denied request")
	}
	if scopes, _ := p.store.Scopes(t.Context()); len(scopes) != 0 {
		t.Errorf("scopes = %v after denied mutations, want none", scopes)
	}
}

func TestFailingAuthorizerFailsClosed(t *testing.T) {
	tests := []struct {
		name string
		fn   varplane.AuthorizerFunc
	}{
		{"plain error", func(context.Context, varplane.Access) (varplane.Identity, error) {
			return varplane.Identity{}, errors.New("ldap down: secret-password")
		}},
		{"wrapped plain error", func(context.Context, varplane.Access) (varplane.Identity, error) {
			return varplane.Identity{}, errors.Join(errors.New("secret-password"), context.DeadlineExceeded)
		}},
		{"panic", func(context.Context, varplane.Access) (varplane.Identity, error) { panic("secret-password") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlane(t, httpapi.Options{Authorizer: tt.fn})
			for _, c := range []struct{ method, target, body string }{
				{"GET", "/vars?key=a.b", ""},
				{"GET", "/vars/admin/status?scope=a.b", ""},
				{"POST", "/vars/admin/revisions", `{"scope":"a.b","document":1}`},
			} {
				rec := p.do(c.method, c.target, c.body)
				b := wantError(t, rec, 500, varplane.CodeInternal)
				if b.Error != "internal error" || strings.Contains(rec.Body.String(), "secret") {
					t.Errorf("%s %s: body %s leaks the cause", c.method, c.target, rec.Body)
				}
			}
			if scopes, _ := p.store.Scopes(t.Context()); len(scopes) != 0 {
				t.Errorf("scopes = %v, want none: a failing authorizer must not let writes through", scopes)
			}
		})
	}
}

func TestStaticTokens(t *testing.T) {
	auth, err := httpapi.StaticTokens([]string{"alpha", "beta"})
	if err != nil {
		t.Fatal(err)
	}
	p := newPlane(t, httpapi.Options{Authorizer: auth})
	tests := []struct {
		name   string
		header []string
		status int
	}{
		{"no token", nil, 401},
		{"basic scheme", []string{"Authorization", "Basic YWxwaGE6"}, 401},
		{"wrong token", []string{"Authorization", "Bearer gamma"}, 403},
		{"prefix of a token", []string{"Authorization", "Bearer alph"}, 403},
		{"token", []string{"Authorization", "Bearer alpha"}, 404},
		{"scheme in lower case", []string{"Authorization", "bearer beta"}, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := p.do("GET", "/vars?key=a.b", "", tt.header...)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if strings.Contains(rec.Body.String(), "gamma") || strings.Contains(rec.Body.String(), "alph") {
				t.Errorf("body echoes the token: %s", rec.Body)
			}
		})
	}
	if _, err := httpapi.StaticTokens([]string{""}); err == nil {
		t.Error("StaticTokens accepted an empty token")
	}
	if _, err := httpapi.StaticTokens([]string{"a", "a"}); err == nil {
		t.Error("StaticTokens accepted a duplicate token")
	}
}

func TestScopedAuthorizer(t *testing.T) {
	auth, err := httpapi.Scoped([]httpapi.Grant{
		{Token: "reader", Kinds: []httpapi.Kind{httpapi.KindRead}},
		{Token: "agentic-ops", Kinds: []httpapi.Kind{httpapi.KindRead, httpapi.KindMutate}, Prefixes: []string{"agentic.", "billing"}},
		{Token: "auditor", Kinds: []httpapi.Kind{httpapi.KindAudit}, Prefixes: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		token string
		kind  httpapi.Kind
		scope varplane.Scope
		want  varplane.Code // "" = allowed
	}{
		{"reader", httpapi.KindRead, "anything.at.all", ""},
		{"reader", httpapi.KindMutate, "a.b", varplane.CodeForbidden},
		{"reader", httpapi.KindAudit, "a.b", varplane.CodeForbidden},
		{"agentic-ops", httpapi.KindMutate, "agentic.lanes.vinci", ""},
		{"agentic-ops", httpapi.KindMutate, "agentic", varplane.CodeForbidden}, // "agentic." covers below only
		{"agentic-ops", httpapi.KindMutate, "agenticx.y", varplane.CodeForbidden},
		{"agentic-ops", httpapi.KindRead, "billing", ""},
		{"agentic-ops", httpapi.KindRead, "billing.eu", ""},
		{"agentic-ops", httpapi.KindRead, "billingx", varplane.CodeForbidden},
		{"agentic-ops", httpapi.KindMutate, "", varplane.CodeForbidden}, // scope-less validate
		{"agentic-ops", httpapi.KindAudit, "agentic.x", varplane.CodeForbidden},
		{"auditor", httpapi.KindAudit, "z", ""},
		{"auditor", httpapi.KindRead, "z", varplane.CodeForbidden},
		{"", httpapi.KindRead, "z", varplane.CodeUnauthorized},
		{"nobody", httpapi.KindRead, "z", varplane.CodeForbidden},
	}
	for _, tt := range tests {
		_, err := auth.Authorize(context.Background(), varplane.Access{Kind: tt.kind, Scope: tt.scope, Token: tt.token})
		if got := code(err); got != tt.want {
			t.Errorf("%s %s %q: code %q, want %q (%v)", tt.token, tt.kind, tt.scope, got, tt.want, err)
		}
	}
	if _, err := httpapi.Scoped([]httpapi.Grant{{Token: "x", Kinds: []httpapi.Kind{"write"}}}); err == nil {
		t.Error("Scoped accepted an unknown kind")
	}
}

func code(err error) varplane.Code {
	if err == nil {
		return ""
	}
	return varplane.ErrorCode(err)
}

func TestParseTokens(t *testing.T) {
	in := `# tokens for the staging plane

ci-token
reader-token kinds=read prefixes=agentic.,billing   # trailing comment
alice-token id=alice roles=system:configuration:get,system:configuration:list kinds=read,audit
`
	grants, err := httpapi.ParseTokens(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 3 {
		t.Fatalf("grants = %+v, want 3", grants)
	}
	if g := grants[0]; g.Token != "ci-token" || g.Kinds != nil || g.Prefixes != nil {
		t.Errorf("grant 0 = %+v", g)
	}
	if g := grants[1]; g.Token != "reader-token" || jsonString(g.Kinds) != `["read"]` || jsonString(g.Prefixes) != `["agentic.","billing"]` {
		t.Errorf("grant 1 = %+v", g)
	}
	if g := grants[2]; g.ID != "alice" || jsonString(g.Roles) != `["system:configuration:get","system:configuration:list"]` || len(g.Kinds) != 2 {
		t.Errorf("grant 2 = %+v", g)
	}

	bad := []struct{ name, in string }{
		{"unknown attribute", "zq9 kind=read\n"},
		{"attribute twice", "zq9 kinds=read kinds=audit\n"},
		{"unknown kind", "zq9 kinds=write\n"},
		{"stray word", "zq9 other-secret\n"},
		{"empty value", "zq9 kinds=\n"},
		{"duplicate token", "zq9\nzq9\n"},
		{"attribute first", "kinds=read\n"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httpapi.ParseTokens(strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), "zq9") || strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q echoes a token", err)
			}
		})
	}
}

func TestLoadTokenFile(t *testing.T) {
	path := t.TempDir() + "/tokens"
	if err := writeFile(path, "# comment\n\nalpha\nbeta kinds=read\n"); err != nil {
		t.Fatal(err)
	}
	grants, err := httpapi.LoadTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := httpapi.Scoped(grants)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Authorize(context.Background(), varplane.Access{Kind: httpapi.KindMutate, Scope: "a", Token: "alpha"}); err != nil {
		t.Errorf("alpha mutate: %v", err)
	}
	if _, err := auth.Authorize(context.Background(), varplane.Access{Kind: httpapi.KindMutate, Scope: "a", Token: "beta"}); code(err) != varplane.CodeForbidden {
		t.Errorf("beta mutate: %v, want forbidden", err)
	}
	if _, err := httpapi.LoadTokenFile(path + ".missing"); err == nil {
		t.Error("missing file loaded")
	}
}
