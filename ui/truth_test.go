package ui

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// TestConfirmationsTellTheTruth: the rollback and deactivate confirmations
// ask the server's dry run of the write their form sends, and offer no
// button that would meet a refusal: a cascade over a scope under a review
// policy (the repro: the page offered the refused button), an
// owned scope, a token without mutate; the refusal is said, naming the
// scope it concerns, the missing right and what to do. A rollback under a
// policy offers to propose it; a write that would pass keeps its button.
func TestConfirmationsTellTheTruth(t *testing.T) {
	s := newStack(t)
	for _, sc := range []string{"app.a", "app.b", "app.a", "app.b"} {
		s.publish(t, sc, `{"n":1}`, "")
		s.publish(t, sc, `{"n":2}`, "")
	}
	if _, err := s.svc.PutPolicy(context.Background(), varplane.Identity{ID: "setup", Roles: []string{"*"}}, control.Policy{Scope: "app.b", Approvals: 1}); err != nil {
		t.Fatal(err)
	}
	admin, reader := newBrowser(t, s), newBrowser(t, s)
	admin.signin(adminToken)
	reader.signin(readerToken)
	for _, tc := range []struct {
		name    string
		b       *browser
		path    string
		refusal string // "" when the write's button is offered
		button  string
	}{
		{"the issue's repro", admin, "/ui/deactivate?s=app", "app.b, below app, is under a review policy", ""},
		{"a deactivation that passes", admin, "/ui/deactivate?s=app.a", "", `class="primary danger"`},
		{"an owned scope", admin, "/ui/deactivate?s=varplane-control", "belongs to a subsystem", ""},
		{"a token without mutate", reader, "/ui/deactivate?s=app.a", "(the token does not allow mutate on &#34;app.a&#34;). Sign in with a token that has that right", ""},
		{"a rollback that passes", admin, "/ui/rollback?s=app.a&to=1", "", `value="rollback"`},
		{"a rollback under a policy is proposed", admin, "/ui/rollback?s=app.b&to=1", "", `value="propose"`},
		{"a rollback without mutate", reader, "/ui/rollback?s=app.a&to=1", "does not allow mutate", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, page := tc.b.do("GET", tc.path, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d\n%s", tc.path, resp.StatusCode, page)
			}
			if tc.refusal == "" {
				if strings.Contains(page, `id="refusal"`) || !strings.Contains(page, tc.button) {
					t.Fatalf("%s: want the button %s and no refusal:\n%s", tc.path, tc.button, page)
				}
				return
			}
			if !strings.Contains(page, `id="refusal"`) || !strings.Contains(page, tc.refusal) {
				t.Fatalf("%s: want the refusal %q:\n%s", tc.path, tc.refusal, page)
			}
			if strings.Contains(page, `method="post" action="/ui/deactivate"`) || strings.Contains(page, `method="post" action="/ui/rollback"`) {
				t.Fatalf("%s: a refused write still has its form:\n%s", tc.path, page)
			}
		})
	}
	// Asking changed nothing.
	for _, sc := range []varplane.Scope{"app.a", "app.b"} {
		if st, _ := s.engine.Status(context.Background(), sc); st.Generation != 4 || !st.Active {
			t.Errorf("%s after the confirmations: %+v", sc, st)
		}
	}
}

