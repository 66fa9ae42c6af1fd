package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSchemasPage: the console lists schemas and bindings, previews a
// binding with the current heads it would reject, refuses to bind over
// them unless "bind anyway", unbinds; the editor's Validate uses the
// binding and names it; a read-only token sees the bindings, no control,
// and a form it forges is refused in words.
func TestSchemasPage(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"a":1}`, "")
	s.publish(t, "app.y", `{"b":"text"}`, "")
	b := newBrowser(t, s)
	b.signin(adminToken)
	has := func(what, page string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(page, w) {
				t.Fatalf("%s lacks %q:\n%s", what, w, page)
			}
		}
	}
	follow := func(resp *http.Response) string {
		t.Helper()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want a redirect", resp.StatusCode)
		}
		_, page := b.do("GET", resp.Header.Get("Location"), nil)
		return page
	}
	bindings := func() int {
		list, err := s.svc.Bindings(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	_, page := b.do("GET", "/ui/schemas", nil)
	has("schemas page", page, "<code>app/v1</code>", "No binding", `id="bind-form"`, `href="/ui/schemas" aria-current="page"`)

	_, page = b.do("GET", "/ui/schemas?preview=1&prefix=app&schema=app%2Fv1", nil)
	has("preview", page, "2 current head(s) would be governed by it; 1 rejected", `data-scope="app.y"`, `name="force"`)
	if bindings() != 0 {
		t.Fatal("a preview bound")
	}
	csrf := csrfRE.FindStringSubmatch(page)[1]
	resp, _ := b.do("POST", "/ui/schemas", url.Values{"csrf": {csrf}, "prefix": {"app"}, "schema": {"app/v1"}, "action": {"bind"}})
	has("bind over a rejected head", follow(resp), "rejects 1 current head(s)", "app.y")
	if bindings() != 0 {
		t.Fatal("a refused bind bound")
	}
	resp, _ = b.do("POST", "/ui/schemas", url.Values{"csrf": {csrf}, "prefix": {"app"}, "schema": {"app/v1"}, "action": {"bind"}, "force": {"on"}})
	page = follow(resp)
	has("forced bind", page, "Every write to app and below is now validated against app/v1", `data-prefix="app"`, `aria-label="Unbind app"`)

	resp, _ = b.do("POST", "/ui/publish", url.Values{"csrf": {csrf}, "s": {"app.x"}, "document": {`{"a":2}`}, "expected": {"1"}, "action": {"validate"}})
	has("validate", follow(resp), "valid against schema app/v1, which app is bound to")
	resp, _ = b.do("POST", "/ui/publish", url.Values{"csrf": {csrf}, "s": {"app.x"}, "document": {`{"a":"no"}`}, "expected": {"1"}, "action": {"validate"}})
	has("validate an invalid document", follow(resp), `id="document-issues"`, "/a")

	r := newBrowser(t, s)
	r.signin(readerToken)
	_, page = r.do("GET", "/ui/schemas", nil)
	has("reader's page", page, `data-prefix="app"`)
	if strings.Contains(page, "Unbind") || strings.Contains(page, `id="bind-form"`) {
		t.Fatalf("a read-only token sees controls:\n%s", page)
	}
	rcsrf := csrfRE.FindStringSubmatch(page)[1]
	resp, _ = r.do("POST", "/ui/schemas", url.Values{"csrf": {rcsrf}, "prefix": {"app"}, "action": {"unbind"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("forged unbind: %d", resp.StatusCode)
	}
	_, page = r.do("GET", resp.Header.Get("Location"), nil)
	has("forged unbind", page, "Your token is not allowed to do this")
	if bindings() != 1 {
		t.Fatal("a forged unbind unbound")
	}

	resp, _ = b.do("POST", "/ui/schemas", url.Values{"csrf": {csrf}, "prefix": {"app"}, "action": {"unbind"}})
	has("unbind", follow(resp), "The binding of app is removed", "No binding")
}
