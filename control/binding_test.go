package control_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/httpapi"
)

const bindingsRecord = varplane.Scope("varplane-control.schemas")

func (e *env) bind(token, prefix string, body map[string]any) (int, []byte, control.BindingPreview) {
	e.t.Helper()
	var p control.BindingPreview
	st, b := e.do("PUT", "/v1/admin/schemas/bindings/"+prefix, token, body, &p)
	return st, b, p
}

func (e *env) schemas(token string) httpapi.SchemasResponse {
	e.t.Helper()
	var out httpapi.SchemasResponse
	st, b := e.do("GET", "/v1/admin/schemas", token, nil, &out)
	want(e.t, "list schemas", st, b, http.StatusOK, "")
	return out
}

// TestBindPreviewRefuseForce: a dry run lists the current heads the schema
// rejects and writes nothing; a binding with rejected heads is refused
// (revision-invalid naming the schema and the heads) unless forced; the
// binding is a revision of the record scope by its author; the list shows
// schemas and bindings.
func TestBindPreviewRefuseForce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("svc.a", `{"bad":1}`)
	e.publish("svc.b", `{"ok":1}`)
	e.publish("other.c", `{"bad":1}`)

	st, b, p := e.bind("admin", "svc", map[string]any{"schemaId": "strict", "dryRun": true})
	want(t, "dry run", st, b, http.StatusOK, "")
	if p.Bound || p.Checked != 2 || p.RejectedCount != 1 || len(p.Rejected) != 1 || p.Rejected[0].Scope != "svc.a" ||
		p.Rejected[0].Issues[0].Code != "schema.forbidden" {
		t.Fatalf("dry run preview: %s", b)
	}
	if headOf(t, e, bindingsRecord).Generation != 0 {
		t.Fatal("a dry run wrote the bindings record")
	}

	st, b, _ = e.bind("admin", "svc", map[string]any{"schemaId": "strict"})
	want(t, "bind over a rejected head", st, b, http.StatusUnprocessableEntity, varplane.CodeRevisionInvalid)
	if !contains(b, `\"strict\"`) || !contains(b, "svc.a (generation 1)") || !contains(b, "--force") {
		t.Fatalf("refusal does not name the schema, the head and force: %s", b)
	}
	if headOf(t, e, bindingsRecord).Generation != 0 {
		t.Fatal("a refused binding wrote the bindings record")
	}
	if got := e.schemas("admin"); len(got.Bindings) != 0 || strings.Join(got.Schemas, ",") != "loose,strict" {
		t.Fatalf("list before binding: %+v", got)
	}

	st, b, p = e.bind("admin", "svc", map[string]any{"schemaId": "strict", "force": true})
	want(t, "forced bind", st, b, http.StatusOK, "")
	if !p.Bound || p.RejectedCount != 1 {
		t.Fatalf("forced bind: %s", b)
	}
	got := e.schemas("admin")
	if len(got.Bindings) != 1 || got.Bindings[0] != (varplane.SchemaBinding{Prefix: "svc", SchemaID: "strict"}) {
		t.Fatalf("list after binding: %+v", got)
	}
	if got := e.schemas("viewer"); len(got.Bindings) != 0 || len(got.Schemas) != 2 {
		t.Fatalf("a token that may not audit svc sees its binding: %+v", got)
	}
	h, err := e.engine.History(context.Background(), bindingsRecord)
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Kind != varplane.EventActivated || last.Actor != "admin" || !strings.Contains(last.Reason, "schema bind svc to strict (forced over 1") {
		t.Fatalf("audit of the binding: %+v", last)
	}
	// The rejected head stays live; its next write must pass.
	res, err := e.engine.Publish(context.Background(), varplane.PublishRequest{Scope: "svc.a", Document: json.RawMessage(`{"bad":2}`), ExpectedGeneration: 1})
	if !isCode(err, varplane.CodeRevisionInvalid) || !strings.Contains(err.Error(), `"strict"`) {
		t.Fatalf("write under the binding: %+v %v", res, err)
	}
	// A longer binding takes its subtree out of the shorter one's preview.
	st, b, _ = e.bind("admin", "svc.a", map[string]any{"schemaId": "loose"})
	want(t, "nested bind", st, b, http.StatusOK, "")
	st, b, p = e.bind("admin", "svc", map[string]any{"schemaId": "strict", "dryRun": true})
	want(t, "dry run after nesting", st, b, http.StatusOK, "")
	if p.Previous != "strict" || p.Checked != 1 || p.RejectedCount != 0 {
		t.Fatalf("preview with a nested binding: %s", b)
	}
	e.publish("svc.a", `{"bad":3}`) // loose governs svc.a now
}

