package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/file"
)

// adminServer serves the route table over a file store (which replays) and
// returns an Admin of it.
func adminServer(t *testing.T, auth varplane.Authorizer, token string) *client.Admin {
	t.Helper()
	st, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := varplane.NewEngine(st, varplane.Options{})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: auth, DisableOps: true, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); api.Close(); e.Close(); _ = st.Close() })
	a, err := client.NewAdmin(srv.URL, client.AdminOptions{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAdmin drives every admin and audit route through the SDK and checks
// the engine's result types and the errors' details.
func TestAdmin(t *testing.T) {
	ctx := context.Background()
	a := adminServer(t, varplane.AllowAll, "")
	const key varplane.Scope = "agentic.lanes.vinci"

	v, err := a.Validate(ctx, varplane.ValidateRequest{Scope: "agentic", Document: json.RawMessage(`{"other.x":1}`)})
	if err != nil || v.Valid || len(v.Issues) != 1 {
		t.Fatalf("Validate = %+v, %v; want one issue", v, err)
	}
	c, err := a.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: key, Document: json.RawMessage(`{"n":1}`), Actor: "ops", Reason: "first"})
	if err != nil || !c.Created || c.Scope != key || c.Generation != 0 {
		t.Fatalf("CreateRevision = %+v, %v", c, err)
	}
	act, err := a.Activate(ctx, varplane.ActivateRequest{Scope: key, Revision: c.Revision})
	if err != nil || act.Generation != 1 || act.Revision != c.Revision || act.EffectiveAt.IsZero() {
		t.Fatalf("Activate = %+v, %v", act, err)
	}
	_, err = a.Activate(ctx, varplane.ActivateRequest{Scope: key, Revision: c.Revision})
	var ve *varplane.Error
	if !errors.As(err, &ve) || !errors.Is(err, varplane.ErrConflict) || ve.Current == nil || *ve.Current != 1 || ve.Expected == nil || *ve.Expected != 0 {
		t.Fatalf("stale Activate = %v (%+v), want a conflict at 1", err, ve)
	}
	pub, err := a.Publish(ctx, varplane.PublishRequest{Scope: key, Document: json.RawMessage(`{"n":2}`), ExpectedGeneration: 1})
	if err != nil || !pub.Created || pub.Generation != 2 {
		t.Fatalf("Publish = %+v, %v", pub, err)
	}
	_, err = a.Publish(ctx, varplane.PublishRequest{Scope: "agentic", Document: json.RawMessage(`{"other.x":1}`)})
	if !errors.As(err, &ve) || !errors.Is(err, varplane.ErrInvalid) || len(ve.Issues) == 0 {
		t.Fatalf("invalid Publish = %v, want revision-invalid with issues", err)
	}
	rb, err := a.Rollback(ctx, varplane.RollbackRequest{Scope: key, ExpectedGeneration: 2})
	if err != nil || rb.Generation != 3 || rb.Revision != c.Revision {
		t.Fatalf("Rollback = %+v, %v", rb, err)
	}
	g := varplane.Generation(2)
	rb, err = a.Rollback(ctx, varplane.RollbackRequest{Scope: key, ExpectedGeneration: 3, ToGeneration: &g})
	if err != nil || rb.Generation != 4 || rb.Revision != pub.Revision {
		t.Fatalf("Rollback to generation 2 = %+v, %v", rb, err)
	}
	st, err := a.Status(ctx, key)
	if err != nil || !st.Active || st.Generation != 4 || st.Revision != pub.Revision || st.Source != "file" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	r, err := a.Read(ctx, key, "")
	if err != nil || r.Generation != 4 || r.Revision != pub.Revision {
		t.Fatalf("Read = %+v, %v", r, err)
	}
	if doc, err := r.Document(key); err != nil || string(doc) != `{"n":2}` {
		t.Fatalf("Read document = %s, %v", doc, err)
	}
	if r, err := a.Read(ctx, key, pub.Revision); err != nil || !r.NotModified || r.Revision != pub.Revision {
		t.Fatalf("Read If-None-Match = %+v, %v", r, err)
	}
	if _, err := a.Read(ctx, "agentic", ""); !errors.Is(err, varplane.ErrNoHead) {
		t.Fatalf("Read of a headless group = %v, want no-head", err)
	}
	rp, err := a.Replay(ctx, key, 2)
	if err != nil || !rp.Active || rp.Revision != pub.Revision || string(rp.Document) != `{"n":2}` {
		t.Fatalf("Replay = %+v, %v", rp, err)
	}
	if _, err := a.Replay(ctx, key, 99); !errors.Is(err, varplane.ErrNotFound) {
		t.Fatalf("Replay past the end = %v, want not-found", err)
	}
	d, err := a.Deactivate(ctx, varplane.DeactivateRequest{Scope: "agentic", ExpectedGeneration: 0, Reason: "off"})
	if err != nil || d.Generation != 1 || len(d.Cascade) != 1 || d.Cascade[0].Scope != key || d.Cascade[0].Generation != 5 {
		t.Fatalf("Deactivate = %+v, %v", d, err)
	}
	h, err := a.History(ctx, key)
	if err != nil || len(h) != 7 || h[0].Kind != varplane.EventRevisionCreated || h[0].Actor != "ops" || !h[0].Unauthenticated || h[0].Reason != "first" {
		t.Fatalf("History = %d events %+v, %v", len(h), h, err)
	}
	page, err := a.Scopes(ctx, client.ScopesQuery{Limit: 1})
	if err != nil || len(page.Items) != 1 || page.Items[0].Scope != "agentic" || page.Next != "agentic" {
		t.Fatalf("Scopes page 1 = %+v, %v", page, err)
	}
	all, err := a.AllScopes(ctx, "")
	if err != nil || len(all) != 2 || all[1].Scope != key || all[1].Active || all[1].LastChange == nil || all[1].LastChange.Kind != varplane.EventDeactivated {
		t.Fatalf("AllScopes = %+v, %v", all, err)
	}
	if _, err := a.Status(ctx, "a..b"); !errors.Is(err, varplane.ErrBadRequest) {
		t.Fatalf("Status of a bad scope = %v", err)
	}
	if _, err := a.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: key, Document: json.RawMessage(`1`), Owner: "x"}); !errors.Is(err, varplane.ErrBadRequest) {
		t.Fatalf("CreateRevision with an owner = %v, want bad-request", err)
	}

	t.Run("revision prefixes", func(t *testing.T) {
		hex := strings.TrimPrefix(string(pub.Revision), "sha256:")
		for _, in := range []string{string(pub.Revision), hex[:6], "sha256:" + hex[:10]} {
			if got, err := a.ResolveRevision(ctx, key, in); err != nil || got != pub.Revision {
				t.Errorf("ResolveRevision(%q) = %q, %v", in, got, err)
			}
		}
		for _, in := range []string{"abc", "XYZW", "sha256:", strings.Repeat("a", 65)} {
			if _, err := a.ResolveRevision(ctx, key, in); !errors.Is(err, varplane.ErrBadRequest) {
				t.Errorf("ResolveRevision(%q) = %v, want bad-request", in, err)
			}
		}
		missing := "ffff"
		if strings.HasPrefix(hex, missing) || strings.HasPrefix(strings.TrimPrefix(string(c.Revision), "sha256:"), missing) {
			missing = "eeee"
		}
		if _, err := a.ResolveRevision(ctx, key, missing); !errors.Is(err, varplane.ErrNotFound) {
			t.Errorf("ResolveRevision(%q) = %v, want not-found", missing, err)
		}
	})
}

