package varplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// listBinder is a Binder over a list the test changes.
type listBinder struct {
	mu   sync.Mutex
	list []varplane.SchemaBinding
}

func (b *listBinder) set(list ...varplane.SchemaBinding) {
	b.mu.Lock()
	b.list = list
	b.mu.Unlock()
}

func (b *listBinder) Binding(_ context.Context, scope varplane.Scope) (varplane.SchemaBinding, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, ok := varplane.LongestBinding(b.list, scope)
	return sb, ok, nil
}

func newBoundEngine(t *testing.T) (*varplane.Engine, *listBinder) {
	t.Helper()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	b := &listBinder{}
	e := varplane.NewEngine(s, varplane.Options{Binder: b, Validator: fakeValidator{
		"strict/v1": strictIssues,
		// loose/v1 accepts any object.
		"loose/v1": func(doc json.RawMessage) []varplane.Issue {
			if !strings.HasPrefix(string(doc), "{") {
				return []varplane.Issue{{Code: "schema.type", Path: "", Message: "not an object"}}
			}
			return nil
		},
	}})
	t.Cleanup(e.Close)
	return e, b
}

func wantInvalid(t *testing.T, what string, err error, schemaID, issueCode string) *varplane.Error {
	t.Helper()
	var ve *varplane.Error
	if !errors.As(err, &ve) || ve.Code != varplane.CodeRevisionInvalid {
		t.Fatalf("%s: err %v, want revision-invalid", what, err)
	}
	if !strings.Contains(ve.Message, schemaID) {
		t.Fatalf("%s: message %q does not name schema %q", what, ve.Message, schemaID)
	}
	if len(ve.Issues) == 0 || ve.Issues[0].Code != issueCode {
		t.Fatalf("%s: issues %+v, want first %q", what, ve.Issues, issueCode)
	}
	return ve
}

func headGeneration(t *testing.T, e *varplane.Engine, scope varplane.Scope) varplane.Generation {
	t.Helper()
	st, err := e.Store().State(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	return st.Generation
}

// TestBindingValidatesEveryWrite: under a bound prefix, a publish and a
// create are validated against the bound schema whether or not they name
// one, a request naming another schema is refused, nothing is stored, and
// an accepted document records the bound schema.
func TestBindingValidatesEveryWrite(t *testing.T) {
	ctx := context.Background()
	bad := json.RawMessage(`{"enabled":true,"extra":1}`)
	good := json.RawMessage(`{"enabled":true}`)
	cases := []struct {
		name, schemaID, issue string
		write                 func(e *varplane.Engine, scope varplane.Scope, doc json.RawMessage, schemaID string) error
	}{
		{"publish without schemaId", "", "document.unknown-field", publishAt0},
		{"create without schemaId", "", "document.unknown-field", create},
		{"publish naming another schema", "loose/v1", varplane.IssueSchemaMismatch, publishAt0},
		{"create naming another schema", "loose/v1", varplane.IssueSchemaMismatch, create},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, b := newBoundEngine(t)
			b.set(varplane.SchemaBinding{Prefix: "svc", SchemaID: "strict/v1"})
			doc := bad
			if tc.issue == varplane.IssueSchemaMismatch {
				doc = good // valid under the binding, refused for naming another schema
			}
			err := tc.write(e, "svc.checkout", doc, tc.schemaID)
			ve := wantInvalid(t, tc.name, err, "strict/v1", tc.issue)
			if tc.issue == varplane.IssueSchemaMismatch && !strings.Contains(ve.Issues[0].Message, `"loose/v1"`) {
				t.Fatalf("mismatch issue does not name the schema asked for: %q", ve.Issues[0].Message)
			}
			if g := headGeneration(t, e, "svc.checkout"); g != 0 {
				t.Fatalf("generation %d after a refused write, want 0", g)
			}
			h, _ := e.History(ctx, "svc.checkout")
			if len(h) != 1 || h[0].Kind != varplane.EventRejected || h[0].SchemaID != "strict/v1" {
				t.Fatalf("history %+v, want one rejection against strict/v1", h)
			}
			// The same document is accepted outside the prefix.
			if err := tc.write(e, "other.checkout", doc, tc.schemaID); err != nil && tc.schemaID == "" {
				t.Fatalf("unbound scope: %v", err)
			}
			// A valid document is accepted and records the bound schema.
			if err := tc.write(e, "svc.checkout", good, "strict/v1"); err != nil {
				t.Fatal(err)
			}
			recs, err := e.Store().History(ctx, "svc.checkout")
			if err != nil {
				t.Fatal(err)
			}
			if last := recs[len(recs)-1]; last.Kind == varplane.EventRevisionCreated && last.SchemaID != "strict/v1" {
				t.Fatalf("created event schemaId %q", last.SchemaID)
			}
		})
	}
}

