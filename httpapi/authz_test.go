package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
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
	p, _ := newPlaneHub(t, httpapi.Options{Authorizer: rec})
	rev := p.create("a.b", `{"x":1}`)
	p.activate("a.b", rev, 0)
	rec.take()

	type want struct {
		kind    varplane.Kind
		scope   varplane.Scope
		subtree bool
	}
	tests := []struct {
		name, method, target, body string
		want                       []want
	}{
		{"read key", "GET", "/vars?key=a.b", "", []want{{varplane.KindRead, "a.b", false}}},
		{"read group", "GET", "/vars?group=g", "", []want{{varplane.KindRead, "g", false}}},
		{"batch", "GET", "/vars/batch?key=a.b&group=g", "", []want{{varplane.KindRead, "a.b", false}, {varplane.KindRead, "g", false}}},
		{"watch", "GET", "/vars/watch?key=a.b&prefix=t.u&group=g", "", []want{{varplane.KindRead, "a.b", false}, {varplane.KindRead, "t.u", true}, {varplane.KindRead, "g", false}}},
		{"status", "GET", "/vars/admin/status?scope=a.b", "", []want{{varplane.KindAudit, "a.b", false}}},
		{"history", "GET", "/vars/admin/history?scope=c", "", []want{{varplane.KindAudit, "c", false}}},
		{"replay", "GET", "/vars/admin/replay?scope=c.d&toGeneration=1", "", []want{{varplane.KindAudit, "c.d", false}}},
		{"create", "POST", "/vars/admin/revisions", `{"scope":"m.n","document":1}`, []want{{varplane.KindMutate, "m.n", false}}},
		{"validate with scope", "POST", "/vars/admin/validate", `{"scope":"v","document":{}}`, []want{{varplane.KindMutate, "v", false}}},
		{"validate without scope", "POST", "/vars/admin/validate", `{"document":{}}`, []want{{varplane.KindMutate, "", false}}},
		{"activate", "POST", "/vars/admin/activate", jsonf(`{"scope":"a.b","revision":%q,"expectedGeneration":9}`, rev), []want{{varplane.KindMutate, "a.b", false}}},
		{"deactivate", "POST", "/vars/admin/deactivate", `{"scope":"x.y","expectedGeneration":9}`, []want{{varplane.KindMutate, "x.y", false}}},
		{"rollback", "POST", "/vars/admin/rollback", `{"scope":"r.s","expectedGeneration":9}`, []want{{varplane.KindMutate, "r.s", false}}},
		{"bad body is refused before the hook", "POST", "/vars/admin/activate", `{"scope":"a.b"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.target, "/watch") {
				p.watch(tt.target, 50*time.Millisecond, "Authorization", "Bearer tok-123")
			} else {
				p.do(tt.method, tt.target, tt.body, "Authorization", "Bearer tok-123")
			}
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
	p, hub := newPlaneHub(t, httpapi.Options{Authorizer: rec})
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
	if st := hub.Stats(); st.Subscribers != 0 || st.Delivered != 0 {
		t.Errorf("hub stats %+v: a denied watch subscribed", st)
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
	auth, err := access.StaticTokens([]string{"alpha", "beta"})
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
	if _, err := access.StaticTokens([]string{""}); err == nil {
		t.Error("StaticTokens accepted an empty token")
	}
	if _, err := access.StaticTokens([]string{"a", "a"}); err == nil {
		t.Error("StaticTokens accepted a duplicate token")
	}
}
