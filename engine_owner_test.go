package varplane_test

import (
	"context"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// TestOwnedScopes: a scope an Owner claims is written only by requests
// naming that owner, whether the write names the scope or reaches it by a
// parent's cascade; other scopes are untouched by the rule.
func TestOwnedScopes(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	defer st.Close()
	owns := func(s varplane.Scope) bool { return strings.Contains(string(s), "@") }
	e := varplane.NewEngine(st, varplane.Options{Owners: []varplane.Owner{{Name: "values service", Owns: owns}}})
	defer e.Close()
	const owned, free = varplane.Scope("app.flags@e1"), varplane.Scope("app.other")
	doc := []byte(`{"on":true}`)

	refused := func(name string, err error) {
		t.Helper()
		if varplane.ErrorCode(err) != varplane.CodeScopeOwned {
			t.Fatalf("%s: %v, want scope-owned", name, err)
		}
	}
	_, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: owned, Document: doc})
	refused("create", err)
	_, err = e.Publish(ctx, varplane.PublishRequest{Scope: owned, Document: doc})
	refused("publish", err)
	if scopes, _ := st.Scopes(ctx); len(scopes) != 0 {
		t.Fatalf("refused writes stored %v", scopes)
	}

	// The owner writes.
	res, err := e.Publish(ctx, varplane.PublishRequest{Scope: owned, Document: doc, Owner: "values service"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Activate(ctx, varplane.ActivateRequest{Scope: owned, Revision: res.Revision, ExpectedGeneration: 1})
	refused("activate", err)
	_, err = e.Rollback(ctx, varplane.RollbackRequest{Scope: owned, ExpectedGeneration: 1})
	refused("rollback", err)
	_, err = e.Deactivate(ctx, varplane.DeactivateRequest{Scope: owned, ExpectedGeneration: 1})
	refused("deactivate", err)
	// A parent's cascade would clear the owned scope: refused too, naming it.
	_, err = e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "app", ExpectedGeneration: 0})
	refused("cascade", err)
	if !strings.Contains(varplane.ErrorMessage(err), string(owned)) {
		t.Fatalf("the cascade refusal does not name the owned scope: %v", err)
	}
	if h, _ := e.Head(ctx, owned); h == nil || h.Generation != 1 {
		t.Fatalf("the owned head moved: %+v", h)
	}

	// Scopes nobody owns are written as ever, and a cascade that reaches no
	// live owned scope goes through.
	if _, err := e.Publish(ctx, varplane.PublishRequest{Scope: free, Document: doc}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "app.other", ExpectedGeneration: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: owned, ExpectedGeneration: 1, Owner: "values service"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "app", ExpectedGeneration: 0}); err != nil {
		t.Fatalf("a cascade over no live owned scope: %v", err)
	}
}
