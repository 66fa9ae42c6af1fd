package httpapi_test

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
)

const rev0 = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

func TestStrictBodyDecoding(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	tests := []struct {
		name, route, body string
		mention           string // the message must name this
	}{
		{"unknown field typo", "activate", `{"scope":"a.b","revision":"` + rev0 + `","expectedGeneraton":0}`, "expectedGeneraton"},
		{"field name in another case", "deactivate", `{"scope":"a.b","expectedgeneration":0}`, "expectedgeneration"},
		{"duplicate field", "deactivate", `{"scope":"a.b","expectedGeneration":0,"expectedGeneration":5}`, "more than once"},
		{"missing scope", "activate", `{"revision":"` + rev0 + `","expectedGeneration":0}`, "scope"},
		{"missing revision", "activate", `{"scope":"a.b","expectedGeneration":0}`, "revision"},
		{"missing expectedGeneration", "activate", `{"scope":"a.b","revision":"` + rev0 + `"}`, "expectedGeneration"},
		{"null expectedGeneration", "activate", `{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":null}`, "expectedGeneration"},
		{"negative generation", "activate", `{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":-1}`, "expectedGeneration"},
		{"fractional generation", "activate", `{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":1.5}`, "expectedGeneration"},
		{"exponent generation", "activate", `{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":1e3}`, "expectedGeneration"},
		{"string generation", "activate", `{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":"1"}`, "expectedGeneration"},
		{"huge generation", "activate", `{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":18446744073709551616}`, "expectedGeneration"},
		{"bool generation", "deactivate", `{"scope":"a.b","expectedGeneration":true}`, "expectedGeneration"},
		{"scope wrong type", "activate", `{"scope":5,"revision":"` + rev0 + `","expectedGeneration":0}`, "scope"},
		{"scope malformed", "deactivate", `{"scope":"a..b","expectedGeneration":0}`, "scope"},
		{"revision malformed", "activate", `{"scope":"a.b","revision":"sha1:abc","expectedGeneration":0}`, "revision"},
		{"actor wrong type", "deactivate", `{"scope":"a.b","expectedGeneration":0,"actor":{}}`, "actor"},
		{"trailing data", "deactivate", `{"scope":"a.b","expectedGeneration":0} {}`, "after"},
		{"truncated", "deactivate", `{"scope":"a.b","expectedGeneration":0`, "JSON"},
		{"bad json", "deactivate", `{scope:1}`, "JSON"},
		{"not an object", "deactivate", `[1,2]`, "object"},
		{"empty", "deactivate", ``, "required"},
		{"whitespace only", "deactivate", "  \n", "required"},
		{"non-UTF-8", "deactivate", "{\"scope\":\"a.\xff\",\"expectedGeneration\":0}", "UTF-8"},
		{"rollback both targets", "rollback", `{"scope":"a.b","expectedGeneration":1,"toRevision":"` + rev0 + `","toGeneration":1}`, "toRevision"},
		{"rollback fractional toGeneration", "rollback", `{"scope":"a.b","expectedGeneration":1,"toGeneration":0.5}`, "toGeneration"},
		{"rollback bad toRevision", "rollback", `{"scope":"a.b","expectedGeneration":1,"toRevision":"x"}`, "toRevision"},
		{"rollback leading zero", "rollback", `{"scope":"a.b","expectedGeneration":01}`, "JSON"},
		{"create missing document", "revisions", `{"scope":"a.b"}`, "document"},
		{"create null document", "revisions", `{"scope":"a.b","document":null}`, "document"},
		{"create missing scope", "revisions", `{"document":{}}`, "scope"},
		{"create unknown field", "revisions", `{"scope":"a.b","document":{},"schemaID":"x"}`, "schemaID"},
		{"create schemaVersion wrong type", "revisions", `{"scope":"a.b","document":{},"schemaVersion":2}`, "schemaVersion"},
		{"validate missing document", "validate", `{"scope":"a.b"}`, "document"},
		{"validate bad scope", "validate", `{"scope":"","document":{}}`, "scope"},
		{"unknown field with an odd name is not echoed", "deactivate", `{"scope":"a.b","expectedGeneration":0,"<script>":1}`, "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := p.do("POST", "/vars/admin/"+tt.route, tt.body)
			b := wantError(t, rec, 400, varplane.CodeBadRequest)
			if !strings.Contains(b.Error, tt.mention) {
				t.Errorf("error %q does not mention %q", b.Error, tt.mention)
			}
			if strings.Contains(b.Error, "<script>") || strings.Contains(b.Error, "1e3") || strings.Contains(b.Error, "18446744073709551616") {
				t.Errorf("error echoes a request value: %q", b.Error)
			}
		})
	}
	// Nothing of the above may have been stored.
	if scopes, _ := p.store.Scopes(t.Context()); len(scopes) != 0 {
		t.Errorf("scopes after bad requests = %v, want none", scopes)
	}
}

