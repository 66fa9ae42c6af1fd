package ui

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/control/controltest"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/schema"
	"github.com/varplane/varplane/store/file"
)

// Tokens of the test stack: admin may do everything (and holds every
// role), reader may only read and audit, reviewer may do everything as
// another identity (to approve admin's changes), narrow may only read the
// scopes under shop.
const (
	adminToken    = "admin-secret-token"
	readerToken   = "reader-secret-token"
	reviewerToken = "reviewer-secret-token"
	narrowToken   = "narrow-secret-token"
)

// cartManifest declares one component with a configuration, for the
// components page.
const cartManifest = `name: cart
namespace: shop
configuration:
  schema:
    type: object
    properties:
      maxItems: {type: integer, minimum: 1}
    required: [maxItems]
  defaults:
    maxItems: 20
`

// stack is a server as serve builds it: a file store, the engine, the
// push hub, the HTTP API (the var API under /vars, the control API under
// /vars/control, the values service), and the console under /ui mounted on
// it.
type stack struct {
	engine *varplane.Engine
	svc    *control.Service
	in     *controltest.Instances
	ui     *Handler
	api    *httpapi.Handler
	srv    *httptest.Server
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := file.Open(ctx, filepath.Join(t.TempDir(), "log"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	authz, err := access.Scoped([]access.Grant{
		{Token: adminToken, ID: "alice"},
		{Token: readerToken, ID: "rita", Kinds: []varplane.Kind{varplane.KindRead, varplane.KindAudit}, Roles: []string{config.RoleGet}},
		{Token: reviewerToken, ID: "bob"},
		{Token: narrowToken, ID: "nora", Kinds: []varplane.Kind{varplane.KindRead}, Prefixes: []string{"shop."}},
	})
	if err != nil {
		t.Fatal(err)
	}
	guard := control.NewGuard()
	// app/v1, for the schemas page: an object whose members are integers.
	schemas := &schema.Registry{}
	if err := schemas.Add("app/v1", []byte(`{"type":"object","additionalProperties":{"type":"integer"}}`)); err != nil {
		t.Fatal(err)
	}
	engine := varplane.NewEngine(st, varplane.Options{Logger: log, Owners: append(guard.Owners(), config.Owner), Validator: schemas, Binder: guard})
	hub := push.New(engine, push.Options{Logger: log})
	in := &controltest.Instances{}
	svc := control.New(engine, guard, control.Options{Logger: log, Instances: in})
	m, err := config.ParseManifest("shop.cart.yaml", []byte(cartManifest))
	if err != nil {
		t.Fatal(err)
	}
	dep, err := config.NewDeployment([]*config.Manifest{m}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	values, err := config.NewService(engine, dep)
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.NewHandler(engine, httpapi.Options{Base: "/vars", Authorizer: authz, Logger: log, Hub: hub, Control: svc, Values: values})
	h := New(Options{API: api, Base: "/vars", Authorizer: authz, Limits: engine.Limits(), Logger: log, PollInterval: 300 * time.Millisecond})
	api.Mount("/ui/", h)
	api.Mount("/.configuration", ComponentsRedirect("/ui")) // as serve mounts it with the console on
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		hub.Close()
		srv.Close()
		api.Close()
		engine.Close()
		st.Close()
	})
	return &stack{engine: engine, svc: svc, in: in, ui: h, api: api, srv: srv}
}

// publish writes doc to scope directly through the engine (test setup).
func (s *stack) publish(t *testing.T, scope, doc, reason string) varplane.Generation {
	t.Helper()
	ctx := context.Background()
	st, err := s.engine.Status(ctx, varplane.Scope(scope))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.engine.Publish(ctx, varplane.PublishRequest{Scope: varplane.Scope(scope), Document: []byte(doc),
		ExpectedGeneration: st.Generation, Actor: "setup", Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	return res.Generation
}