// TestBindRefusals: binding needs the role and audit on the subtree;
// reserved scopes, unknown schemas and a malformed body are refused; the
// record is written only through the binding API.
func TestBindRefusals(t *testing.T) {
	e := newEnv(t, envOpts{})
	cases := []struct {
		name, token, prefix string
		body                map[string]any
		status              int
		code                varplane.Code
	}{
		{"no role", "alice", "svc", map[string]any{"schemaId": "strict"}, http.StatusForbidden, varplane.CodeForbidden},
		{"mutate without audit", "mallory", "svc", map[string]any{"schemaId": "strict"}, http.StatusForbidden, varplane.CodeForbidden},
		{"reader", "viewer", "svc", map[string]any{"schemaId": "strict", "dryRun": true}, http.StatusForbidden, varplane.CodeForbidden},
		{"anonymous", "", "svc", map[string]any{"schemaId": "strict"}, http.StatusUnauthorized, varplane.CodeUnauthorized},
		{"control records", "admin", "varplane-control.x", map[string]any{"schemaId": "strict"}, http.StatusBadRequest, varplane.CodeBadRequest},
		{"access records", "admin", "varplane", map[string]any{"schemaId": "strict"}, http.StatusBadRequest, varplane.CodeBadRequest},
		{"unknown schema", "admin", "svc", map[string]any{"schemaId": "nope"}, http.StatusNotFound, varplane.CodeNotFound},
		{"no schema", "admin", "svc", map[string]any{}, http.StatusBadRequest, varplane.CodeBadRequest},
		{"unknown field", "admin", "svc", map[string]any{"schemaId": "strict", "forse": true}, http.StatusBadRequest, varplane.CodeBadRequest},
		{"bad scope", "admin", "svc..x", map[string]any{"schemaId": "strict"}, http.StatusBadRequest, varplane.CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, b, _ := e.bind(tc.token, tc.prefix, tc.body)
			want(t, tc.name, st, b, tc.status, tc.code)
			if headOf(t, e, bindingsRecord).Generation != 0 {
				t.Fatal("a refused binding wrote the record")
			}
		})
	}
	_, err := e.engine.Publish(context.Background(), varplane.PublishRequest{Scope: bindingsRecord,
		Document: json.RawMessage(`{"bindings":[]}`), Actor: "admin"})
	if !isCode(err, varplane.CodeScopeOwned) {
		t.Fatalf("direct write of the bindings record: %v", err)
	}
	st, b := e.do("DELETE", "/v1/admin/schemas/bindings/svc", "admin", nil, nil)
	want(t, "unbind nothing", st, b, http.StatusNotFound, varplane.CodeNotFound)
	st, b = e.do("DELETE", "/v1/admin/schemas/bindings/svc", "alice", nil, nil)
	want(t, "unbind without the role", st, b, http.StatusForbidden, varplane.CodeForbidden)
}