func TestDocumentIsAnyJSONValue(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	for _, doc := range []string{`"text"`, `42`, `[1,{"a":null}]`, `true`, `{"nested":{"deep":[1,2,3]}}`} {
		rev := p.create("a.b", doc)
		if _, err := varplane.ParseRevision(string(rev)); err != nil {
			t.Errorf("create %s: revision %q: %v", doc, rev, err)
		}
	}
}

func TestMaxGenerationAccepted(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	rec := p.do("POST", "/vars/admin/deactivate", `{"scope":"a.b","expectedGeneration":18446744073709551615}`)
	b := wantError(t, rec, 409, varplane.CodeRevisionConflict)
	if b.ExpectedGeneration == nil || *b.ExpectedGeneration != 18446744073709551615 {
		t.Errorf("expectedGeneration = %v, want max uint64", b.ExpectedGeneration)
	}
}

func TestBodyLimits(t *testing.T) {
	p := newPlane(t, httpapi.Options{MaxBodyBytes: 128})
	big := `{"scope":"a.b","document":"` + strings.Repeat("x", 200) + `"}`
	t.Run("content-length over the limit", func(t *testing.T) {
		wantError(t, p.do("POST", "/vars/admin/revisions", big), 413, varplane.CodePayloadTooLarge)
	})
	t.Run("chunked over the limit", func(t *testing.T) {
		req := httptest.NewRequest("POST", "/vars/admin/revisions", io.MultiReader(strings.NewReader(big)))
		req.ContentLength = -1
		rec := httptest.NewRecorder()
		p.h.ServeHTTP(rec, req)
		wantError(t, rec, 413, varplane.CodePayloadTooLarge)
	})
	t.Run("under the limit", func(t *testing.T) {
		if rec := p.do("POST", "/vars/admin/revisions", `{"scope":"a.b","document":1}`); rec.Code != 201 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
	t.Run("default limit is 1 MiB", func(t *testing.T) {
		q := newPlane(t, httpapi.Options{})
		doc := `"` + strings.Repeat("x", httpapi.DefaultMaxBodyBytes) + `"`
		wantError(t, q.do("POST", "/vars/admin/validate", `{"document":`+doc+`}`), 413, varplane.CodePayloadTooLarge)
	})
}

func TestDeepNestingIsRefused(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	const depth = 100_000
	doc := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	for _, route := range []string{"revisions", "validate"} {
		rec := p.do("POST", "/vars/admin/"+route, `{"scope":"a.b","document":`+doc+`}`)
		if rec.Code != 400 && rec.Code != 413 {
			t.Fatalf("%s: status = %d, want 400 or 413: %.200s", route, rec.Code, rec.Body)
		}
	}
}

// checkDecodeError is what every decoder promises on failure.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var e *varplane.Error
	if !errors.As(err, &e) || (e.Code != varplane.CodeBadRequest && e.Code != varplane.CodePayloadTooLarge) {
		t.Fatalf("error %v (%T) is not a bad-request *varplane.Error", err, err)
	}
	if !utf8.ValidString(e.Message) {
		t.Fatalf("message is not UTF-8: %q", e.Message)
	}
}

func FuzzDecodeActivate(f *testing.F) {
	f.Add([]byte(`{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":0}`))
	f.Add([]byte(`{"scope":"a.b","revision":"` + rev0 + `","expectedGeneration":1e3}`))
	f.Add([]byte(`{"scope":"a.b","expectedGeneraton":0}`))
	f.Add([]byte("\xff{"))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := httpapi.DecodeActivate(body, varplane.Limits{})
		checkDecodeError(t, err)
		if err == nil && (!req.Scope.Valid() || req.Revision == "") {
			t.Fatalf("accepted an invalid request: %+v", req)
		}
	})
}

