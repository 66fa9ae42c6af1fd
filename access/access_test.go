package access_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
)

func newEngine(t *testing.T, s varplane.Store) *varplane.Engine {
	t.Helper()
	e := varplane.NewEngine(s, varplane.Options{Owners: []varplane.Owner{access.Owner}})
	t.Cleanup(e.Close)
	return e
}

func authorize(az varplane.Authorizer, kind varplane.Kind, scope varplane.Scope, token string) (varplane.Identity, error) {
	return varplane.Authorize(context.Background(), az, varplane.Access{Kind: kind, Scope: scope, Token: token})
}

func wantCode(t *testing.T, what string, err error, code varplane.Code) {
	t.Helper()
	if got := varplane.ErrorCode(err); err == nil || got != code {
		t.Fatalf("%s: err = %v (code %q), want %s", what, err, got, code)
	}
}

func TestCreateAuthorizeRevoke(t *testing.T) {
	for _, o := range stores {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := o.open(t)(t)
			e := newEngine(t, s)
			svc := access.NewService(e)
			az := access.NewAuthorizer(s)

			c, err := svc.Create(ctx, "reader", access.Binding{Kinds: []varplane.Kind{varplane.KindRead}, Prefixes: []string{"app."}, Roles: []string{"r1"}}, access.Root("tester"), "")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(c.Token, access.TokenPrefix) || len(c.Token) < 40 {
				t.Fatalf("token %q is not a long prefixed token", c.Token)
			}
			cases := []struct {
				kind  varplane.Kind
				scope varplane.Scope
				token string
				code  varplane.Code // "" allowed
			}{
				{varplane.KindRead, "app.x", c.Token, ""},
				{varplane.KindIdentify, "", c.Token, ""},
				{varplane.KindMutate, "app.x", c.Token, varplane.CodeForbidden},
				{varplane.KindRead, "app", c.Token, varplane.CodeForbidden},
				{varplane.KindRead, "other.x", c.Token, varplane.CodeForbidden},
				{varplane.KindRead, "app.x", c.Token + "x", varplane.CodeForbidden},
				{varplane.KindRead, "app.x", "", varplane.CodeUnauthorized},
			}
			for _, tc := range cases {
				id, err := authorize(az, tc.kind, tc.scope, tc.token)
				if tc.code == "" {
					if err != nil || id.ID != "reader" || !id.Has("r1") || id.Has("r2") {
						t.Errorf("%s %s: id %+v err %v, want reader with r1", tc.kind, tc.scope, id, err)
					}
					continue
				}
				if varplane.ErrorCode(err) != tc.code {
					t.Errorf("%s %s: err %v, want %s", tc.kind, tc.scope, err, tc.code)
				}
				if err != nil && strings.Contains(err.Error(), c.Token) {
					t.Errorf("error quotes the token: %v", err)
				}
			}

			// Refusals write nothing.
			st0, _ := s.State(ctx, access.Scope)
			_, err = svc.Create(ctx, "reader", access.Binding{}, access.Root("tester"), "")
			wantCode(t, "create an existing id", err, varplane.CodeBadRequest)
			_, err = svc.Create(ctx, "bad id", access.Binding{}, access.Root("tester"), "")
			wantCode(t, "create a bad id", err, varplane.CodeBadRequest)
			_, err = svc.Create(ctx, "k", access.Binding{Kinds: []varplane.Kind{"write"}}, access.Root("tester"), "")
			wantCode(t, "create a bad kind", err, varplane.CodeBadRequest)
			_, err = svc.Create(ctx, "k", access.Binding{Prefixes: []string{"a..b"}}, access.Root("tester"), "")
			wantCode(t, "create a bad prefix", err, varplane.CodeBadRequest)
			_, err = svc.Revoke(ctx, "nobody", access.Root("tester"), "")
			wantCode(t, "revoke an unknown id", err, varplane.CodeNotFound)
			if st, _ := s.State(ctx, access.Scope); st.Generation != st0.Generation {
				t.Fatalf("refusals moved the access scope from %d to %d", st0.Generation, st.Generation)
			}

			list, err := svc.List(ctx)
			if err != nil || len(list) != 1 || list[0].ID != "reader" || list[0].CreatedBy != "tester" {
				t.Fatalf("List = %+v, %v", list, err)
			}
			if _, err := svc.Revoke(ctx, "reader", access.Root("tester"), ""); err != nil {
				t.Fatal(err)
			}
			// Refused at once on the replica that wrote the revocation.
			_, err = authorize(az, varplane.KindRead, "app.x", c.Token)
			wantCode(t, "a revoked token", err, varplane.CodeForbidden)

			// The history holds the digest and the ids, never the token.
			hist, err := e.History(ctx, access.Scope)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(hist)
			if bytes.Contains(raw, []byte(c.Token)) {
				t.Fatal("the access scope's history holds a token")
			}
			if !bytes.Contains(raw, []byte(access.Digest(c.Token))) {
				t.Fatal("the history does not hold the token's digest")
			}
			for _, ev := range hist {
				if ev.Actor != "tester" {
					t.Errorf("event %s actor %q, want tester", ev.Kind, ev.Actor)
				}
			}
		})
	}
}

