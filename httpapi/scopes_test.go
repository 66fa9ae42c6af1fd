package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
)

func scopeNames(items []varplane.ScopeSummary) string {
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = string(it.Scope)
	}
	return strings.Join(names, " ")
}

// TestScopesRoute lists, pages, filters by prefix and by authorization, and
// refuses bad parameters.
func TestScopesRoute(t *testing.T) {
	auth, err := access.Scoped([]access.Grant{
		{Token: "all"},
		{Token: "agentic", Kinds: []varplane.Kind{varplane.KindAudit}, Prefixes: []string{"agentic."}},
		{Token: "reader", Kinds: []varplane.Kind{varplane.KindRead}},
		{Token: "billing-reader", Kinds: []varplane.Kind{varplane.KindRead}, Prefixes: []string{"billing."}},
		{Token: "writer", Kinds: []varplane.Kind{varplane.KindMutate}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := newPlane(t, httpapi.Options{Authorizer: auth})
	all := []string{"Authorization", "Bearer all"}
	for _, sc := range []string{"agentic.lanes.vinci", "agentic", "agentic-x.y", "agentic.b", "billing.z", "zeta"} {
		rec := p.do("POST", "/vars/admin/revisions", `{"scope":"`+sc+`","document":{"`+sc+`.v":1}}`, append(all, "Content-Type", "application/json")...)
		if rec.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", sc, rec.Code, rec.Body)
		}
		var res varplane.CreateRevisionResult
		mustJSON(t, rec.Body.Bytes(), &res)
		if sc == "agentic-x.y" {
			continue // stays never activated
		}
		rec = p.do("POST", "/vars/admin/activate", jsonf(`{"scope":%q,"revision":%q,"expectedGeneration":0}`, sc, res.Revision), append(all, "Content-Type", "application/json")...)
		if rec.Code != http.StatusOK {
			t.Fatalf("activate %s: %d %s", sc, rec.Code, rec.Body)
		}
	}
	rec := p.do("POST", "/vars/admin/deactivate", `{"scope":"zeta","expectedGeneration":1}`, append(all, "Content-Type", "application/json")...)
	if rec.Code != http.StatusOK {
		t.Fatalf("deactivate: %d %s", rec.Code, rec.Body)
	}

	list := func(t *testing.T, token, query string) varplane.ScopePage {
		t.Helper()
		rec := p.do("GET", "/vars/admin/scopes"+query, "", "Authorization", "Bearer "+token)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET scopes%s as %s: %d %s", query, token, rec.Code, rec.Body)
		}
		var res varplane.ScopePage
		mustJSON(t, rec.Body.Bytes(), &res)
		return res
	}
	tests := []struct {
		name, token, query string
		want, next         string
	}{
		{"everything", "all", "", "agentic agentic-x.y agentic.b agentic.lanes.vinci billing.z zeta", ""},
		{"prefix is a subtree", "all", "?prefix=agentic", "agentic agentic.b agentic.lanes.vinci", ""},
		{"prefix of a key", "all", "?prefix=agentic.lanes", "agentic.lanes.vinci", ""},
		{"empty prefix is everything", "all", "?prefix=&limit=2", "agentic agentic-x.y", "agentic-x.y"},
		{"page two", "all", "?after=agentic-x.y&limit=2", "agentic.b agentic.lanes.vinci", "agentic.lanes.vinci"},
		{"last page", "all", "?after=agentic.lanes.vinci&limit=2", "billing.z zeta", ""},
		{"exact page has no next", "all", "?prefix=agentic&limit=3", "agentic agentic.b agentic.lanes.vinci", ""},
		{"after within a prefix", "all", "?prefix=agentic&after=agentic.b", "agentic.lanes.vinci", ""},
		{"narrow token sees its scopes only", "agentic", "", "agentic.b agentic.lanes.vinci", ""},
		{"narrow token pages over its scopes", "agentic", "?limit=1", "agentic.b", "agentic.b"},
		{"read-only token sees what it may read", "reader", "", "agentic agentic-x.y agentic.b agentic.lanes.vinci billing.z zeta", ""},
		{"read-only token narrowed to a prefix", "billing-reader", "", "billing.z", ""},
		{"a token that may neither read nor audit sees nothing", "writer", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := list(t, tt.token, tt.query)
			if got := scopeNames(res.Items); got != tt.want || string(res.Next) != tt.next {
				t.Fatalf("scopes = %q next %q, want %q next %q", got, res.Next, tt.want, tt.next)
			}
		})
	}
	t.Run("items carry state and last change", func(t *testing.T) {
		byScope := map[varplane.Scope]varplane.ScopeSummary{}
		for _, it := range list(t, "all", "").Items {
			byScope[it.Scope] = it
		}
		v := byScope["agentic.lanes.vinci"]
		if !v.Active || v.Generation != 1 || !strings.HasPrefix(string(v.Revision), "sha256:") ||
			v.LastChange == nil || v.LastChange.Kind != varplane.EventActivated || v.LastChange.Actor != "token-1" || v.LastChange.Timestamp.IsZero() {
			t.Errorf("active item = %+v (%+v)", v, v.LastChange)
		}
		z := byScope["zeta"]
		if z.Active || z.Generation != 2 || z.Revision != "" || z.LastChange == nil || z.LastChange.Kind != varplane.EventDeactivated || z.LastChange.Generation != 2 {
			t.Errorf("deactivated item = %+v (%+v)", z, z.LastChange)
		}
		if n := byScope["agentic-x.y"]; n.Active || n.Generation != 0 || n.LastChange != nil {
			t.Errorf("never activated item = %+v", n)
		}
	})
	t.Run("a reader's items carry no last change", func(t *testing.T) {
		items := list(t, "billing-reader", "").Items
		if len(items) != 1 || !items[0].Active || items[0].Generation != 1 || !strings.HasPrefix(string(items[0].Revision), "sha256:") || items[0].LastChange != nil {
			t.Fatalf("a reader's items = %+v", items)
		}
		for _, it := range list(t, "reader", "").Items {
			if it.LastChange != nil {
				t.Errorf("a reader sees the last change of %s: %+v", it.Scope, it.LastChange)
			}
		}
	})
	t.Run("refusals", func(t *testing.T) {
		wantError(t, p.do("GET", "/vars/admin/scopes", ""), 401, varplane.CodeUnauthorized)
		wantError(t, p.do("GET", "/vars/admin/scopes", "", "Authorization", "Bearer nobody"), 403, varplane.CodeForbidden)
		for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?prefix=a..b", "?after=a%20b", "?limit=1&limit=2"} {
			wantError(t, p.do("GET", "/vars/admin/scopes"+q, "", all...), 400, varplane.CodeBadRequest)
		}
	})
}