// TestBindingOwnedScopesExempt: a binding on an ancestor does not cover a
// scope another subsystem reserves; that scope cannot be bound itself.
func TestBindingOwnedScopesExempt(t *testing.T) {
	owned := varplane.Owner{Name: "values service", Owns: func(s varplane.Scope) bool { return s == "app.values" }}
	e := newEnv(t, envOpts{owners: []varplane.Owner{owned}})
	st, b, _ := e.bind("admin", "app", map[string]any{"schemaId": "strict"})
	want(t, "bind app", st, b, http.StatusOK, "")
	if _, err := e.engine.Publish(context.Background(), varplane.PublishRequest{Scope: "app.values", Document: json.RawMessage(`{"bad":1}`),
		Owner: "values service"}); err != nil {
		t.Fatalf("the owner's write under a bound ancestor: %v", err)
	}
	st, b, _ = e.bind("admin", "app.values", map[string]any{"schemaId": "strict"})
	want(t, "bind an owned scope", st, b, http.StatusBadRequest, varplane.CodeBadRequest)
}

// TestBindingChanges: reviewed changes use the binding: a proposal is
// checked against the bound schema (and fails naming it), one naming
// another schema fails, a change checked before a binding that now
// rejects it fails at publish, and a rollback change to a document the
// binding rejects fails; unbinding lifts it.
func TestBindingChanges(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("svc.a", `{"bad":1}`)
	g := e.publish("svc.a", `{"ok":1}`)
	early := e.propose("alice", "svc.a", g, `{"bad":2}`) // checked: nothing bound yet
	if early.State != control.StateChecked {
		t.Fatalf("early change %s", early.State)
	}
	st, b, _ := e.bind("admin", "svc", map[string]any{"schemaId": "strict"})
	want(t, "bind", st, b, http.StatusOK, "")

	c := e.propose("alice", "svc.a", g, `{"bad":3}`)
	if c.State != control.StateFailed || c.Checks[0].SchemaID != "strict" || c.Checks[0].Passed {
		t.Fatalf("proposal under the binding: %+v", c)
	}
	var named control.Change
	st, b = e.do("POST", "/v1/control/changes", "alice", map[string]any{"scope": "svc.a", "base": g, "document": json.RawMessage(`{"ok":2}`), "schemaId": "loose"}, &named)
	want(t, "propose naming another schema", st, b, http.StatusCreated, "")
	if named.State != control.StateFailed || named.Checks[0].Issues[0].Code != varplane.IssueSchemaMismatch {
		t.Fatalf("proposal naming another schema: %s", b)
	}

	st, b, pub := e.act("alice", early.ID, "publish", nil)
	want(t, "publish of a change the binding now rejects", st, b, http.StatusUnprocessableEntity, varplane.CodeRevisionInvalid)
	var after control.Change
	e.do("GET", "/v1/control/changes/"+early.ID, "alice", nil, &after)
	if after.State != control.StateFailed || headOf(t, e, "svc.a").Generation != g {
		t.Fatalf("after a refused publish: %+v (published %+v), head at %d", after, pub, headOf(t, e, "svc.a").Generation)
	}

	var rb control.Change
	st, b = e.do("POST", "/v1/control/documents/svc.a:rollback", "alice", map[string]any{"revision": 1}, &rb)
	want(t, "rollback change", st, b, http.StatusCreated, "")
	if rb.State != control.StateFailed || rb.Checks[0].SchemaID != "strict" {
		t.Fatalf("rollback to a rejected document: %s", b)
	}

	// A rollback change to a document stored under another schema, which
	// the bound schema accepts, is checked against the binding, not
	// refused as a mismatch with the schema its revision was stored with.
	ctx := context.Background()
	if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: "svc.b", Document: json.RawMessage(`{"ok":1}`), SchemaID: "strict"}); err != nil {
		t.Fatal(err)
	}
	st, b, _ = e.bind("admin", "svc.b", map[string]any{"schemaId": "loose"})
	want(t, "bind svc.b", st, b, http.StatusOK, "")
	e.publish("svc.b", `{"ok":2}`)
	var rbOK control.Change
	st, b = e.do("POST", "/v1/control/documents/svc.b:rollback", "alice", map[string]any{"revision": 1}, &rbOK)
	want(t, "rollback change under another schema", st, b, http.StatusCreated, "")
	if rbOK.State != control.StateChecked || rbOK.Checks[0].SchemaID != "loose" {
		t.Fatalf("rollback to a document the binding accepts: %s", b)
	}

	st, b = e.do("DELETE", "/v1/admin/schemas/bindings/svc", "admin", nil, nil)
	want(t, "unbind", st, b, http.StatusNoContent, "")
	if ok := e.propose("alice", "svc.a", g, `{"bad":4}`); ok.State != control.StateChecked {
		t.Fatalf("after unbinding: %s", ok.State)
	}
}