func TestBootstrap(t *testing.T) {
	for _, o := range stores {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := o.open(t)(t)
			svc := access.NewService(newEngine(t, s))
			az := access.NewAuthorizer(s)
			first, err := svc.Bootstrap(ctx, "root-admin", "migrate", false)
			if err != nil {
				t.Fatal(err)
			}
			id, err := authorize(az, varplane.KindMutate, "any.scope", first.Token)
			if err != nil || id.ID != "root-admin" || !id.Has(access.AdminRole) {
				t.Fatalf("admin: %+v %v", id, err)
			}
			_, err = svc.Bootstrap(ctx, "other-admin", "migrate", false)
			wantCode(t, "a second bootstrap", err, varplane.CodeBadRequest)
			again, err := svc.Bootstrap(ctx, "root-admin", "migrate", true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := authorize(az, varplane.KindRead, "x", first.Token); varplane.ErrorCode(err) != varplane.CodeForbidden {
				t.Fatalf("the replaced admin token: %v, want forbidden", err)
			}
			if _, err := authorize(az, varplane.KindRead, "x", again.Token); err != nil {
				t.Fatal(err)
			}
			hist, _ := s.History(ctx, access.Scope)
			boots := 0
			for _, ev := range hist {
				if ev.Kind == varplane.EventActivated && ev.Reason == access.BootstrapReason {
					boots++
				}
			}
			if boots != 2 {
				t.Fatalf("%d bootstrap activations, want 2", boots)
			}
		})
	}
}

func TestCombine(t *testing.T) {
	ctx := context.Background()
	s := stores[0].open(t)(t)
	svc := access.NewService(newEngine(t, s))
	c, err := svc.Create(ctx, "alice", access.Binding{Kinds: []varplane.Kind{varplane.KindAudit}}, access.Root("t"), "")
	if err != nil {
		t.Fatal(err)
	}
	file, err := access.Scoped([]access.Grant{{Token: "file-ci", ID: "ci", Kinds: []varplane.Kind{varplane.KindRead}}})
	if err != nil {
		t.Fatal(err)
	}
	both := access.Combine(file, access.NewAuthorizer(s))
	cases := []struct {
		name  string
		az    varplane.Authorizer
		kind  varplane.Kind
		token string
		id    string
		code  varplane.Code
	}{
		{"file token", both, varplane.KindRead, "file-ci", "ci", ""},
		{"file decides for its tokens", both, varplane.KindAudit, "file-ci", "", varplane.CodeForbidden},
		{"store token", both, varplane.KindAudit, c.Token, "alice", ""},
		{"store binding applies", both, varplane.KindRead, c.Token, "", varplane.CodeForbidden},
		{"unknown", both, varplane.KindRead, "nope", "", varplane.CodeForbidden},
		{"no token", both, varplane.KindRead, "", "", varplane.CodeUnauthorized},
		{"file only", access.Combine(file, nil), varplane.KindAudit, c.Token, "", varplane.CodeForbidden},
		{"store only", access.Combine(nil, access.NewAuthorizer(s)), varplane.KindRead, "file-ci", "", varplane.CodeForbidden},
		{"neither", access.Combine(nil, nil), varplane.KindRead, "x", "", varplane.CodeForbidden},
	}
	for _, tc := range cases {
		id, err := authorize(tc.az, tc.kind, "s.k", tc.token)
		if tc.code != "" {
			if varplane.ErrorCode(err) != tc.code {
				t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
			}
			continue
		}
		if err != nil || id.ID != tc.id {
			t.Errorf("%s: %+v %v, want %s", tc.name, id, err, tc.id)
		}
	}
}

