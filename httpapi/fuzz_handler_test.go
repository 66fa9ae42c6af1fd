package httpapi_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
)

// FuzzHandlerWrites drives every write route of the real handler with the
// fuzzer's body: whatever it is, the answer is one of the documented
// statuses with the one error shape, never a 5xx, and a refused write
// changes nothing stored.
func FuzzHandlerWrites(f *testing.F) {
	for _, s := range []string{
		`{"scope":"a.b","document":{"x":1}}`,
		`{"scope":"a.b","revision":"sha256:0000000000000000000000000000000000000000000000000000000000000000","expectedGeneration":0}`,
		`{"scope":"a","expectedGeneration":0}`,
		`{"scope":"a.b","expectedGeneration":1,"toGeneration":1}`,
		`{"document":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"scope":"a.b","document":"\ud800"}`,
		`{"scope":"a.b","document":1e999}`,
		`{"scope":"a.b","document":{},"actor":"x","actor":"y"}`,
	} {
		for route := range 5 {
			f.Add(uint8(route), []byte(s))
		}
	}
	routes := []string{"revisions", "validate", "activate", "deactivate", "rollback"}
	p := newPlane(f, httpapi.Options{})
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		before := p.snapshot(t)
		req := httptest.NewRequest("POST", "/vars/admin/"+routes[int(route)%len(routes)], bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		p.h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 201:
			return
		case 400, 404, 409, 413, 422:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		if b := errBody(t, rec); b.Code == "" || b.Error == "" {
			t.Fatalf("error without the one shape: %s", rec.Body)
		}
		// A refused create still records a rejected event when the body was
		// a well-formed but invalid document; anything else changes nothing.
		if rec.Code != 422 || errBody(t, rec).Code != varplane.CodeRevisionInvalid {
			if after := p.snapshot(t); after != before {
				t.Fatalf("a refused write (%d) changed the store", rec.Code)
			}
		}
	})
}

// snapshot is the store's scopes and their generations, as a string.
func (p *plane) snapshot(t testing.TB) string {
	t.Helper()
	scopes, err := p.store.Scopes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, sc := range scopes {
		st, err := p.store.State(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := p.store.History(context.Background(), sc)
		b.WriteString(string(sc))
		b.WriteByte(byte(st.Generation))
		b.WriteByte(byte(len(h)))
	}
	return b.String()
}