func FuzzDecodeRollback(f *testing.F) {
	f.Add([]byte(`{"scope":"a.b","expectedGeneration":2,"toGeneration":1}`))
	f.Add([]byte(`{"scope":"a.b","expectedGeneration":2,"toRevision":"` + rev0 + `"}`))
	f.Add([]byte(`{"scope":"a.b","expectedGeneration":-0}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := httpapi.DecodeRollback(body, varplane.Limits{})
		checkDecodeError(t, err)
		if err == nil && req.ToRevision != "" && req.ToGeneration != nil {
			t.Fatalf("accepted both targets: %+v", req)
		}
	})
}

func FuzzDecodeCreateRevision(f *testing.F) {
	f.Add([]byte(`{"scope":"a.b","document":{"x":[1,2]},"schemaId":"s/v1"}`))
	f.Add([]byte(`{"scope":"g","document":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := httpapi.DecodeCreateRevision(body, varplane.Limits{})
		checkDecodeError(t, err)
		if err == nil && (!req.Scope.Valid() || len(req.Document) == 0) {
			t.Fatalf("accepted an invalid request: %+v", req)
		}
		_, err = httpapi.DecodeDeactivate(body, varplane.Limits{})
		checkDecodeError(t, err)
		_, err = httpapi.DecodeValidate(body, varplane.Limits{})
		checkDecodeError(t, err)
	})
}

func FuzzParseReadScope(f *testing.F) {
	for _, q := range []string{"key=a.b", "group=a", "key=a.b&key=c.d", "key=%FF", "group=a.b", "key=a%2Eb&x=1", "&&key=", "key=a.b;group=c"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		scope, err := httpapi.ParseReadScope(q)
		checkDecodeError(t, err)
		if err == nil && !scope.Valid() {
			t.Fatalf("accepted invalid scope %q from %q", scope, q)
		}
	})
}

// TestDecodePublishHandsTheDocumentOnChecked checks that DecodePublish
// passes the document on as the body's own bytes, vouched for by the body's
// check when it is compact (so the engine does not scan it again), and not
// when it holds white space (the engine then compacts it).
func TestDecodePublishHandsTheDocumentOnChecked(t *testing.T) {
	for _, tt := range []struct {
		body    string
		checked bool
	}{
		{`{"scope":"a.b","expectedGeneration":0,"document":{"x":[1,2],"y":"z"}}`, true},
		{`{ "scope" : "a.b", "document" : {"x":1}, "expectedGeneration" : 3 }`, true},
		{`{"scope":"a.b","expectedGeneration":0,"document":{"x": 1}}`, false},
	} {
		body := []byte(tt.body)
		req, err := httpapi.DecodePublish(body, varplane.DefaultLimits())
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if got := req.Checked.Holds(req.Document); got != tt.checked {
			t.Errorf("%s: document checked %v, want %v", tt.body, got, tt.checked)
		}
		if !bytes.Contains(body, req.Document) || len(req.Document) == 0 {
			t.Errorf("%s: document %q is not the body's", tt.body, req.Document)
		}
	}
}