func TestUnreadableStoreFailsClosed(t *testing.T) {
	_, err := authorize(access.NewAuthorizer(failingStore{stores[0].open(t)(t)}), varplane.KindRead, "a", "tok")
	wantCode(t, "a store that cannot be read", err, varplane.CodeInternal)
}

type failingStore struct{ varplane.Store }

func (failingStore) State(context.Context, varplane.Scope) (*varplane.ScopeState, error) {
	return nil, varplane.Unavailable(errors.New("down"))
}

func TestParseDocument(t *testing.T) {
	d := `"sha256:` + strings.Repeat("a", 64) + `"`
	cases := []struct {
		name, doc string
		ok        bool
	}{
		{"empty", `{"principals":{}}`, true},
		{"one", `{"principals":{"a":{"tokenDigest":` + d + `,"kinds":["read"],"prefixes":["x."],"createdAt":"2026-01-01T00:00:00Z"}}}`, true},
		{"no principals", `{}`, false},
		{"unknown field", `{"principals":{},"x":1}`, false},
		{"trailing data", `{"principals":{}} {}`, false},
		{"short digest", `{"principals":{"a":{"tokenDigest":"sha256:ab","createdAt":"2026-01-01T00:00:00Z"}}}`, false},
		{"shared digest", `{"principals":{"a":{"tokenDigest":` + d + `,"createdAt":"2026-01-01T00:00:00Z"},"b":{"tokenDigest":` + d + `,"createdAt":"2026-01-01T00:00:00Z"}}}`, false},
		{"bad kind", `{"principals":{"a":{"tokenDigest":` + d + `,"kinds":["write"],"createdAt":"2026-01-01T00:00:00Z"}}}`, false},
		{"bad id", `{"principals":{"a b":{"tokenDigest":` + d + `,"createdAt":"2026-01-01T00:00:00Z"}}}`, false},
	}
	for _, tc := range cases {
		_, err := access.ParseDocument([]byte(tc.doc))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("%s: code %q, want bad-request", tc.name, varplane.ErrorCode(err))
		}
	}
}

func TestTokens(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := access.NewToken()
		if seen[tok] || len(tok) != len(access.TokenPrefix)+43 {
			t.Fatalf("token %q repeated or of the wrong length", tok)
		}
		seen[tok] = true
		if d := access.Digest(tok); len(d) != 71 || strings.Contains(d, tok) {
			t.Fatalf("digest %q", d)
		}
	}
}

// TestParseDocumentIsStrict: the access document is decoded by the strict
// decoder: a field name in another case or a field given twice is refused
// (encoding/json alone takes "Principals" for "principals" and keeps the
// last of two).
func TestParseDocumentIsStrict(t *testing.T) {
	for _, doc := range []string{
		`{"Principals":{}}`,
		`{"principals":{},"principals":{}}`,
		`{"principals":{"a":{"TokenDigest":"sha256:` + strings.Repeat("a", 64) + `","createdAt":"2026-01-01T00:00:00Z"}}}`,
	} {
		if _, err := access.ParseDocument([]byte(doc)); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("ParseDocument(%s) = %v, want bad-request", doc, err)
		}
	}
}
