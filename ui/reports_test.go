package ui

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// canaryChange proposes a change of app.x as alice and opens a window on
// it; it returns the change with its window.
func canaryChange(t *testing.T, s *stack, doc string) *control.Change {
	t.Helper()
	ctx := context.Background()
	alice := varplane.Identity{ID: "alice", Roles: []string{"*"}}
	st, _ := s.engine.Status(ctx, "app.x")
	c, err := s.svc.Propose(ctx, alice, control.ProposeRequest{Scope: "app.x", Base: st.Generation, Document: []byte(doc)})
	if err != nil {
		t.Fatal(err)
	}
	if c, err = s.svc.OpenCanary(ctx, alice, c.ID, 10*time.Minute, 2); err != nil {
		t.Fatal(err)
	}
	return c
}

// rowOf returns the table row of the report filed by instance.
func rowOf(t *testing.T, page, instance string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-instance="` + regexp.QuoteMeta(instance) + `"[^>]*>.*?</tr>`).FindString(page)
	if m == "" {
		t.Fatalf("no report row of %s:\n%s", instance, page)
	}
	return html.UnescapeString(m)
}

func TestChangeReportsTable(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"a":1}`, "")
	b := newBrowser(t, s)
	b.signin(readerToken)

	// A change without a window shows no table, and an open one polls.
	ctx := context.Background()
	plain, err := s.svc.Propose(ctx, varplane.Identity{ID: "alice", Roles: []string{"*"}}, control.ProposeRequest{Scope: "app.x", Base: 1, Document: []byte(`{"a":5}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, page := b.do("GET", "/ui/change?id="+plain.ID, nil)
	if strings.Contains(page, `id="reports"`) || !strings.Contains(page, "No canary window.") || !strings.Contains(page, `data-live-poll="300"`) {
		t.Fatalf("a change without a window:\n%s", page)
	}

	c := canaryChange(t, s, `{"a":2}`)
	_, page = b.do("GET", "/ui/change?id="+c.ID, nil)
	if !strings.Contains(page, `<table id="reports">`) || !strings.Contains(page, "<caption>Reports on window "+c.Canary.ID) || !strings.Contains(page, "No instance has reported on this window yet.") {
		t.Fatalf("a window without reports:\n%s", page)
	}

	now := time.Now()
	s.in.SetStatuses(control.InstanceStatus{Instance: "i1", At: now}, control.InstanceStatus{Instance: "i2", At: now}, control.InstanceStatus{Instance: "i3", At: now})
	s.in.SetReports(c.Canary.ID,
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "i1", FiledAs: "i1", Decoded: 7, At: now},
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "i9", FiledAs: "i2", Decoded: 1, At: now},
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "i4", FiledAs: "i4", Errors: 1, CandidateError: "max out of range", At: now},
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "i5", FiledAs: "i5", At: now, Identity: "alice", MayRead: true},
	)
	_, page = b.do("GET", "/ui/change?id="+c.ID, nil)
	for _, tc := range []struct {
		instance string
		want     []string
		not      []string
	}{
		{"i1", []string{"<code>i1</code>", ">7<", "Counts"}, []string{"Doubtful"}},
		{"i2", []string{"<code>i9</code>", `Doubtful:</strong> a report filed under instance "i2" names instance "i9"`}, nil},
		{"i4", []string{"max out of range", "Blocks the window"}, []string{"Doubtful"}},
		{"i5", []string{`Does not count: filed by "alice", the change's author`}, []string{"Doubtful", "Counts"}},
	} {
		row := rowOf(t, page, tc.instance)
		for _, w := range tc.want {
			if !strings.Contains(row, w) {
				t.Errorf("row of %s lacks %q: %s", tc.instance, w, row)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(row, w) {
				t.Errorf("row of %s has %q: %s", tc.instance, w, row)
			}
		}
	}
	if !strings.Contains(rowOf(t, page, "i2"), `class="doubtful"`) {
		t.Error("the doubtful row is not marked")
	}
	if !strings.Contains(page, "Instances with a fresh status and no report: <code>i2</code>, <code>i3</code>.") {
		t.Errorf("the silent instances are not listed:\n%s", page)
	}

	// A closed change does not poll; its reports stay readable.
	if _, err := s.svc.Withdraw(ctx, varplane.Identity{ID: "alice", Roles: []string{"*"}}, c.ID, ""); err != nil {
		t.Fatal(err)
	}
	_, page = b.do("GET", "/ui/change?id="+c.ID, nil)
	if strings.Contains(page, "data-live-poll") || !strings.Contains(page, `<table id="reports">`) {
		t.Fatalf("a withdrawn change:\n%s", page)
	}
}

// TestPolicyEditing: a token with the policy role creates, edits and
// deletes a policy through the console (post/redirect/get, errors in
// words on the field, what was typed kept); the store holds exactly what
// the console says.
func TestPolicyEditing(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	b := newBrowser(t, s)
	b.signin(adminToken)
	post := func(form url.Values) string {
		t.Helper()
		form.Set("csrf", b.csrf("/ui/policies"))
		resp, _ := b.do("POST", "/ui/policies", form)
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/policies") {
			t.Fatalf("post %v: %d %s", form, resp.StatusCode, resp.Header.Get("Location"))
		}
		_, page := b.do("GET", resp.Header.Get("Location"), nil)
		return html.UnescapeString(page)
	}
	policies := func() []control.Policy {
		t.Helper()
		ps, err := s.svc.Policies(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	_, page := b.do("GET", "/ui/policies", nil)
	if !strings.Contains(page, "No review policy") || !strings.Contains(page, `id="policy-form"`) {
		t.Fatalf("empty policies page:\n%s", page)
	}

	page = post(url.Values{"action": {"put"}, "scope": {"app"}, "approvals": {"2"}, "roles": {"reviewer, lead"}, "canary": {"on"}})
	if !strings.Contains(page, "The review policy on app is set: 2 approval(s) by reviewer, lead, after a passed canary window.") {
		t.Fatalf("after create:\n%s", page)
	}
	if ps := policies(); len(ps) != 1 || ps[0].Scope != "app" || ps[0].Approvals != 2 || strings.Join(ps[0].Roles, ",") != "reviewer,lead" || !ps[0].Canary {
		t.Fatalf("stored = %+v", ps)
	}
	if !strings.Contains(page, `<tr data-scope="app">`) || !strings.Contains(page, "reviewer, lead") {
		t.Fatalf("the list lacks the policy:\n%s", page)
	}

	// Edit: the form is filled with the policy, and saving replaces it.
	_, page = b.do("GET", "/ui/policies?edit=app", nil)
	for _, w := range []string{"Edit the policy on app", `id="p-scope" name="scope" required value="app"`, `value="2"`, `value="reviewer, lead"`, `checked`} {
		if !strings.Contains(page, w) {
			t.Errorf("edit form lacks %q", w)
		}
	}
	post(url.Values{"action": {"put"}, "scope": {"app"}, "approvals": {"1"}, "roles": {""}})
	if ps := policies(); len(ps) != 1 || ps[0].Approvals != 1 || len(ps[0].Roles) != 0 || ps[0].Canary {
		t.Fatalf("after edit = %+v", ps)
	}

	// Refused forms: in words, on the field, typed values kept, nothing
	// stored.
	for _, tc := range []struct {
		name  string
		form  url.Values
		field string
		want  string
	}{
		{"approvals not a number", url.Values{"action": {"put"}, "scope": {"app.y"}, "approvals": {"two"}, "roles": {"ops"}}, "p-approvals-error", "approvals must be a whole number"},
		{"approvals out of range", url.Values{"action": {"put"}, "scope": {"app.y"}, "approvals": {"0"}, "roles": {"ops"}}, "", "approvals must be 1 to 16"},
		{"a bad scope", url.Values{"action": {"put"}, "scope": {"no spaces allowed"}, "approvals": {"1"}}, "p-scope-error", "the scope is not a valid scope name"},
		{"the control records", url.Values{"action": {"put"}, "scope": {"varplane-control.x"}, "approvals": {"1"}}, "", "cannot cover the control subsystem"},
		{"approvals beyond an int", url.Values{"action": {"put"}, "scope": {"app.y"}, "approvals": {"99999999999999999999999"}}, "p-approvals-error", "approvals must be a whole number"},
		{"a scope with a control character", url.Values{"action": {"put"}, "scope": {"app.\x00y"}, "approvals": {"1"}}, "p-scope-error", "the scope is not a valid scope name"},
		{"a role too long", url.Values{"action": {"put"}, "scope": {"app.y"}, "approvals": {"1"}, "roles": {strings.Repeat("r", 200)}}, "", "a role must be 1 to 128 bytes"},
		{"delete what is not there", url.Values{"action": {"delete"}, "scope": {"nothing.here"}}, "", "Not found: no review policy"},
	} {
		page := post(tc.form)
		if !strings.Contains(page, tc.want) {
			t.Errorf("%s: the page does not say %q:\n%s", tc.name, tc.want, page)
		}
		if tc.field != "" && !strings.Contains(page, `id="`+tc.field+`"`) {
			t.Errorf("%s: not shown on the field (%s)", tc.name, tc.field)
		}
		if tc.form.Get("action") == "put" && !strings.ContainsRune(tc.form.Get("scope"), 0) && !strings.Contains(page, `value="`+tc.form.Get("scope")+`"`) {
			t.Errorf("%s: the typed scope is not kept", tc.name)
		}
		if strings.Contains(page, `{"code"`) {
			t.Errorf("%s: raw JSON on the page", tc.name)
		}
		if ps := policies(); len(ps) != 1 || ps[0].Approvals != 1 {
			t.Fatalf("%s: stored = %+v", tc.name, ps)
		}
	}

	page = post(url.Values{"action": {"delete"}, "scope": {"app"}})
	if !strings.Contains(page, "The review policy on app is deleted") || len(policies()) != 0 {
		t.Fatalf("after delete: %+v\n%s", policies(), page)
	}
	// A reload of the result page sends nothing again (post/redirect/get).
	_, page = b.do("GET", "/ui/policies", nil)
	if strings.Contains(page, "is deleted") {
		t.Fatal("the result shows again on a reload")
	}
}

// TestPolicyReadOnly: a token that may not manage policies sees them but
// no control, and a forged post with its own CSRF token is refused by the
// API (in words) with nothing stored; one without the token is 403.
func TestPolicyReadOnly(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	if _, err := s.svc.PutPolicy(ctx, varplane.Identity{ID: "setup", Roles: []string{"*"}}, control.Policy{Scope: "app", Approvals: 1}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, s)
	b.signin(readerToken)
	_, page := b.do("GET", "/ui/policies", nil)
	if !strings.Contains(page, `<tr data-scope="app">`) {
		t.Fatalf("the reader does not see the policy:\n%s", page)
	}
	for _, ctl := range []string{`id="policy-form"`, `value="delete"`, `value="put"`, `?edit=`} {
		if strings.Contains(page, ctl) {
			t.Errorf("a read-only token sees %s", ctl)
		}
	}
	csrf := csrfRE.FindStringSubmatch(page)[1] // the sign-out form's
	for _, form := range []url.Values{
		{"action": {"put"}, "scope": {"app"}, "approvals": {"3"}},
		{"action": {"put"}, "scope": {"other"}, "approvals": {"1"}},
		{"action": {"delete"}, "scope": {"app"}},
	} {
		form.Set("csrf", csrf)
		resp, _ := b.do("POST", "/ui/policies", form)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("forged %v: %d", form, resp.StatusCode)
		}
		_, page := b.do("GET", resp.Header.Get("Location"), nil)
		if !strings.Contains(page, "Your token is not allowed to do this") {
			t.Errorf("forged %v: the refusal is not in words:\n%s", form, page)
		}
	}
	resp, _ := b.do("POST", "/ui/policies", url.Values{"action": {"delete"}, "scope": {"app"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a post without the CSRF token: %d", resp.StatusCode)
	}
	if ps, _ := s.svc.Policies(ctx); len(ps) != 1 || ps[0].Scope != "app" || ps[0].Approvals != 1 {
		t.Fatalf("a forged form changed the policies: %+v", ps)
	}
}

// TestComponentsRedirect: the old page's address answers 303 to the
// Components page for every method, and a POST there creates nothing.
func TestComponentsRedirect(t *testing.T) {
	s := newStack(t)
	b := newBrowser(t, s)
	for _, m := range []string{"GET", "HEAD", "POST"} {
		var form url.Values
		if m == "POST" {
			form = url.Values{"component": {"shop.cart"}, "configuration": {"maxItems: 3"}}
		}
		resp, _ := b.do(m, "/.configuration", form)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/components" {
			t.Errorf("%s /.configuration: %d %q", m, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if h := ComponentsRedirect("console/"); h == nil {
		t.Fatal("no handler")
	} else {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/.configuration", nil))
		if rec.Header().Get("Location") != "/console/components" {
			t.Errorf("prefix console/: %q", rec.Header().Get("Location"))
		}
	}
	all, err := s.engine.Store().Scopes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range all {
		if strings.HasPrefix(string(sc), "shop.cart@") {
			t.Fatalf("a POST to the redirect created %s", sc)
		}
	}
}
