package ui

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// browser is an HTTP client with cookies that does not follow redirects.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
}

func newBrowser(t *testing.T, s *stack) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: s.srv.URL, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

// csrf returns the CSRF token of the page at path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	_, page := b.do("GET", path, nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no csrf token on %s:\n%s", path, page)
	}
	return m[1]
}

func (b *browser) signin(token string) {
	b.t.Helper()
	resp, _ := b.do("POST", "/ui/signin", url.Values{"csrf": {b.csrf("/ui/signin")}, "token": {token}, "next": {"/ui/"}})
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("sign-in: %d", resp.StatusCode)
	}
}

func TestSigninCookieAndCSP(t *testing.T) {
	s := newStack(t)
	b := newBrowser(t, s)
	resp, _ := b.do("GET", "/ui/", nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/signin") {
		t.Fatalf("unsigned GET: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = b.do("GET", "/ui/signin", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP allows inline: %q", csp)
	}
	// Without the sign-in form's token (a login CSRF), refused.
	jar, _ := cookiejar.New(nil)
	b2 := &browser{t: t, base: b.base, c: &http.Client{Jar: jar, CheckRedirect: b.c.CheckRedirect}}
	if resp, _ := b2.do("POST", "/ui/signin", url.Values{"token": {adminToken}, "csrf": {"00"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in without the form token: %d", resp.StatusCode)
	}
	// A wrong token is 401 and never echoed.
	resp, page := b.do("POST", "/ui/signin", url.Values{"csrf": {b.csrf("/ui/signin")}, "token": {"wrong-token-value"}})
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(page, "wrong-token-value") || !strings.Contains(page, "was not accepted") {
		t.Errorf("wrong token: %d %q", resp.StatusCode, page)
	}
	resp, _ = b.do("POST", "/ui/signin", url.Values{"csrf": {b.csrf("/ui/signin")}, "token": {adminToken}, "next": {"//evil.example/"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("sign-in: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var sc *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName && c.Value != "" {
			sc = c
		}
	}
	if sc == nil || !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.Path != "/ui" || sc.Secure {
		t.Fatalf("session cookie: %+v", sc)
	}
	if strings.Contains(sc.Value, adminToken) {
		t.Fatal("the cookie carries the token")
	}
	s.publish(t, "app.x", `{"a":1}`, "")
	for _, p := range []string{"/ui/", "/ui/scope?s=app.x", "/ui/changes"} {
		resp, page := b.do("GET", p, nil)
		if resp.StatusCode != http.StatusOK || strings.Contains(page, adminToken) {
			t.Errorf("GET %s: %d (or the page holds the token)", p, resp.StatusCode)
		}
		if !strings.Contains(page, `id="who">alice<`) {
			t.Errorf("GET %s does not say who is signed in", p)
		}
	}
	// Signing out ends the session on the server.
	b.do("POST", "/ui/signout", url.Values{"csrf": {b.csrf("/ui/")}})
	if resp, _ := b.do("GET", "/ui/", nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after sign-out: %d", resp.StatusCode)
	}
}

func TestCSRF(t *testing.T) {
	s := newStack(t)
	gen := s.publish(t, "app.x", `{"a":1}`, "")
	b := newBrowser(t, s)
	b.signin(adminToken)
	good := b.csrf("/ui/scope?s=app.x")
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "s": {"app.x"}, "document": {`{"a":2}`}, "expected": {"1"}, "action": {"publish"}}
	}
	for _, tc := range []struct {
		name string
		csrf string
		hdr  []string
		want int
	}{
		{"no token", "", nil, http.StatusForbidden},
		{"wrong token", strings.Repeat("0", 64), nil, http.StatusForbidden},
		{"cross-site", good, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"other origin", good, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
	} {
		resp, _ := b.do("POST", "/ui/publish", form(tc.csrf), tc.hdr...)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	if st, _ := s.engine.Status(context.Background(), "app.x"); st.Generation != gen {
		t.Fatalf("a refused form wrote: generation %d", st.Generation)
	}
	resp, _ := b.do("POST", "/ui/publish", form(good))
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("good form: %d", resp.StatusCode)
	}
	if st, _ := s.engine.Status(context.Background(), "app.x"); st.Generation != gen+1 {
		t.Fatalf("generation %d after publish", st.Generation)
	}
	// Post/redirect/get: the result is on the page redirected to, once.
	_, page := b.do("GET", resp.Header.Get("Location"), nil)
	if !strings.Contains(page, "Published generation 2.") {
		t.Errorf("no result on the page:\n%s", page)
	}
	if _, page := b.do("GET", resp.Header.Get("Location"), nil); strings.Contains(page, "Published generation 2.") {
		t.Error("the result shows twice")
	}
}

func TestReadOnlyTokenCannotWrite(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"a":1}`, "")
	s.publish(t, "app.x", `{"a":2}`, "")
	b := newBrowser(t, s)
	b.signin(readerToken)
	_, page := b.do("GET", "/ui/scope?s=app.x", nil)
	for _, control := range []string{`action="/ui/publish"`, `/ui/rollback?`, `/ui/deactivate?`} {
		if strings.Contains(page, control) {
			t.Errorf("a read-only token sees %s", control)
		}
	}
	csrf := csrfRE.FindStringSubmatch(page)[1] // the sign-out form's
	for _, f := range []struct {
		path string
		form url.Values
	}{
		{"/ui/publish", url.Values{"s": {"app.x"}, "document": {`{"a":9}`}, "expected": {"2"}, "action": {"publish"}}},
		{"/ui/rollback", url.Values{"s": {"app.x"}, "to": {"1"}, "expected": {"2"}}},
		{"/ui/deactivate", url.Values{"s": {"app.x"}, "expected": {"2"}}},
	} {
		f.form.Set("csrf", csrf)
		resp, _ := b.do("POST", f.path, f.form)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: %d", f.path, resp.StatusCode)
		}
		_, page := b.do("GET", resp.Header.Get("Location"), nil)
		if !strings.Contains(page, "Your token is not allowed to do this") {
			t.Errorf("%s: the refusal is not shown in words:\n%s", f.path, page)
		}
	}
	if st, _ := s.engine.Status(context.Background(), "app.x"); st.Generation != 2 || !st.Active {
		t.Fatalf("a forged form wrote: %+v", st)
	}
}

func TestSentenceEveryCode(t *testing.T) {
	codes := []varplane.Code{varplane.CodeBadRequest, varplane.CodeNoHead, varplane.CodeNotFound, varplane.CodeRevisionInvalid,
		varplane.CodeRevisionConflict, varplane.CodePayloadTooLarge, varplane.CodeStoreUnsupported, varplane.CodeStoreUnavailable,
		varplane.CodeForbidden, varplane.CodeUnauthorized, varplane.CodeIdempotencyReused, varplane.CodeTooManyRequests,
		varplane.CodeLimitExceeded, varplane.CodeScopeOwned, varplane.CodeChangeRequired, varplane.CodeChangeState,
		varplane.CodeRevisionReclaimed, varplane.CodeUnknownComponent, varplane.CodeInvalidConfiguration, varplane.CodeConfirmationRequired}
	seen := map[string]varplane.Code{}
	for _, c := range codes {
		s := Sentence(&varplane.Error{Code: c, Message: "m"})
		if strings.HasPrefix(s, "The server refused") {
			t.Errorf("%s has no sentence of its own", c)
		}
		if o, dup := seen[s]; dup {
			t.Errorf("%s and %s say the same", c, o)
		}
		seen[s] = c
	}
	if s := Sentence(varplane.ConflictError("a", 1, 3)); !strings.Contains(s, "generation 3, not 1") {
		t.Errorf("conflict: %q", s)
	}
	if s := Sentence(errors.New("secret detail")); strings.Contains(s, "secret") {
		t.Errorf("internal: %q", s)
	}
}

func TestSessionsBoundedAndExpire(t *testing.T) {
	ss := newSessions(2, 1, time.Hour)
	now := time.Unix(1000, 0)
	ss.now = func() time.Time { return now }
	create := func(token, who string) *session {
		t.Helper()
		s, err := ss.create(token, who)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := create("t1", "a")
	now = now.Add(time.Second)
	b := create("t2", "b")
	now = now.Add(time.Second)
	// Full of other identities' sessions: refused, and nobody signed out.
	_, err := ss.create("t3", "c")
	var verr *varplane.Error
	if !errors.As(err, &verr) || verr.Code != varplane.CodeTooManyRequests || verr.Limit != LimitSessions {
		t.Fatalf("sign-in to a full table = %v, want too-many-subscribers max-sessions", err)
	}
	// An identity at the cap ends its own oldest session.
	b2 := create("t2", "b")
	if ss.len() != 2 || ss.get(a.id) == nil || ss.get(b.id) != nil || ss.get(b2.id) == nil {
		t.Fatalf("bounded table: %d sessions", ss.len())
	}
	now = now.Add(time.Hour - time.Second)
	if ss.get(a.id) != nil {
		t.Fatal("an expired session is live")
	}
	if ss.get(b2.id) == nil {
		t.Fatal("a live session is gone")
	}
	c := create("t3", "c") // the expired one's slot
	if ss.get(c.id) == nil {
		t.Fatal("no session after a slot was freed")
	}
}

func TestSideBySide(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		kinds string
	}{
		{"x\ny\nz", "x\ny\nz", "same same same"},
		{"x\ny\nz", "x\nY\nz", "same mod same"},
		{"x\nz", "x\ny\nz", "same add same"},
		{"x\ny\nz", "x\nz", "same del same"},
		{"", "a", "add"},
	} {
		d := sideBySideOf(tc.a, tc.b)
		var kinds []string
		for _, r := range d.Rows {
			kinds = append(kinds, r.Kind)
		}
		if got := strings.Join(kinds, " "); got != tc.kinds {
			t.Errorf("%q → %q: %s, want %s", tc.a, tc.b, got, tc.kinds)
		}
	}
}

func TestComponentsReadOnlyForgedCreate(t *testing.T) {
	s := newStack(t)
	b := newBrowser(t, s)
	b.signin(readerToken)
	resp, page := b.do("GET", "/ui/components", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `maxItems&#34;: 20`) || strings.Contains(page, `action="/ui/components"`) {
		t.Fatalf("components page for a read-only token: %d\n%s", resp.StatusCode, page)
	}
	csrf := csrfRE.FindStringSubmatch(page)[1]
	resp, _ = b.do("POST", "/ui/components", url.Values{"csrf": {csrf}, "component": {"shop.cart"}, "configuration": {"maxItems: 9"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("forged create: %d", resp.StatusCode)
	}
	if _, page := b.do("GET", "/ui/components", nil); !strings.Contains(page, "Your token is not allowed to do this") || strings.Contains(page, `maxItems&#34;: 9`) {
		t.Fatalf("forged create not refused in words:\n%s", page)
	}
}

func TestCookieSecureOverTLS(t *testing.T) {
	h := New(Options{API: http.NotFoundHandler()})
	r := httptest.NewRequest("GET", "https://console.example/ui/", nil)
	if c := h.cookie(r, cookieName, "x", 60); !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("over TLS: %+v", c)
	}
	r = httptest.NewRequest("GET", "http://127.0.0.1/ui/", nil)
	if c := h.cookie(r, cookieName, "x", 60); c.Secure {
		t.Fatalf("over plain HTTP: %+v", c)
	}
}

func TestEveryAnswerHasThePolicy(t *testing.T) {
	s := newStack(t)
	b := newBrowser(t, s)
	// Without a session: a write is refused, nothing is written, and the
	// error page, the static files and unknown paths carry the policy.
	resp, page := b.do("POST", "/ui/publish", url.Values{"s": {"app.x"}, "document": {"{}"}, "expected": {"0"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "sign in") {
		t.Errorf("POST without a session: %d", resp.StatusCode)
	}
	if st, _ := s.engine.Status(context.Background(), "app.x"); st.Generation != 0 {
		t.Fatal("a POST without a session wrote")
	}
	for _, p := range []string{"/ui/static/app.js", "/ui/static/app.css", "/ui/nowhere", "/ui/signin"} {
		resp, body := b.do("GET", p, nil)
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %v", p, resp.Header)
		}
		if strings.HasSuffix(p, ".js") && (resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") || !strings.Contains(body, "EventSource")) {
			t.Errorf("app.js: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	// No page holds an inline script or style: the policy would refuse them.
	b.signin(adminToken)
	s.publish(t, "app.x", `{"a":1}`, "")
	for _, p := range []string{"/ui/", "/ui/scope?s=app.x", "/ui/changes", "/ui/components", "/ui/deactivate?s=app.x"} {
		_, page := b.do("GET", p, nil)
		if strings.Contains(page, "<script>") || strings.Contains(page, "<style") || strings.Contains(page, " style=") || strings.Contains(page, " onclick") {
			t.Errorf("%s has inline script or style", p)
		}
	}
}

// TestChangeConflictShown: publishing a change whose base moved says so
// at the top of the change page (the change is now conflicted).
func TestChangeConflictShown(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	s.publish(t, "app.x", `{"a":1}`, "")
	if _, err := s.svc.PutPolicy(ctx, varplane.Identity{ID: "setup", Roles: []string{"*"}}, control.Policy{Scope: "app", Approvals: 1}); err != nil {
		t.Fatal(err)
	}
	alice, bob := varplane.Identity{ID: "alice", Roles: []string{"*"}}, varplane.Identity{ID: "bob", Roles: []string{"*"}}
	var ids []string
	for _, doc := range []string{`{"a":2}`, `{"a":3}`} {
		c, err := s.svc.Propose(ctx, alice, control.ProposeRequest{Scope: "app.x", Base: 1, Document: []byte(doc)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.svc.Approve(ctx, bob, c.ID, ""); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	if _, err := s.svc.Publish(ctx, bob, ids[0]); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, s)
	b.signin(reviewerToken)
	resp, _ := b.do("POST", "/ui/change", url.Values{"csrf": {b.csrf("/ui/change?id=" + ids[1])}, "id": {ids[1]}, "action": {"publish"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	_, page := b.do("GET", resp.Header.Get("Location"), nil)
	if !strings.Contains(page, `id="flash"`) || !strings.Contains(page, "Someone changed this scope first: it is at generation 2, not 1.") {
		t.Fatalf("the conflict is not said:\n%s", page)
	}
	if st, _ := s.engine.Status(ctx, "app.x"); st.Generation != 2 {
		t.Fatalf("generation %d", st.Generation)
	}
}
