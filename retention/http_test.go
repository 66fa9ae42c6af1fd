package retention_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/storetest"
)

// TestHTTPAnswers410: over the HTTP API, replay to a generation whose head
// was reclaimed and rollback to a reclaimed revision answer 410
// revision-reclaimed; a rollback to a revision never created answers 404.
func TestHTTPAnswers410(t *testing.T) {
	s := stores["file"](t)
	revs := publish(t, s, "app.k", 0, 60, t0)
	if _, err := runner(t, s, t0.Add(8*24*time.Hour), nil).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	eng := varplane.NewEngine(s, varplane.Options{})
	defer eng.Close()
	h := httpapi.NewHandler(eng, httpapi.Options{})
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"replay to a reclaimed head", "GET", "/vars/admin/replay?scope=app.k&toGeneration=1", "", 410, "revision-reclaimed"},
		{"replay to a kept head", "GET", "/vars/admin/replay?scope=app.k&toGeneration=60", "", 200, ""},
		{"rollback to a reclaimed revision", "POST", "/vars/admin/rollback", fmt.Sprintf(`{"scope":"app.k","expectedGeneration":60,"toRevision":%q}`, revs[0]), 410, "revision-reclaimed"},
		{"rollback to the generation of a reclaimed revision", "POST", "/vars/admin/rollback", `{"scope":"app.k","expectedGeneration":60,"toGeneration":1}`, 410, "revision-reclaimed"},
		{"rollback to a revision never created", "POST", "/vars/admin/rollback", fmt.Sprintf(`{"scope":"app.k","expectedGeneration":60,"toRevision":%q}`, storetest.RevisionOf(storetest.Doc(9999))), 404, "not-found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(tc.method, tc.path, tc.body)
			if status != tc.status || !strings.Contains(body, tc.code) {
				t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, status, body, tc.status, tc.code)
			}
		})
	}
}
