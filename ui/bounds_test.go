package ui

import (
	"strings"
	"testing"
)

// TestScopePageComputesNoDiffUnlessAsked: opening a scope page costs its
// head and a page of history; the diff of two generations (two documents
// loaded, their lines aligned) is computed only when the compare form
// asks for it, and the form offers the last two generations.
func TestScopePageComputesNoDiffUnlessAsked(t *testing.T) {
	s := newStack(t)
	old := `{"old":"` + strings.Repeat("o", 200<<10) + `"}`
	s.publish(t, "app.x", old, "")
	s.publish(t, "app.x", `{"new":1}`, "")
	b := newBrowser(t, s)
	b.signin(readerToken)

	_, page := b.do("GET", "/ui/scope?s=app.x", nil)
	if strings.Contains(page, `id="diff"`) || strings.Contains(page, "ooooo") {
		t.Fatalf("the scope page computed a diff on opening (%d bytes)", len(page))
	}
	for _, sel := range []string{`<option value="1" selected>`, `<option value="2" selected>`, "Choose two generations to compare"} {
		if !strings.Contains(page, sel) {
			t.Errorf("the compare form lacks %s", sel)
		}
	}
	for _, q := range []string{"&from=1&to=2", "&from=1", "&to=2"} {
		_, page = b.do("GET", "/ui/scope?s=app.x"+q, nil)
		if !strings.Contains(page, `id="diff"`) || !strings.Contains(page, "ooooo") {
			t.Errorf("asked with %s, the page shows no diff", q)
		}
	}
}
