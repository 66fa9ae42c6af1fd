package ui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// chromium returns the path of the browser, or skips the test when there
// is none and VARPLANE_REQUIRE_SERVICES is unset (CI sets it and installs
// Debian's chromium package).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
		t.Fatal("chromium is not installed and VARPLANE_REQUIRE_SERVICES is set (apt-get install chromium)")
	}
	t.Skip("browser tests skipped: chromium is not installed (apt-get install chromium, or set VARPLANE_REQUIRE_SERVICES to make this a failure)")
	return ""
}

// newTab starts a headless Chromium with a fresh profile and returns a
// tab's context. When the test fails, the tab's screen is saved as a PNG
// (the path is logged).
func newTab(t *testing.T) context.Context {
	t.Helper()
	if raceEnabled && !strings.HasPrefix(t.Name(), "TestBrowserLive") {
		// The pages drive the console's handlers one request at a time:
		// the run without the detector (go test ./...) clicks through
		// every one, and TestBrowserLive, whose page is fed by the live
		// stream's goroutines, runs under the detector too.
		t.Skip("browser test runs without the race detector (TestBrowserLive runs with it)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 860),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
				dir := os.Getenv("VARPLANE_FAILURE_SCREENSHOTS")
				if dir == "" {
					dir = filepath.Join(os.TempDir(), "varplane-ui-failures")
				}
				_ = os.MkdirAll(dir, 0o755)
				p := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".png")
				if err := os.WriteFile(p, png, 0o644); err == nil {
					t.Logf("screenshot of the failure: %s", p)
				}
			}
		}
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// shoot saves the screen as docs/screenshots/<name>.png when
// VARPLANE_SCREENSHOTS names a directory (make screenshots).
func shoot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("VARPLANE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// stepTimeout bounds each group of browser steps.
const stepTimeout = 20 * time.Second

func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// clickAndLoad clicks sel (a button or link that loads a page: a form
// post and its redirect) and waits until a new document shows wait. The
// old document is marked, so an element of it never satisfies the wait.
func clickAndLoad(t *testing.T, ctx context.Context, sel, wait string) {
	t.Helper()
	// The live script may swap the region that holds sel between the query
	// and the click (the node is then gone): the click is tried again.
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		err := chromedp.Do(sctx, chromedp.Evaluate[chromedp.Void](`window.varplaneOld = true`), chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			break
		}
		if attempt == 4 || !strings.Contains(err.Error(), "Could not find node") {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	expr := fmt.Sprintf(`window.varplaneOld === undefined && document.readyState === "complete" && !!document.querySelector(%q)`, wait)
	deadline := time.Now().Add(stepTimeout)
	for time.Now().Before(deadline) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := chromedp.Run(sctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("after clicking %s, no page with %s", sel, wait)
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(sel)))
	// One script reads the node it finds: a page that swaps its live
	// regions (every poll of an open change) may replace the node between
	// a query and a read of its text made as two protocol calls.
	return get(t, ctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {}).innerText || ''", sel)))
}

func wantText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	if got := text(t, ctx, sel); !strings.Contains(got, want) {
		t.Fatalf("%s says %q, want %q", sel, got, want)
	}
}

func signinAs(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	run(t, ctx,
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#who")),
	)
}

// seed writes the scopes every browser test starts from.
func seed(t *testing.T, s *stack) {
	s.publish(t, "shop.front", `{"banner":"hello","limits":{"cart":10}}`, "first")
	s.publish(t, "shop.front.checkout", `{"provider":"acme","retries":2,"timeoutMs":800}`, "launch")
	s.publish(t, "shop.front.checkout", `{"provider":"acme","retries":3,"timeoutMs":1200}`, "slow upstream")
	s.publish(t, "shop.front.search", `{"engine":"v2"}`, "")
	s.publish(t, "pay.gateway", `{"currency":"EUR","fraudCheck":true}`, "")
}