// TestReadOnlySessionSeesItsScopes: a console session whose token may
// only read the scopes under shop lists exactly those (it saw "0 of 0
// scopes" when the list needed audit), without who changed them last; its
// live stream follows them instead of being refused the whole tree; a
// scope's page shows it the head a read answers, and says why there is no
// history.
func TestReadOnlySessionSeesItsScopes(t *testing.T) {
	s := newStack(t)
	seed(t, s)
	b := newBrowser(t, s)
	b.signin(narrowToken)
	_, page := b.do("GET", "/ui/", nil)
	if !strings.Contains(page, "3 of 3 scopes") || strings.Contains(page, "pay.gateway") {
		t.Fatalf("the narrowed reader's scopes page:\n%s", page)
	}
	for _, sc := range []string{"shop.front", "shop.front.checkout", "shop.front.search"} {
		if !strings.Contains(page, `data-scope="`+sc+`"`) {
			t.Errorf("%s is not listed", sc)
		}
	}
	if strings.Contains(page, "setup") {
		t.Errorf("a reader sees who changed the scopes (audit):\n%s", page)
	}
	// A scope it may read: the head as a read answers it, and why there is
	// no history; one it may not: refused, naming the right.
	resp, page := b.do("GET", "/ui/scope?s=shop.front.checkout", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="read-only"`) || !strings.Contains(page, "need audit on it") ||
		!strings.Contains(page, `&#34;retries&#34;: 3`) || strings.Contains(page, "setup") || strings.Contains(page, `id="timeline"`) {
		t.Fatalf("a readable scope's page for the narrowed reader: %d\n%s", resp.StatusCode, page)
	}
	if resp, page := b.do("GET", "/ui/scope?s=pay.gateway", nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "does not allow audit") {
		t.Fatalf("an unreadable scope's page: %d\n%s", resp.StatusCode, page)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+"/ui/live", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("the narrowed reader's live stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestBrowserReadOnlyNarrowed: in a browser, the narrowed reader's scopes
// page counts its scopes and announces a new generation of one of them.
func TestBrowserReadOnlyNarrowed(t *testing.T) {
	s, ctx := scopesPageAs(t, narrowToken, "3 of 3 scopes")
	s.publish(t, "shop.front.search", `{"engine":"v3"}`, "")
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#scopes tr[data-scope="shop.front.search"]`)))
	wantText(t, ctx, "#live", "Generation 2 of shop.front.search is live")
}

// TestTimelineMarksRollbacks: the scope page's timeline marks a rollback's
// activation (with a reason of its own) as the rollback of the generation
// it undid, and no other.
func TestTimelineMarksRollbacks(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"n":1}`, "")
	s.publish(t, "app.x", `{"n":2}`, "")
	if _, err := s.engine.Rollback(context.Background(), varplane.RollbackRequest{Scope: "app.x", ExpectedGeneration: 2, Actor: "setup", Reason: "bad deploy"}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, s)
	b.signin(adminToken)
	_, page := b.do("GET", "/ui/scope?s=app.x", nil)
	if strings.Count(page, `class="rollback"`) != 1 || !strings.Contains(page, `<span class="rollback">rollback of #2</span>`) {
		t.Fatalf("the timeline:\n%s", page)
	}
}

// TestBrowserInternalScopesStayOut: the project's own records (a review
// policy written while the scopes page is open, the change records) are
// not counted among the user's scopes and make no live banner; a user's
// commit does.
func TestBrowserInternalScopesStayOut(t *testing.T) {
	s, ctx := scopesPageAs(t, adminToken, "4 of 4 scopes")
	if _, err := s.svc.PutPolicy(context.Background(), varplane.Identity{ID: "setup", Roles: []string{"*"}}, control.Policy{Scope: "pay", Approvals: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if live := get(t, ctx, chromedp.Evaluate[string](`document.getElementById("live").textContent`)); live != "" {
		t.Fatalf("a policy's record made the banner %q", live)
	}
	s.publish(t, "shop.front.search", `{"engine":"v3"}`, "")
	wantText(t, ctx, "#live", "Generation 2 of shop.front.search is live")
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#scopes")))
	wantText(t, ctx, "#scopes caption", "4 of 4 scopes")
}

// scopesPageAs opens the seeded stack's scopes page in a browser signed in
// with token, checks its count and waits for its live stream to open.
func scopesPageAs(t *testing.T, token, count string) (*stack, context.Context) {
	s := newStack(t)
	seed(t, s)
	ctx := newTab(t)
	signinAs(t, ctx, s.srv.URL, token)
	wantText(t, ctx, "#scopes caption", count)
	time.Sleep(300 * time.Millisecond)
	return s, ctx
}
