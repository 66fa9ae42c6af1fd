package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// TestAccessNoEscalation: through the access API, a principal is given
// only what its creator holds, and administration is a role of its own
// (issue 35 item 1). Every refusal is 403 forbidden and leaves the access
// document as it was.
func TestAccessNoEscalation(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	e := varplane.NewEngine(s, varplane.Options{Owners: []varplane.Owner{access.Owner}})
	t.Cleanup(e.Close)
	file, err := access.Scoped([]access.Grant{
		{Token: "root", ID: "root"}, // bare: every kind, scope and role
		// The token: every kind, no role.
		{Token: "mutator", ID: "mutator", Kinds: []varplane.Kind{varplane.KindRead, varplane.KindAudit, varplane.KindMutate}},
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := access.NewService(e)
	api := httpapi.NewHandler(e, httpapi.Options{Base: "/vars", Authorizer: access.Combine(file, access.NewAuthorizer(s)), Logger: slog.New(slog.DiscardHandler), Access: svc})
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	create := func(token string, body map[string]any) (int, access.Created) {
		t.Helper()
		st, b := accessCall(t, srv, "POST", "/vars/access/tokens", token, body)
		var c access.Created
		_ = json.Unmarshal(b, &c)
		return st, c
	}
	// A narrowed administrator in the store: read and audit below app.,
	// admin and reviewer; and a wide principal it did not create.
	st, narrow := create("root", map[string]any{"id": "narrow", "kinds": []string{"read", "audit"}, "prefixes": []string{"app."}, "roles": []string{"admin", "reviewer"}})
	if st != 201 {
		t.Fatalf("create narrow: %d", st)
	}
	if st, _ := create("root", map[string]any{"id": "wide", "roles": []string{"deployer"}}); st != 201 {
		t.Fatalf("create wide: %d", st)
	}

	for _, tc := range []struct {
		name, token string
		body        map[string]any // nil: revoke "wide"
	}{
		{"every kind and no role gives reviewer", "mutator", map[string]any{"id": "x", "roles": []string{"reviewer"}}},
		{"every kind and no role gives admin", "mutator", map[string]any{"id": "x", "roles": []string{"admin"}}},
		{"every kind and no role gives a bare principal", "mutator", map[string]any{"id": "x"}},
		{"a narrowed admin gives a kind it lacks", narrow.Token, map[string]any{"id": "x", "kinds": []string{"mutate"}, "prefixes": []string{"app."}}},
		{"a narrowed admin gives every kind", narrow.Token, map[string]any{"id": "x", "prefixes": []string{"app."}}},
		{"a narrowed admin gives another prefix", narrow.Token, map[string]any{"id": "x", "kinds": []string{"read"}, "prefixes": []string{"billing."}}},
		{"a narrowed admin gives every scope", narrow.Token, map[string]any{"id": "x", "kinds": []string{"read"}}},
		{"a narrowed admin gives a role it lacks", narrow.Token, map[string]any{"id": "x", "kinds": []string{"read"}, "prefixes": []string{"app."}, "roles": []string{"deployer"}}},
		{"a narrowed admin gives *", narrow.Token, map[string]any{"id": "x", "kinds": []string{"read"}, "prefixes": []string{"app."}, "roles": []string{"*"}}},
		{"a narrowed admin revokes a wider principal", narrow.Token, nil},
		{"every kind and no role revokes", "mutator", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := s.State(context.Background(), access.Scope)
			if err != nil {
				t.Fatal(err)
			}
			var code int
			var body []byte
			if tc.body == nil {
				code, body = accessCall(t, srv, "DELETE", "/vars/access/tokens/wide", tc.token, nil)
			} else {
				code, body = accessCall(t, srv, "POST", "/vars/access/tokens", tc.token, tc.body)
			}
			var e struct{ Code string }
			_ = json.Unmarshal(body, &e)
			if code != 403 || e.Code != string(varplane.CodeForbidden) {
				t.Fatalf("%d %s, want 403 forbidden", code, body)
			}
			after, err := s.State(context.Background(), access.Scope)
			if err != nil {
				t.Fatal(err)
			}
			if after.Generation != before.Generation {
				t.Fatalf("the access scope moved from generation %d to %d", before.Generation, after.Generation)
			}
		})
	}
	// Within its own: allowed.
	if st, _ := create(narrow.Token, map[string]any{"id": "app-reader", "kinds": []string{"read"}, "prefixes": []string{"app.web"}, "roles": []string{"reviewer"}}); st != 201 {
		t.Fatalf("a narrowed admin gives what it holds: %d, want 201", st)
	}
	if st, b := accessCall(t, srv, "DELETE", "/vars/access/tokens/app-reader", narrow.Token, nil); st != 200 {
		t.Fatalf("a narrowed admin revokes what it could create: %d %s", st, b)
	}
	if st, _ := accessCall(t, srv, "GET", "/vars/access/tokens", "mutator", nil); st != 403 {
		t.Fatalf("list without the admin role: %d, want 403", st)
	}
}