// TestWatchEverything: all=1 is the Everything target, every scope,
// authorized as read on the empty scope's subtree: a "*" or unnarrowed
// grant may, a grant narrowed to prefixes may not.
func TestWatchEverything(t *testing.T) {
	auth, err := access.Scoped([]access.Grant{
		{Token: "star", Kinds: []varplane.Kind{varplane.KindRead}, Prefixes: []string{"*"}},
		{Token: "bare"},
		{Token: "agentic", Kinds: []varplane.Kind{varplane.KindRead}, Prefixes: []string{"agentic.", "agentic"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, hub := newPlaneHub(t, httpapi.Options{Authorizer: auth})
	if _, err := p.engine.Publish(t.Context(), varplane.PublishRequest{Scope: "zeta.k", Document: json.RawMessage(`1`), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"star", "bare"} {
		// Everything is the one target: every scope's head is streamed.
		rec := p.watch("/vars/watch?all=1", 200*time.Millisecond, "Authorization", "Bearer "+token)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "id: zeta.k@1") {
			t.Fatalf("%s: status %d %s", token, rec.Code, rec.Body)
		}
	}
	delivered := hub.Stats().Delivered
	wantError(t, p.do("GET", "/vars/watch?all=1", "", "Authorization", "Bearer agentic"), 403, varplane.CodeForbidden)
	if hub.Stats().Delivered != delivered {
		t.Fatal("a refused watch was streamed")
	}
	if rec := p.watch("/vars/watch?prefix=agentic", 50*time.Millisecond, "Authorization", "Bearer agentic"); rec.Code != 200 {
		t.Fatalf("narrow prefix watch: %d", rec.Code)
	}
	wantError(t, p.do("GET", "/vars/watch?prefix=", "", "Authorization", "Bearer star"), 400, varplane.CodeBadRequest)
}

// TestScopesLeaveOutInternal: the project's own records (change requests,
// policies, principals) are left out of the scope list unless asked for
// with internal=true or named by the prefix.
func TestScopesLeaveOutInternal(t *testing.T) {
	p := newPlane(t, httpapi.Options{Authorizer: varplane.AllowAll})
	for _, sc := range []string{"app.a", "varplane-control.change.c1", "varplane.access", "varplanex.y"} {
		rec := p.do("POST", "/vars/admin/publish", jsonf(`{"scope":%q,"document":{"n":1},"expectedGeneration":0}`, sc), "Content-Type", "application/json")
		if rec.Code != http.StatusOK {
			t.Fatalf("publish %s: %d %s", sc, rec.Code, rec.Body)
		}
	}
	for _, tc := range []struct{ query, want string }{
		{"", "app.a varplanex.y"},
		{"?internal=false", "app.a varplanex.y"},
		{"?internal=true", "app.a varplane-control.change.c1 varplane.access varplanex.y"},
		{"?prefix=varplane-control", "varplane-control.change.c1"},
		{"?prefix=varplane", "varplane.access"},
	} {
		rec := p.do("GET", "/vars/admin/scopes"+tc.query, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("GET scopes%s: %d %s", tc.query, rec.Code, rec.Body)
		}
		var page varplane.ScopePage
		mustJSON(t, rec.Body.Bytes(), &page)
		if got := scopeNames(page.Items); got != tc.want {
			t.Errorf("scopes%s = %q, want %q", tc.query, got, tc.want)
		}
	}
	if rec := p.do("GET", "/vars/admin/scopes?internal=yes", ""); rec.Code != http.StatusBadRequest {
		t.Fatalf("internal=yes: %d", rec.Code)
	}
}
