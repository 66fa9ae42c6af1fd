package control_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// principals stands for the access control's reservation of its scope
// (access.Owner), which serve gives the engine before the guard's.
var principals = varplane.Owner{Name: "access control", Owns: func(s varplane.Scope) bool { return s == "varplane.access" }}

// TestReservedScopesNeverUnderPolicy: a review policy cannot lock a
// subsystem's administrators out of the scope it reserves. A policy on the
// reserved scope is refused (400, nothing stored); one on an ancestor is
// accepted and covers the ancestor's other descendants but not the
// reserved scope; a policy stored on the reserved scope by an older server
// (or a policies record that no longer decodes) leaves it writable by its
// owner, and the stored policy can be deleted.
func TestReservedScopesNeverUnderPolicy(t *testing.T) {
	ctx := context.Background()
	ownerWrite := func(e *env) error {
		st, err := e.store.State(ctx, "varplane.access")
		if err != nil {
			return err
		}
		_, err = e.engine.Publish(ctx, varplane.PublishRequest{Scope: "varplane.access", Document: json.RawMessage(`{"principals":{}}`),
			ExpectedGeneration: st.Generation, Actor: "ops", Owner: principals.Name})
		return err
	}
	// storePolicies writes the policies record as the control subsystem
	// does, bypassing PutPolicy's rules (an older server's record).
	storePolicies := func(e *env, doc string) {
		t.Helper()
		st, err := e.store.State(ctx, "varplane-control.policies")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: "varplane-control.policies", Document: json.RawMessage(doc),
			ExpectedGeneration: st.Generation, Actor: "old", Owner: control.OwnerName}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env)
		// other is a scope beside the reserved one and the code a direct
		// write to it gets ("" : none).
		otherCode varplane.Code
		// deletable: DELETE /policies/varplane.access answers 204.
		deletable bool
	}{
		{name: "a policy on the reserved scope is refused", setup: func(t *testing.T, e *env) {
			st, b := e.do("PUT", "/v1/control/policies/varplane.access", "admin", map[string]any{"approvals": 2}, nil)
			want(t, "put a policy on the access scope", st, b, http.StatusBadRequest, varplane.CodeBadRequest)
			if pols, err := e.svc.Policies(ctx); err != nil || len(pols) != 0 {
				t.Fatalf("after the refused put: %v %v", pols, err)
			}
		}},
		{name: "a policy on an ancestor", setup: func(t *testing.T, e *env) {
			e.setPolicy("varplane", 1, []string{"reviewer"}, false)
		}, otherCode: varplane.CodeChangeRequired},
		{name: "a policy stored on the reserved scope before the rule", setup: func(t *testing.T, e *env) {
			storePolicies(e, `{"policies":[{"scope":"varplane.access","approvals":3,"roles":["nobody"]}]}`)
		}, deletable: true},
		{name: "a policies record that does not decode", setup: func(t *testing.T, e *env) {
			storePolicies(e, `{"policies":"broken"}`)
		}, otherCode: varplane.CodeChangeRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{owners: []varplane.Owner{principals}})
			tc.setup(t, e)
			if err := ownerWrite(e); err != nil {
				t.Fatalf("the access control's own write: %v", err)
			}
			_, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: "varplane.other", Document: json.RawMessage(`{}`), Actor: "ops"})
			if got := varplane.ErrorCode(err); (tc.otherCode == "" && err != nil) || (tc.otherCode != "" && got != tc.otherCode) {
				t.Fatalf("a direct write beside the reserved scope: %v, want %q", err, tc.otherCode)
			}
			if tc.deletable {
				st, b := e.do("DELETE", "/v1/control/policies/varplane.access", "admin", nil, nil)
				want(t, "delete the stale policy", st, b, http.StatusNoContent, "")
			}
		})
	}
}
