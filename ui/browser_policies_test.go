package ui

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// TestBrowserCanaryReports: the change page lists the window's reports
// per instance, marks a doubtful one in words, names the silent fresh
// instances, and shows a new report without a reload.
func TestBrowserCanaryReports(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"a":1}`, "")
	c := canaryChange(t, s, `{"a":2}`)
	now := time.Now()
	s.in.SetStatuses(control.InstanceStatus{Instance: "web-1", At: now}, control.InstanceStatus{Instance: "web-2", At: now}, control.InstanceStatus{Instance: "web-3", At: now})
	s.in.SetReports(c.Canary.ID,
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "web-1", FiledAs: "web-1", Decoded: 12, At: now},
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "web-9", FiledAs: "web-2", Decoded: 3, At: now})
	ctx := newTab(t)
	signinAs(t, ctx, s.srv.URL, readerToken)
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/change?id="+c.ID), chromedp.WaitVisible(chromedp.CSS("#reports")))
	wantText(t, ctx, "#reports caption", "Reports on window "+c.Canary.ID)
	wantText(t, ctx, `#reports tr[data-instance="web-1"] .verdict`, "Counts")
	wantText(t, ctx, `#reports tr[data-instance="web-2"] .verdict`, `Doubtful: a report filed under instance "web-2" names instance "web-9"`)
	wantText(t, ctx, "#unreported", "web-2, web-3")
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#reports tbody tr").length`)); n != 2 {
		t.Fatalf("%d report rows, want 2", n)
	}
	shoot(t, ctx, "canary-reports")

	// web-3 reports: the open change's page shows it without a reload.
	run(t, ctx, chromedp.Evaluate[chromedp.Void](`window.varplaneOld = true`))
	s.in.SetReports(c.Canary.ID,
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "web-1", FiledAs: "web-1", Decoded: 12, At: now},
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "web-9", FiledAs: "web-2", Decoded: 3, At: now},
		varplane.CanaryReport{Window: c.Canary.ID, Instance: "web-3", FiledAs: "web-3", Errors: 1, CandidateError: "limit out of range", At: now})
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#reports tr[data-instance="web-3"]`)))
	wantText(t, ctx, `#reports tr[data-instance="web-3"] .verdict`, "Blocks the window")
	wantText(t, ctx, "#unreported", "web-2.")
	if old := get(t, ctx, chromedp.Evaluate[bool](`window.varplaneOld === true`)); !old {
		t.Fatal("the page was reloaded, not refreshed in place")
	}
}