func publishAt0(e *varplane.Engine, scope varplane.Scope, doc json.RawMessage, schemaID string) error {
	st, err := e.Store().State(context.Background(), scope)
	if err != nil {
		return err
	}
	_, err = e.Publish(context.Background(), varplane.PublishRequest{Scope: scope, Document: doc, SchemaID: schemaID, ExpectedGeneration: st.Generation})
	return err
}

func create(e *varplane.Engine, scope varplane.Scope, doc json.RawMessage, schemaID string) error {
	_, err := e.CreateRevision(context.Background(), varplane.CreateRevisionRequest{Scope: scope, Document: doc, SchemaID: schemaID})
	return err
}

// TestBindingLongestPrefixWins: a nested binding overrides its ancestor's
// below it, and only there.
func TestBindingLongestPrefixWins(t *testing.T) {
	e, b := newBoundEngine(t)
	// The longer binding listed first: the rule is length, not order.
	b.set(varplane.SchemaBinding{Prefix: "svc.payments", SchemaID: "loose/v1"}, varplane.SchemaBinding{Prefix: "svc", SchemaID: "strict/v1"})
	loose := json.RawMessage(`{"anything":1}`)
	if err := publishAt0(e, "svc.payments.eu", loose, ""); err != nil {
		t.Fatalf("svc.payments.eu is bound to loose/v1: %v", err)
	}
	wantInvalid(t, "svc.paymentsx", publishAt0(e, "svc.paymentsx", loose, ""), "strict/v1", "document.unknown-field")
	wantInvalid(t, "svc", publishAt0(e, "svc", json.RawMessage(`{"svc.a":1}`), ""), "strict/v1", "document.unknown-field")
	res, err := e.Validate(context.Background(), varplane.ValidateRequest{Scope: "svc.payments.eu", Document: loose})
	if err != nil || !res.Valid || res.SchemaID != "loose/v1" || res.BoundBy != "svc.payments" {
		t.Fatalf("validate: %+v %v", res, err)
	}
}

// TestBindingValidate: Validate with a scope uses the binding, names the
// schema and its prefix, and refuses another schema; without a scope it
// checks only what the request names.
func TestBindingValidate(t *testing.T) {
	e, b := newBoundEngine(t)
	b.set(varplane.SchemaBinding{Prefix: "svc", SchemaID: "strict/v1"})
	ctx := context.Background()
	bad := json.RawMessage(`{"extra":1}`)
	res, err := e.Validate(ctx, varplane.ValidateRequest{Scope: "svc.a", Document: bad})
	if err != nil || res.Valid || res.SchemaID != "strict/v1" || res.BoundBy != "svc" {
		t.Fatalf("bound validate: %+v %v", res, err)
	}
	res, err = e.Validate(ctx, varplane.ValidateRequest{Scope: "svc.a", Document: json.RawMessage(`{}`), SchemaID: "loose/v1"})
	if err != nil || res.Valid || res.Issues[0].Code != varplane.IssueSchemaMismatch {
		t.Fatalf("mismatch validate: %+v %v", res, err)
	}
	res, err = e.Validate(ctx, varplane.ValidateRequest{Document: bad})
	if err != nil || !res.Valid || res.SchemaID != "" {
		t.Fatalf("scope-less validate: %+v %v", res, err)
	}
}