func TestBrowserScopesAndScopePage(t *testing.T) {
	s := newStack(t)
	seed(t, s)
	ctx := newTab(t)
	base := s.srv.URL
	signinAs(t, ctx, base, adminToken)
	wantText(t, ctx, "#who", "alice")
	wantText(t, ctx, "#scopes caption", "4 of 4 scopes")
	// The stream's first heads are what the table shows: no news.
	time.Sleep(300 * time.Millisecond)
	if live := get(t, ctx, chromedp.Evaluate[string](`document.getElementById("live").textContent`)); live != "" {
		t.Fatalf("the scopes page announces %q on opening", live)
	}
	wantText(t, ctx, `#scopes tr[data-scope="shop.front.checkout"] .gen`, "2")
	wantText(t, ctx, `#scopes tr[data-scope="shop.front.checkout"]`, "setup")
	shoot(t, ctx, "scopes")

	// Search narrows the tree; status filters it.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#q"), "checkout"), chromedp.Submit(chromedp.CSS("#q")), chromedp.WaitVisible(chromedp.CSS("#scopes")))
	wantText(t, ctx, "#scopes caption", "1 of 4 scopes")

	// The scope page: head, timeline, and the form that compares the last
	// two generations (no diff is computed before it is asked for).
	clickAndLoad(t, ctx, `a[href="/ui/scope?s=shop.front.checkout"]`, "#head")
	wantText(t, ctx, "#generation", "2")
	wantText(t, ctx, "#published-by", "setup")
	wantText(t, ctx, "#timeline", "slow upstream")
	wantText(t, ctx, "#compare", "Choose two generations to compare")
	clickAndLoad(t, ctx, `#compare button[type="submit"]`, "#diff")
	wantText(t, ctx, "#diff caption", "#1 → #2")
	wantText(t, ctx, "#diff tr.mod .l", `"retries": 2`)
	wantText(t, ctx, "#diff tr.mod .r", `"retries": 3`)
	shoot(t, ctx, "scope")
	run(t, ctx, chromedp.ScrollIntoView(chromedp.CSS("#compare")))
	shoot(t, ctx, "diff")

	// Invalid document: the issue is on the document field, the draft kept.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#document"), `{"retries": `))
	clickAndLoad(t, ctx, `button[value="publish"]`, "#document-issues")
	if invalid := get(t, ctx, chromedp.AttributeValue(chromedp.CSS("#document"), "aria-invalid")).Value; invalid != "true" {
		t.Fatalf("document aria-invalid = %q", invalid)
	}
	wantText(t, ctx, "#publish-message", "does not decode")
	if draft := get(t, ctx, chromedp.Value(chromedp.CSS("#document"))); draft != `{"retries": ` {
		t.Fatalf("draft lost: %q", draft)
	}

	// Validate, then publish with the expected generation.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#document"), `{"provider":"acme","retries":4,"timeoutMs":1200}`))
	clickAndLoad(t, ctx, `button[value="validate"]`, "#publish-message")
	wantText(t, ctx, "#publish-message", "The document is valid")
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#reason"), "more retries"))
	clickAndLoad(t, ctx, `button[value="publish"]`, "#flash")
	wantText(t, ctx, "#flash", "Published generation 3.")
	wantText(t, ctx, "#generation", "3")

	// A stale expected generation: the conflict is said on that field.
	s.publish(t, "shop.front.checkout", `{"provider":"other"}`, "elsewhere")
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#document"), `{"provider":"mine"}`),
		chromedp.SetValue(chromedp.CSS("#expected"), "3"))
	clickAndLoad(t, ctx, `button[value="publish"]`, "#expected-error")
	wantText(t, ctx, "#expected-error", "it is at generation 4, not 3")

	// Compare any two generations.
	run(t, ctx,
		chromedp.Navigate(base+"/ui/scope?s=shop.front.checkout"),
		chromedp.WaitVisible(chromedp.CSS("#from")),
		chromedp.SetValue(chromedp.CSS("#from"), "1"),
		chromedp.SetValue(chromedp.CSS("#to"), "3"),
		chromedp.Submit(chromedp.CSS("#from")),
		chromedp.WaitVisible(chromedp.CSS("#diff")))
	wantText(t, ctx, "#diff caption", "#1 → #3")
	wantText(t, ctx, "#diff tr.mod .r", `"retries": 4`)
}

func TestBrowserLive(t *testing.T) {
	s := newStack(t)
	seed(t, s)
	ctx := newTab(t)
	signinAs(t, ctx, s.srv.URL, adminToken)
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/scope?s=shop.front.search"), chromedp.WaitVisible(chromedp.CSS("#generation")),
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	wantText(t, ctx, "#generation", "1")
	// Give the stream a moment to open, then publish behind the page's back.
	time.Sleep(500 * time.Millisecond)
	s.publish(t, "shop.front.search", `{"engine":"v3"}`, "live")
	get(t, ctx, chromedp.Poll[bool](`document.getElementById("generation").textContent.trim() === "2"`, chromedp.WithPollingTimeout(15*time.Second)))
	wantText(t, ctx, "#live", "Generation 2 of shop.front.search is live")
	wantText(t, ctx, "#timeline", "live")
	if !get(t, ctx, chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Fatal("the page reloaded")
	}

	// The scopes page shows a new scope, and a new generation, as they land.
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#scopes")),
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	time.Sleep(500 * time.Millisecond)
	s.publish(t, "shop.front.new", `{"x":1}`, "")
	s.publish(t, "shop.front.search", `{"engine":"v4"}`, "")
	get(t, ctx, chromedp.Poll[bool](`!!document.querySelector('tr[data-scope="shop.front.new"]') && document.querySelector('tr[data-scope="shop.front.search"] .gen').textContent.trim() === "3"`, chromedp.WithPollingTimeout(15*time.Second)))
	if !get(t, ctx, chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Fatal("the scopes page reloaded")
	}
}

