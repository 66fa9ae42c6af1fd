package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
)

// TestDryRunParameter: the four write routes take dryRun=true|false; any
// other value, or the parameter twice, is 400 before anything is read; a
// dry run is authorized as the write (a token without mutate is 403), is
// bounded as the write (a body over the limit is 413), and a flood of them
// (valid and invalid documents alike) appends nothing to the log.
func TestDryRunParameter(t *testing.T) {
	auth, err := access.Scoped([]access.Grant{
		{Token: "all"},
		{Token: "reader", Kinds: []varplane.Kind{varplane.KindRead, varplane.KindAudit}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := newPlane(t, httpapi.Options{Authorizer: auth, MaxBodyBytes: 4096})
	as := func(token string) []string {
		return []string{"Authorization", "Bearer " + token, "Content-Type", "application/json"}
	}
	if rec := p.do("POST", "/vars/admin/publish", `{"scope":"a.b","document":{"n":1},"expectedGeneration":0}`, as("all")...); rec.Code != http.StatusOK {
		t.Fatalf("publish: %d %s", rec.Code, rec.Body)
	}
	bodies := map[string]string{
		"publish":    `{"scope":"a.b","document":{"n":2},"expectedGeneration":1}`,
		"activate":   `{"scope":"a.b","revision":"sha256:` + strings.Repeat("0", 64) + `","expectedGeneration":1}`,
		"rollback":   `{"scope":"a.b","expectedGeneration":1}`,
		"deactivate": `{"scope":"a","expectedGeneration":0}`,
	}
	for route, body := range bodies {
		path := "/vars/admin/" + route
		for _, q := range []string{"?dryRun=yes", "?dryRun=1", "?dryRun=true&dryRun=true", "?dryRun=TRUE"} {
			wantError(t, p.do("POST", path+q, body, as("all")...), 400, varplane.CodeBadRequest)
		}
		wantError(t, p.do("POST", path+"?dryRun=true", body, as("reader")...), 403, varplane.CodeForbidden)
		wantError(t, p.do("POST", path+"?dryRun=true", `{"scope":"a.b","document":"`+strings.Repeat("x", 8192)+`","expectedGeneration":1}`, as("all")...), 413, varplane.CodePayloadTooLarge)
	}
	before, err := p.store.History(t.Context(), "a.b")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		for route, body := range bodies {
			p.do("POST", "/vars/admin/"+route+"?dryRun=true", body, as("all")...)
		}
		p.do("POST", "/vars/admin/publish?dryRun=true", `{"scope":"g","document":[1],"expectedGeneration":0}`, as("all")...)
	}
	after, _ := p.store.History(t.Context(), "a.b")
	scopes, _ := p.store.Scopes(t.Context())
	if len(after) != len(before) || len(scopes) != 1 {
		t.Fatalf("dry runs wrote: %d events before, %d after; scopes %v", len(before), len(after), scopes)
	}
}