// TestBindingActivateAndRollback: a revision stored before the binding,
// which the bound schema rejects, is not activated, nor rolled back to;
// one it accepts is.
func TestBindingActivateAndRollback(t *testing.T) {
	e, b := newBoundEngine(t)
	ctx := context.Background()
	old := mustCreate(t, e, "svc.a", `{"enabled":true,"legacy":1}`)
	mustActivate(t, e, "svc.a", old, 0)
	good := mustCreate(t, e, "svc.a", `{"enabled":false}`)
	mustActivate(t, e, "svc.a", good, 1)
	b.set(varplane.SchemaBinding{Prefix: "svc", SchemaID: "strict/v1"})

	_, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "svc.a", Revision: old, ExpectedGeneration: 2})
	ve := wantInvalid(t, "activate", err, "strict/v1", "document.unknown-field")
	if ve.Scope != "svc.a" || !strings.Contains(ve.Message, string(old)) {
		t.Fatalf("activate refusal does not name scope and revision: %+v", ve)
	}
	_, err = e.Rollback(ctx, varplane.RollbackRequest{Scope: "svc.a", ExpectedGeneration: 2})
	wantInvalid(t, "rollback", err, "strict/v1", "document.unknown-field")
	if g := headGeneration(t, e, "svc.a"); g != 2 {
		t.Fatalf("generation %d after refusals, want 2", g)
	}
	// Rolling back to a revision the schema accepts is allowed.
	b.set()
	mustActivate(t, e, "svc.a", old, 2)
	b.set(varplane.SchemaBinding{Prefix: "svc", SchemaID: "strict/v1"})
	if _, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: "svc.a", ExpectedGeneration: 3}); err != nil {
		t.Fatalf("rollback to a valid revision: %v", err)
	}
}

// TestBindingProperty: over random bindings (nested, changed between
// writes) and random writes, a publish is accepted exactly when the model
// says: under a binding, when it names no schema or the bound one and the
// bound schema of the longest covering prefix accepts it; without one,
// when the schema it names (if any) accepts it. A revision an accepted
// write creates records the schema it was checked against.
func TestBindingProperty(t *testing.T) {
	prefixes := []varplane.Scope{"a", "a.b", "e"}
	scopes := []varplane.Scope{"a.b", "a.b.c", "a.d", "e.f", "x.y"}
	schemas := []string{"strict/v1", "loose/v1"}
	docs := []string{`{"enabled":true}`, `{"x":1}`, `[1]`}
	accepts := func(schemaID, doc string) bool {
		switch schemaID {
		case "strict/v1": // strictIssues: no member but "enabled" (a non-object has none)
			return doc != `{"x":1}`
		case "loose/v1":
			return strings.HasPrefix(doc, "{")
		}
		return false
	}
	rapid.Check(t, func(rt *rapid.T) {
		e, b := newBoundEngine(t)
		ctx := context.Background()
		var list []varplane.SchemaBinding
		for step := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			if rapid.IntRange(0, 3).Draw(rt, "rebind") == 0 {
				list = nil
				for _, p := range prefixes {
					if i := rapid.IntRange(-1, 1).Draw(rt, "bind "+string(p)); i >= 0 {
						list = append(list, varplane.SchemaBinding{Prefix: p, SchemaID: schemas[i]})
					}
				}
				b.set(list...)
			}
			scope := rapid.SampledFrom(scopes).Draw(rt, "scope")
			doc := rapid.SampledFrom(docs).Draw(rt, "doc")
			named := rapid.SampledFrom([]string{"", "strict/v1", "loose/v1"}).Draw(rt, "named")
			// The model: the longest covering prefix, found by brute force.
			var bound *varplane.SchemaBinding
			for i := range list {
				if list[i].Covers(scope) && (bound == nil || len(list[i].Prefix) > len(bound.Prefix)) {
					bound = &list[i]
				}
			}
			effective, ok := named, named == "" || accepts(named, doc)
			if bound != nil {
				effective = bound.SchemaID
				ok = (named == "" || named == bound.SchemaID) && accepts(bound.SchemaID, doc)
			}
			st, err := e.Store().State(ctx, scope)
			if err != nil {
				rt.Fatal(err)
			}
			res, err := e.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: json.RawMessage(doc), SchemaID: named, ExpectedGeneration: st.Generation})
			if ok != (err == nil) {
				rt.Fatalf("step %d: publish %s to %s naming %q under %+v: err %v, want accepted=%v", step, doc, scope, named, bound, err, ok)
			}
			if err != nil && varplane.ErrorCode(err) != varplane.CodeRevisionInvalid {
				rt.Fatalf("step %d: refusal %v, want revision-invalid", step, err)
			}
			// A revision stored already (content-addressed) keeps the
			// schemaId of its first write; a new one records the schema
			// it was checked against.
			if err == nil && res.Created {
				h, herr := e.Head(ctx, scope)
				if herr != nil || h.SchemaID != effective {
					rt.Fatalf("step %d: head of %s records schema %q (%v), want %q", step, scope, h.SchemaID, herr, effective)
				}
			}
		}
	})
}