// TestBrowserPolicies: a token with the policy role creates, edits and
// deletes a review policy; a refused value is said on its field with what
// was typed kept; a read-only token sees no control and a form it forges
// is refused in words.
func TestBrowserPolicies(t *testing.T) {
	s := newStack(t)
	seed(t, s)
	ctx := newTab(t)
	base := s.srv.URL
	signinAs(t, ctx, base, adminToken)
	run(t, ctx, chromedp.Navigate(base+"/ui/policies"), chromedp.WaitVisible(chromedp.CSS("#policy-form")))
	wantText(t, ctx, "#policies", "No review policy")

	// Create.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#p-scope"), "shop.front"), chromedp.SetValue(chromedp.CSS("#p-approvals"), "2"),
		chromedp.SetValue(chromedp.CSS("#p-roles"), "reviewer, lead"), chromedp.Click(chromedp.CSS("#p-canary")))
	clickAndLoad(t, ctx, `button[value="put"]`, "#flash")
	wantText(t, ctx, "#flash", "The review policy on shop.front is set: 2 approval(s) by reviewer, lead, after a passed canary window.")
	wantText(t, ctx, `#policies tr[data-scope="shop.front"]`, "reviewer, lead")
	wantText(t, ctx, `#policies tr[data-scope="shop.front"]`, "required")
	shoot(t, ctx, "policies")
	// The scope page says the scope is now under review.
	run(t, ctx, chromedp.Navigate(base+"/ui/scope?s=shop.front.checkout"), chromedp.WaitVisible(chromedp.CSS("#policy")))
	wantText(t, ctx, "#publish-h", "Propose a change")

	// Edit: the form comes filled; saving replaces the policy.
	run(t, ctx, chromedp.Navigate(base+"/ui/policies"), chromedp.WaitVisible(chromedp.CSS("#policies")))
	clickAndLoad(t, ctx, `#policies tr[data-scope="shop.front"] a.action`, "#p-scope")
	wantText(t, ctx, "#policy-h", "Edit the policy on shop.front")
	if v := get(t, ctx, chromedp.Value(chromedp.CSS("#p-approvals"))); v != "2" {
		t.Fatalf("edit form approvals = %q", v)
	}
	if on := get(t, ctx, chromedp.Evaluate[bool](`document.getElementById("p-canary").checked`)); !on {
		t.Fatal("edit form: canary not checked")
	}
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#p-approvals"), "1"), chromedp.Evaluate[chromedp.Void](`document.getElementById("p-roles").value = ""`), chromedp.Click(chromedp.CSS("#p-canary")))
	clickAndLoad(t, ctx, `button[value="put"]`, "#flash")
	wantText(t, ctx, "#flash", "The review policy on shop.front is set: 1 approval(s).")
	wantText(t, ctx, `#policies tr[data-scope="shop.front"]`, "any")

	// A refused value: on its field, in words, as typed.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#p-scope"), "pay"), chromedp.SetValue(chromedp.CSS("#p-approvals"), "two"))
	clickAndLoad(t, ctx, `button[value="put"]`, "#p-approvals-error")
	wantText(t, ctx, "#p-approvals-error", "approvals must be a whole number")
	if inv := get(t, ctx, chromedp.AttributeValue(chromedp.CSS("#p-approvals"), "aria-invalid")); inv.Value != "true" {
		t.Fatal("the refused field is not marked invalid")
	}
	if v := get(t, ctx, chromedp.Value(chromedp.CSS("#p-scope"))); v != "pay" {
		t.Fatalf("typed scope lost: %q", v)
	}
	// The API's own refusal (out of range) in words at the top.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#p-approvals"), "99"))
	clickAndLoad(t, ctx, `button[value="put"]`, "#flash")
	wantText(t, ctx, "#flash", "approvals must be 1 to 16")
	if ps, _ := s.svc.Policies(context.Background()); len(ps) != 1 {
		t.Fatalf("refused forms stored: %+v", ps)
	}

	// Delete.
	clickAndLoad(t, ctx, `#policies tr[data-scope="shop.front"] button[value="delete"]`, "#flash")
	wantText(t, ctx, "#flash", "The review policy on shop.front is deleted")
	wantText(t, ctx, "#policies", "No review policy")

	// A read-only token: no controls; a forged form is refused.
	if _, err := s.svc.PutPolicy(context.Background(), varplane.Identity{ID: "setup", Roles: []string{"*"}}, control.Policy{Scope: "pay", Approvals: 1}); err != nil {
		t.Fatal(err)
	}
	clickAndLoad(t, ctx, ".signout button", "#token")
	signinAs(t, ctx, base, readerToken)
	run(t, ctx, chromedp.Navigate(base+"/ui/policies"), chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-scope="pay"]`)))
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[action="/ui/policies"], #policy-form, a[href*="edit="]').length`)); n != 0 {
		t.Fatalf("a read-only token sees %d policy controls", n)
	}
	// The forged form carries the page's own CSRF token (the sign-out
	// form's): only the API's authorization stands in the way.
	run(t, ctx, chromedp.Evaluate[chromedp.Void](`(function () {
		var f = document.createElement("form");
		f.method = "post"; f.action = "/ui/policies";
		[["csrf", document.querySelector('.signout input[name="csrf"]').value], ["action", "delete"], ["scope", "pay"]].forEach(function (kv) {
			var i = document.createElement("input"); i.type = "hidden"; i.name = kv[0]; i.value = kv[1]; f.appendChild(i);
		});
		document.body.appendChild(f);
		window.varplaneOld = true;
		f.submit();
	})()`))
	deadline := time.Now().Add(stepTimeout)
	for {
		done := get(t, ctx, chromedp.Evaluate[bool](`window.varplaneOld === undefined && document.readyState === "complete" && !!document.querySelector("#flash")`))
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the forged form led to no page with a message")
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantText(t, ctx, "#flash", "Your token is not allowed to do this")
	if ps, _ := s.svc.Policies(context.Background()); len(ps) != 1 || ps[0].Scope != "pay" {
		t.Fatalf("the forged delete changed the policies: %+v", ps)
	}
	if strings.Contains(get(t, ctx, chromedp.Text(chromedp.CSS("#main"))), `"code"`) {
		t.Fatal("raw JSON on the page")
	}
}

// TestBrowserConfigurationRedirect: the old page's address takes a
// browser to sign in, then to the console's Components page.
func TestBrowserConfigurationRedirect(t *testing.T) {
	s := newStack(t)
	ctx := newTab(t)
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/.configuration"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#c-shop\\.cart")))
	if loc := get(t, ctx, chromedp.Location()); !strings.HasSuffix(loc, "/ui/components") {
		t.Fatalf("landed on %s, want the Components page", loc)
	}
	wantText(t, ctx, `nav a[aria-current="page"]`, "Components")
}