// TestMatchRevision: an ambiguous prefix is refused with its candidates.
func TestMatchRevision(t *testing.T) {
	r1 := varplane.Revision("sha256:abcd1" + strings.Repeat("0", 59))
	r2 := varplane.Revision("sha256:abcd2" + strings.Repeat("0", 59))
	evs := []varplane.Event{{Revision: r1}, {Revision: r2}, {Revision: r1}, {}}
	if got, err := client.MatchRevision(evs, "abcd1"); err != nil || got != r1 {
		t.Fatalf("MatchRevision(abcd1) = %q, %v", got, err)
	}
	_, err := client.MatchRevision(evs, "abcd")
	if !errors.Is(err, varplane.ErrBadRequest) || !strings.Contains(err.Error(), string(r1)) || !strings.Contains(err.Error(), string(r2)) {
		t.Fatalf("MatchRevision(abcd) = %v, want both candidates", err)
	}
}

// TestAdminAuthorization: a token's refusals come back as their codes, and
// the listing holds what the token may audit or read.
func TestAdminAuthorization(t *testing.T) {
	auth, err := access.Scoped([]access.Grant{
		{Token: "ops"},
		{Token: "reader", Kinds: []varplane.Kind{varplane.KindRead}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ops := adminServer(t, auth, "ops")
	if _, err := ops.Publish(ctx, varplane.PublishRequest{Scope: "a.b", Document: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	reader, err := client.NewAdmin(strings.TrimSuffix(ops.URL(""), "/vars"), client.AdminOptions{Token: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Status(ctx, "a.b"); !errors.Is(err, varplane.ErrForbidden) {
		t.Fatalf("reader Status = %v, want forbidden", err)
	}
	// A reader lists what it may read, without who changed it last.
	if page, err := reader.Scopes(ctx, client.ScopesQuery{}); err != nil || len(page.Items) != 1 || page.Items[0].Scope != "a.b" || page.Items[0].LastChange != nil {
		t.Fatalf("reader Scopes = %+v, %v, want a.b without its last change", page, err)
	}
	anon, _ := client.NewAdmin(strings.TrimSuffix(ops.URL(""), "/vars"), client.AdminOptions{})
	if _, err := anon.Scopes(ctx, client.ScopesQuery{}); varplane.ErrorCode(err) != varplane.CodeUnauthorized {
		t.Fatalf("anonymous Scopes = %v, want unauthorized", err)
	}
}

// TestNewAdmin refuses what it cannot send.
func TestNewAdmin(t *testing.T) {
	for _, tt := range []struct {
		url  string
		opts client.AdminOptions
	}{
		{"ftp://x", client.AdminOptions{}},
		{"/relative", client.AdminOptions{}},
		{"http://x?q=1", client.AdminOptions{}},
		{"http://x", client.AdminOptions{Base: "/a?b"}},
		{"http://x", client.AdminOptions{Token: "a\nb"}},
	} {
		if _, err := client.NewAdmin(tt.url, tt.opts); err == nil {
			t.Errorf("NewAdmin(%q, %+v) succeeded", tt.url, tt.opts)
		}
	}
	a, err := client.NewAdmin("http://h:1/p/", client.AdminOptions{Base: "/"})
	if err != nil || a.URL("/watch") != "http://h:1/p/watch" {
		t.Fatalf("URL = %q, %v", a.URL("/watch"), err)
	}
}
