package ui

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/store/memory"
)

// newValuesPage returns a values service over the deployment of
// config's test manifests and its page (ValuesPage) under lim.
func newValuesPage(t *testing.T, lim varplane.Limits) (*config.Service, http.Handler) {
	t.Helper()
	store := memory.New()
	eng := varplane.NewEngine(store, varplane.Options{Limits: lim})
	t.Cleanup(func() { eng.Close(); _ = store.Close() })
	ms, err := config.LoadManifests(filepath.Join("..", "config", "testdata", "manifests"))
	var dep *config.Deployment
	if err == nil {
		dep, err = config.NewDeployment(ms, nil, "")
	}
	if err != nil {
		t.Fatal(err)
	}
	svc, err := config.NewService(eng, dep)
	if err != nil {
		t.Fatal(err)
	}
	return svc, ValuesPage(svc, ValuesPageOptions{Logger: slog.New(slog.DiscardHandler)})
}

func mustCreate(t *testing.T, svc *config.Service, component, conf, originator string) {
	t.Helper()
	if _, err := svc.Create(context.Background(), config.CreateRequest{Component: component, Configuration: json.RawMessage(conf), Originator: originator}); err != nil {
		t.Fatalf("Create(%s, %s): %v", component, conf, err)
	}
}

func pageRequest(t *testing.T, srv *httptest.Server, method, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+"/.configuration", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func servePage(h http.Handler, method, path, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// nested is depth levels of open … closing around leaf.
func nested(open, leaf, closing string, depth int) []byte {
	return []byte(strings.Repeat(open, depth) + leaf + strings.Repeat(closing, depth))
}

func TestValuesPage(t *testing.T) {
	svc, h := newValuesPage(t, varplane.Limits{MaxBodyBytes: 4096})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	mustCreate(t, svc, "alpha.bare", `{"n":4}`, "erin")
	resp, body := pageRequest(t, srv, "GET", "", "")
	page := string(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	epoch := svc.Deployment().Components["alpha.bare"].Epoch
	for _, want := range []string{"alpha.bare", "dummies.dummy", epoch, ">created<", ">defaults<", `&#34;n&#34;: 4`, `<form method="post" action="/.configuration">`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, bad := range []string{"<script", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("page carries %s: it must need no external asset", bad)
		}
	}

	post := func(component, text string) (int, string) {
		form := url.Values{"component": {component}, "configuration": {text}}
		resp, body := pageRequest(t, srv, "POST", "application/x-www-form-urlencoded", form.Encode())
		return resp.StatusCode, string(body)
	}
	status, page := post("alpha.bare", "n: 9")
	if status != 201 || !strings.Contains(page, "Created ") || !strings.Contains(page, `&#34;n&#34;: 9`) {
		t.Errorf("form create = %d\n%s", status, page)
	}
	status, page = post("alpha.bare", `{"n": "nine"}`)
	if status != 422 || !strings.Contains(page, `id="issues"`) || !strings.Contains(page, "/n") || !strings.Contains(page, "document.type") {
		t.Errorf("form invalid = %d\n%s", status, page)
	}
	// The rejected draft stays in the form, escaped.
	if !strings.Contains(page, `{&#34;n&#34;: &#34;nine&#34;}`) {
		t.Error("the rejected draft is not kept in the form")
	}
	status, _ = post("alpha.bare", "n: [")
	if status != 400 {
		t.Errorf("undecodable form = %d", status)
	}
	// A cross-site form post is refused.
	req, _ := http.NewRequest("POST", srv.URL+"/.configuration", strings.NewReader("component=alpha.bare&configuration=n%3A+1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site post = %d, want 403", resp.StatusCode)
	}
}

// TestValuesPageLimitsAndYAML: the page's form is read within the limits and by
// the one converter.
func TestValuesPageLimitsAndYAML(t *testing.T) {
	_, h := newValuesPage(t, varplane.Limits{MaxBodyBytes: 4096, MaxDepth: 8})
	post := func(text string) *httptest.ResponseRecorder {
		return servePage(h, "POST", "/.configuration", "application/x-www-form-urlencoded", []byte("component=alpha.bare&configuration="+url.QueryEscape(text)))
	}
	if rec := post("n: 0644"); rec.Code != 400 || !strings.Contains(rec.Body.String(), "line 1: an integer with a leading zero") {
		t.Errorf("0644 on the page = %d\n%s", rec.Code, rec.Body)
	}
	if rec := post("n: 1\nx: " + string(nested("[", "", "]", 20))); rec.Code != 400 || !strings.Contains(rec.Body.String(), "depth") {
		t.Errorf("deep form = %d\n%s", rec.Code, rec.Body)
	}
	if rec := post("n: " + strings.Repeat("1", 5000)); rec.Code != 413 {
		t.Errorf("large form = %d", rec.Code)
	}
	if rec := post(`{"n": 7}`); rec.Code != 201 || !strings.Contains(rec.Body.String(), "Created ") {
		t.Errorf("JSON on the page = %d\n%s", rec.Code, rec.Body)
	}
}