func TestBrowserRollbackAndDeactivate(t *testing.T) {
	s := newStack(t)
	seed(t, s)
	ctx := newTab(t)
	base := s.srv.URL
	signinAs(t, ctx, base, adminToken)
	run(t, ctx, chromedp.Navigate(base+"/ui/scope?s=shop.front.checkout"))
	clickAndLoad(t, ctx, `a[href="/ui/rollback?s=shop.front.checkout&to=1"]`, "#diff")
	wantText(t, ctx, "h1", "Roll back shop.front.checkout to #1")
	wantText(t, ctx, "#diff tr.mod .l", `"retries": 3`)
	wantText(t, ctx, "#diff tr.mod .r", `"retries": 2`)
	shoot(t, ctx, "rollback")
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#reason"), "too slow"))
	clickAndLoad(t, ctx, `button[value="rollback"]`, "#flash")
	wantText(t, ctx, "#flash", "Rolled back to generation 1: the head is now generation 3.")
	wantText(t, ctx, "#timeline", "too slow")

	// Deactivate the parent: the cascade is listed before confirming.
	run(t, ctx, chromedp.Navigate(base+"/ui/scope?s=shop.front"))
	clickAndLoad(t, ctx, `a[href="/ui/deactivate?s=shop.front"]`, "#cascade")
	for _, sc := range []string{"shop.front (generation 1)", "shop.front.checkout (to generation 4)", "shop.front.search (to generation 2)"} {
		wantText(t, ctx, "#cascade", sc)
	}
	shoot(t, ctx, "deactivate")
	clickAndLoad(t, ctx, `#main form button.danger`, "#flash")
	wantText(t, ctx, "#flash", "Deactivated at generation 2 (2 descendants with it).")
	wantText(t, ctx, "#status", "inactive")
	for _, sc := range []varplane.Scope{"shop.front.checkout", "shop.front.search"} {
		if st, _ := s.engine.Status(context.Background(), sc); st.Active {
			t.Errorf("%s is still active", sc)
		}
	}
}

func TestBrowserChanges(t *testing.T) {
	s := newStack(t)
	seed(t, s)
	if _, err := s.svc.PutPolicy(context.Background(), varplane.Identity{ID: "setup", Roles: []string{"*"}}, control.Policy{Scope: "pay.gateway", Approvals: 1}); err != nil {
		t.Fatal(err)
	}
	ctx := newTab(t)
	base := s.srv.URL
	signinAs(t, ctx, base, adminToken)
	run(t, ctx, chromedp.Navigate(base+"/ui/scope?s=pay.gateway"), chromedp.WaitVisible(chromedp.CSS("#policy")))
	wantText(t, ctx, "#publish-h", "Propose a change")
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#document"), `{"currency":"EUR","fraudCheck":false}`),
		chromedp.SetValue(chromedp.CSS("#reason"), "vendor outage"))
	clickAndLoad(t, ctx, `button[value="propose"]`, "#checks")
	wantText(t, ctx, "#flash", "proposed: it is checked")
	wantText(t, ctx, "#checks", "schema: passed")
	wantText(t, ctx, "#canary", "No canary window")
	wantText(t, ctx, "#diff tr.mod .r", `"fraudCheck": false`)
	// The author may not approve: the refusal is said in words.
	clickAndLoad(t, ctx, `button[value="approve"]`, "#flash")
	wantText(t, ctx, "#flash", "not allowed")
	id := get(t, ctx, chromedp.AttributeValue(chromedp.CSS(`input[name="id"]`), "value")).Value

	// Another identity approves and publishes.
	clickAndLoad(t, ctx, `.signout button`, "#token")
	signinAs(t, ctx, base, reviewerToken)
	run(t, ctx, chromedp.Navigate(base+"/ui/changes"), chromedp.WaitVisible(chromedp.CSS("#changes")))
	wantText(t, ctx, `#changes tr[data-change="`+id+`"]`, "checked")
	run(t, ctx, chromedp.Click(chromedp.CSS(`a[href="/ui/change?id=`+id+`"]`)), chromedp.WaitVisible(chromedp.CSS("#approvals")),
		chromedp.SetValue(chromedp.CSS("#note"), "ok for an hour"))
	clickAndLoad(t, ctx, `button[value="approve"]`, "#flash")
	wantText(t, ctx, "#flash", "is approved")
	wantText(t, ctx, "#approvals", "bob")
	shoot(t, ctx, "change")
	clickAndLoad(t, ctx, `button[value="publish"]`, "#flash")
	wantText(t, ctx, "#flash", "is published")
	run(t, ctx, chromedp.Navigate(base+"/ui/scope?s=pay.gateway"), chromedp.WaitVisible(chromedp.CSS("#head")))
	wantText(t, ctx, "#generation", "2")
	wantText(t, ctx, "#head", "bob")

	// A rollback under the policy is proposed as a change.
	run(t, ctx, chromedp.Click(chromedp.CSS(`a[href="/ui/rollback?s=pay.gateway&to=1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[value="propose"]`)))
	clickAndLoad(t, ctx, `button[value="propose"]`, "#checks")
	wantText(t, ctx, "#flash", "Rollback proposed as change")
}

