package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
)

// publishAnswer is the body of a 200 from POST {base}/admin/publish.
type publishAnswer struct {
	Scope       varplane.Scope      `json:"scope"`
	Generation  varplane.Generation `json:"generation"`
	Revision    varplane.Revision   `json:"revision"`
	EffectiveAt string              `json:"effectiveAt"`
	Created     bool                `json:"created"`
}

func TestPublishRoute(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	rec := p.do("POST", "/vars/admin/publish", `{"scope":"svc.flags","document":{"on":true},"expectedGeneration":0,"actor":"ana","reason":"ship"}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var a publishAnswer
	mustJSON(t, rec.Body.Bytes(), &a)
	if a.Scope != "svc.flags" || a.Generation != 1 || !a.Created || a.EffectiveAt == "" {
		t.Errorf("answer = %+v, want svc.flags created at generation 1", a)
	}
	if want := p.create("other.k", `{"on":true}`); a.Revision != want {
		t.Errorf("revision = %s, want the digest create gives (%s)", a.Revision, want)
	}
	read := p.do("GET", "/vars?key=svc.flags", "")
	if read.Code != http.StatusOK || !strings.Contains(read.Body.String(), `"values":{"svc.flags":{"on":true}}`) {
		t.Errorf("read after publish: %d %s", read.Code, read.Body)
	}
	// The same document again is found and activated: still 200.
	rec = p.do("POST", "/vars/admin/publish", `{"scope":"svc.flags","document":{"on":true},"expectedGeneration":1}`)
	mustJSON(t, rec.Body.Bytes(), &a)
	if rec.Code != http.StatusOK || a.Created || a.Generation != 2 {
		t.Errorf("republish: %d %+v, want 200, not created, generation 2", rec.Code, a)
	}
}

func TestPublishRouteRefusals(t *testing.T) {
	tests := []struct {
		name, body string
		status     int
		code       varplane.Code
		field      string // named by the message
	}{
		{"no scope", `{"document":{},"expectedGeneration":0}`, 400, varplane.CodeBadRequest, "scope"},
		{"no document", `{"scope":"a.b","expectedGeneration":0}`, 400, varplane.CodeBadRequest, "document"},
		{"null document", `{"scope":"a.b","document":null,"expectedGeneration":0}`, 400, varplane.CodeBadRequest, "document"},
		{"no expectedGeneration", `{"scope":"a.b","document":{}}`, 400, varplane.CodeBadRequest, "expectedGeneration"},
		{"negative expectedGeneration", `{"scope":"a.b","document":{},"expectedGeneration":-1}`, 400, varplane.CodeBadRequest, "expectedGeneration"},
		{"string expectedGeneration", `{"scope":"a.b","document":{},"expectedGeneration":"0"}`, 400, varplane.CodeBadRequest, "expectedGeneration"},
		{"unknown field", `{"scope":"a.b","document":{},"expectedGeneration":0,"revision":"x"}`, 400, varplane.CodeBadRequest, "revision"},
		{"bad scope", `{"scope":"A B","document":{},"expectedGeneration":0}`, 400, varplane.CodeBadRequest, "scope"},
		{"stale generation", `{"scope":"a.b","document":{"v":2},"expectedGeneration":0}`, 409, varplane.CodeRevisionConflict, ""},
		{"unknown schema", `{"scope":"a.b","document":{},"expectedGeneration":1,"schemaId":"nope/v1"}`, 422, varplane.CodeRevisionInvalid, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlane(t, httpapi.Options{})
			p.activate("a.b", p.create("a.b", `{"v":1}`), 0)
			b := wantError(t, p.do("POST", "/vars/admin/publish", tc.body), tc.status, tc.code)
			if tc.field != "" && !strings.Contains(b.Error, tc.field) {
				t.Errorf("message %q does not name %s", b.Error, tc.field)
			}
			if tc.code == varplane.CodeRevisionConflict && (b.CurrentGeneration == nil || *b.CurrentGeneration != 1) {
				t.Errorf("conflict body %+v does not carry current generation 1", b)
			}
			if st, _ := p.engine.Status(t.Context(), "a.b"); st.Generation != 1 {
				t.Errorf("a refused publish moved a.b to generation %d", st.Generation)
			}
		})
	}
}

func TestPublishRouteIsAuthorizedAsMutate(t *testing.T) {
	rec := &recorder{deny: map[varplane.Scope]bool{"no.pe": true}}
	p := newPlane(t, httpapi.Options{Authorizer: rec})
	p.do("POST", "/vars/admin/publish", `{"scope":"m.n","document":{},"expectedGeneration":0}`)
	got := rec.take()
	if len(got) != 1 || got[0].Kind != varplane.KindMutate || got[0].Scope != "m.n" {
		t.Errorf("authorize calls = %+v, want one mutate of m.n", got)
	}
	wantError(t, p.do("POST", "/vars/admin/publish", `{"scope":"no.pe","document":{},"expectedGeneration":0}`), http.StatusForbidden, varplane.CodeForbidden)
	if h, _ := p.engine.History(t.Context(), "no.pe"); len(h) != 0 {
		t.Errorf("a denied publish wrote %d events", len(h))
	}
	// A malformed body is refused before the hook is asked.
	rec.take()
	p.do("POST", "/vars/admin/publish", `{"scope":"m.n"}`)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a bad body reached the authorizer: %+v", got)
	}
}

func TestDecodePublish(t *testing.T) {
	req, err := httpapi.DecodePublish([]byte(`{"scope":"a.b","document":[1],"expectedGeneration":7,"schemaId":"s/v1","schemaVersion":"2","actor":"ana","reason":"r","idempotencyKey":"k"}`), varplane.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := varplane.PublishRequest{Scope: "a.b", ExpectedGeneration: 7, SchemaID: "s/v1", SchemaVersion: "2", OnBehalfOf: "ana", Reason: "r", IdempotencyKey: "k"}
	got := req
	got.Document = nil
	if string(req.Document) != `[1]` || got.Scope != want.Scope || got.ExpectedGeneration != want.ExpectedGeneration ||
		got.SchemaID != want.SchemaID || got.SchemaVersion != want.SchemaVersion || got.Actor != want.Actor ||
		got.Reason != want.Reason || got.IdempotencyKey != want.IdempotencyKey {
		t.Errorf("DecodePublish = %+v", req)
	}
}