// TestBindHostile: the binding route refuses a huge body, a deep body and
// forged identities with nothing written; a preview over many rejected
// heads lists a bounded number and counts them all.
func TestBindHostile(t *testing.T) {
	e := newEnv(t, envOpts{})
	huge := map[string]any{"schemaId": "strict", "pad": strings.Repeat("x", 2<<20)}
	st, b, _ := e.bind("admin", "svc", huge)
	want(t, "huge body", st, b, http.StatusRequestEntityTooLarge, varplane.CodePayloadTooLarge)
	deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	st, b = e.do("PUT", "/v1/admin/schemas/bindings/svc", "admin", json.RawMessage(deep), nil)
	if st != http.StatusBadRequest {
		t.Fatalf("deep body: %d %s", st, b)
	}
	for _, tok := range []string{"forged", "ADMIN", "Bearer admin"} {
		st, b, _ = e.bind(tok, "svc", map[string]any{"schemaId": "strict"})
		if st != http.StatusForbidden && st != http.StatusUnauthorized {
			t.Fatalf("token %q: %d %s", tok, st, b)
		}
	}
	if headOf(t, e, bindingsRecord).Generation != 0 {
		t.Fatal("a hostile request wrote the bindings record")
	}

	n := control.MaxRejectedListed + 10
	for i := range n {
		e.publish(varplane.Scope("svc.s"+strconv.Itoa(i)), `{"bad":1}`)
	}
	st, b, p := e.bind("admin", "svc", map[string]any{"schemaId": "strict", "dryRun": true})
	want(t, "preview of many", st, b, http.StatusOK, "")
	if len(p.Rejected) != control.MaxRejectedListed || p.RejectedCount != n || p.Checked != n {
		t.Fatalf("preview lists %d of %d rejected (%d checked), want %d of %d", len(p.Rejected), p.RejectedCount, p.Checked, control.MaxRejectedListed, n)
	}
	st, b, _ = e.bind("admin", "svc", map[string]any{"schemaId": "strict"})
	want(t, "refusal over many", st, b, http.StatusUnprocessableEntity, varplane.CodeRevisionInvalid)
	if !contains(b, "and 10 more") {
		t.Fatalf("refusal does not count the unlisted heads: %s", b)
	}
}

// TestBindConcurrent: binds of several prefixes at once each either bind
// or meet revision-conflict (the record is one compare-and-set); none is
// lost: the record holds exactly the ones that answered bound.
func TestBindConcurrent(t *testing.T) {
	e := newEnv(t, envOpts{})
	const n = 8
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _ = e.bind("admin", "p"+strconv.Itoa(i), map[string]any{"schemaId": "loose"})
		}()
	}
	wg.Wait()
	bound := map[varplane.Scope]bool{}
	for i, c := range codes {
		switch c {
		case http.StatusOK:
			bound[varplane.Scope("p"+strconv.Itoa(i))] = true
		case http.StatusConflict:
		default:
			t.Fatalf("bind p%d: %d", i, c)
		}
	}
	list, err := e.svc.Bindings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(bound) || len(bound) == 0 {
		t.Fatalf("record holds %+v, the binds that answered bound are %v", list, bound)
	}
	for _, b := range list {
		if !bound[b.Prefix] {
			t.Fatalf("record holds %s, which answered a conflict", b.Prefix)
		}
	}
}