func TestBrowserReadOnly(t *testing.T) {
	s := newStack(t)
	seed(t, s)
	ctx := newTab(t)
	signinAs(t, ctx, s.srv.URL, readerToken)
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/scope?s=shop.front.checkout"), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#publish, a[href*="/rollback"], a[href*="/deactivate"], textarea').length`)); n != 0 {
		t.Fatalf("a read-only token sees %d write controls", n)
	}
	// Keyboard: the first Tab reaches the skip link, which moves the focus
	// to the content; the next Tab goes on in document order.
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/scope?s=shop.front.checkout"), chromedp.WaitVisible(chromedp.CSS("#timeline")),
		chromedp.KeyEvent(kb.Tab))
	if f := get(t, ctx, chromedp.Evaluate[string](`document.activeElement.className + "|" + document.activeElement.getAttribute("href")`)); f != "skip|#main" {
		t.Fatalf("first Tab focuses %q, want the skip link", f)
	}
	run(t, ctx, chromedp.KeyEvent(kb.Enter), chromedp.KeyEvent(kb.Tab))
	if f := get(t, ctx, chromedp.Evaluate[bool](`document.getElementById("main").contains(document.activeElement)`)); !f {
		t.Fatal("after the skip link, Tab does not go into the content")
	}

	// The confirmation page, reached by its address, offers no form.
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/rollback?s=shop.front.checkout&to=1"), chromedp.WaitVisible(chromedp.CSS("#diff")))
	wantText(t, ctx, "#refusal", "does not allow mutate on \"shop.front.checkout\"). Sign in with a token that has that right")
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#main form').length`)); n != 0 {
		t.Fatalf("the refused rollback still offers %d forms", n)
	}
}

func TestBrowserComponents(t *testing.T) {
	s := newStack(t)
	ctx := newTab(t)
	signinAs(t, ctx, s.srv.URL, adminToken)
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/components"), chromedp.WaitVisible(chromedp.CSS("#c-shop\\.cart")))
	wantText(t, ctx, "#c-shop\\.cart .values", `"maxItems": 20`)
	// A value the schema refuses: the issue is on the field, the draft kept.
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#cfg-shop\\.cart"), "maxItems: 0\n"))
	clickAndLoad(t, ctx, "#c-shop\\.cart button", "#issues-shop\\.cart")
	wantText(t, ctx, "#issues-shop\\.cart", "/maxItems")
	if v := get(t, ctx, chromedp.Value(chromedp.CSS("#cfg-shop\\.cart"))); v != "maxItems: 0\n" {
		t.Fatalf("draft lost: %q", v)
	}
	run(t, ctx, chromedp.SetValue(chromedp.CSS("#cfg-shop\\.cart"), "maxItems: 50\n"))
	clickAndLoad(t, ctx, "#c-shop\\.cart button", "#message-shop\\.cart")
	wantText(t, ctx, "#message-shop\\.cart", "Created")
	wantText(t, ctx, "#c-shop\\.cart .values", `"maxItems": 50`)
	shoot(t, ctx, "components")

	// A read-only token sees the values and no form.
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/"))
	clickAndLoad(t, ctx, ".signout button", "#token")
	signinAs(t, ctx, s.srv.URL, readerToken)
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/components"), chromedp.WaitVisible(chromedp.CSS("h1")))
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[action="/ui/components"]').length`)); n != 0 {
		t.Fatalf("a read-only token sees %d create forms", n)
	}
}
