package control_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// FuzzProposeBody sends arbitrary bodies to POST /changes and
// /changes/{id}:rebase through the real handler: no answer is a 5xx, and a
// refused proposal stores no change.
func FuzzProposeBody(f *testing.F) {
	for _, seed := range []string{
		`{"scope":"app.x","base":0,"document":{"a":1}}`,
		`{"scope":"app.x","base":0,"document":{"a":1},"note":"n","schemaId":"strict"}`,
		`{"scope":"","base":0,"document":1}`,
		`{"scope":"app.x","base":-1,"document":1}`,
		`{"scope":"app.x","base":18446744073709551616,"document":1}`,
		`{"scope":"varplane-control.x","base":0,"document":1}`,
		`{"scope":"app.x","base":0,"document":{"a":1},"scope":"b"}`,
		`{"base":1}`, `[]`, `null`, `{"scope":"app.x","base":0,"document":[[[[[[[[[[1]]]]]]]]]]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// A fresh store each time: the check counts what one body stored.
		st := memory.New()
		defer st.Close()
		guard := control.NewGuard()
		eng := varplane.NewEngine(st, varplane.Options{Validator: rejectBad{}, Owners: guard.Owners(), Limits: varplane.Limits{MaxDepth: 8}})
		defer eng.Close()
		svc := control.New(eng, guard, control.Options{})
		h := httpapi.NewHandler(eng, httpapi.Options{Base: "/", Authorizer: authz, Logger: slog.New(slog.DiscardHandler), Control: svc})
		defer h.Close()
		var before []*control.Change
		req := httptest.NewRequest(http.MethodPost, "/control/changes", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("body %q: %d %s", body, w.Code, w.Body)
		}
		after, err := svc.List(context.Background(), control.ListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if w.Code >= 400 && len(after) != len(before) {
			t.Fatalf("body %q was refused (%d) but stored a change", body, w.Code)
		}
		if w.Code == 201 && len(after) != len(before)+1 {
			t.Fatalf("body %q was accepted but stored %d changes", body, len(after)-len(before))
		}
	})
}
