package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var uiCSRF = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// TestServeUI: serve mounts the console at /ui/ by default, over its own
// API with the signed-in token (a publish through the console is a
// generation the API serves, recorded as the token's identity), never
// logs the token, and --ui=false leaves /ui to the var API (404).
func TestServeUI(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("console-secret id=ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--store", "memory:", "--tokens", tokens)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	post := func(path string, form url.Values) *http.Response {
		t.Helper()
		resp, err := c.PostForm(s.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp, _ := get("/ui"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("/ui: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, page := get("/ui/signin")
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("sign-in page: %d %v", resp.StatusCode, resp.Header)
	}
	resp = post("/ui/signin", url.Values{"csrf": {uiCSRF.FindStringSubmatch(page)[1]}, "token": {"console-secret"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	_, page = get("/ui/scope?s=app.x")
	resp = post("/ui/publish", url.Values{"csrf": {uiCSRF.FindStringSubmatch(page)[1]}, "s": {"app.x"},
		"document": {"limit: 5\n"}, "expected": {"0"}, "action": {"publish"}, "reason": {"from the console"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	m := expect(t, call(t, "GET", s.Base+"/admin/history?scope=app.x", nil, "Authorization", "Bearer console-secret"), 200, "")
	hist, _ := m["events"].([]any)
	last, _ := hist[len(hist)-1].(map[string]any)
	if last["kind"] != "activated" || last["actor"] != "ops" || last["reason"] != "from the console" {
		t.Fatalf("history after the console's publish: %v", hist)
	}
	if strings.Contains(s.logs(), "console-secret") {
		t.Fatal("the log holds the token")
	}

	off := startServer(t, "--store", "memory:", "--ui=false")
	resp, err := http.Get(off.URL + "/ui/signin")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("--ui=false: /ui/signin is %d", resp.StatusCode)
	}
}

// TestServeConfigurationPage: with the console on, the values service's
// page /.configuration sends a browser (any method: nothing is created
// there) to the console's Components page; with --ui=false the service's
// own page is served there (HTTP Basic, no sessions), and the values
// routes answer the same either way.
func TestServeConfigurationPage(t *testing.T) {
	deployment, _ := deployFixture(t)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, target string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, target, strings.NewReader("component=dummies.dummy&configuration=foo%3A+x"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	on := startServer(t, "--store", "memory:", "--components", deployment)
	before := call(t, "GET", on.URL+"/configuration/values/dummies.dummy/", nil)
	for _, m := range []string{"GET", "HEAD", "POST"} {
		if resp := do(m, on.URL+"/.configuration"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/components" {
			t.Errorf("%s /.configuration with the console on: %d %q, want 303 to /ui/components", m, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// The POST created nothing.
	if after := call(t, "GET", on.URL+"/configuration/values/dummies.dummy/", nil); after.status != 200 || string(after.body) != string(before.body) {
		t.Fatalf("a POST to the redirect changed the configuration: %s, then %s", before.body, after.body)
	}
	if resp := do("GET", on.URL+"/ui/components"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/signin") {
		t.Fatalf("the console's Components page: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	off := startServer(t, "--store", "memory:", "--components", deployment, "--ui=false")
	page := call(t, "GET", off.URL+"/.configuration", nil)
	if page.status != 200 || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") || !strings.Contains(string(page.body), "dummies.dummy") {
		t.Fatalf("--ui=false: /.configuration = %d %s", page.status, page.header.Get("Content-Type"))
	}
	expect(t, call(t, "GET", off.URL+"/configuration/values/dummies.dummy/", nil), 200, "")
}

// TestServeUISessionFlags: --ui-max-sessions and
// --ui-max-sessions-per-identity bound the console's session table
// through the real server (an identity at its cap ends its own oldest
// session; a table full of other identities' sessions refuses a sign-in
// 503 too-many-subscribers, limit max-sessions), and a value that is not
// positive is a usage error before anything is opened.
func TestServeUISessionFlags(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ta id=a\ntb id=b\ntc id=c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--store", "memory:", "--tokens", tokens, "--ui-max-sessions", "2", "--ui-max-sessions-per-identity", "1")
	signIn := func(token string) (*http.Client, *http.Response) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(s.URL + "/ui/signin")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp, err = c.PostForm(s.URL+"/ui/signin", url.Values{"csrf": {uiCSRF.FindStringSubmatch(string(page))[1]}, "token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return c, resp
	}
	signedIn := func(c *http.Client) bool {
		t.Helper()
		resp, err := c.Get(s.URL + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	a1, resp := signIn("ta")
	if resp.StatusCode != http.StatusSeeOther || !signedIn(a1) {
		t.Fatalf("first sign-in of a: %d", resp.StatusCode)
	}
	a2, _ := signIn("ta")
	if !signedIn(a2) || signedIn(a1) {
		t.Fatal("a's second sign-in did not end its first session at --ui-max-sessions-per-identity 1")
	}
	b, _ := signIn("tb")
	if !signedIn(b) || !signedIn(a2) {
		t.Fatal("b's sign-in into a table with room ended a session or failed")
	}
	_, resp = signIn("tc")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("c's sign-in into a full table: %d, want 503", resp.StatusCode)
	}
	if !signedIn(a2) || !signedIn(b) {
		t.Fatal("a refused sign-in ended another identity's session")
	}

	for _, args := range [][]string{
		{"--ui-max-sessions", "0"},
		{"--ui-max-sessions-per-identity", "-1"},
		{"--ui-session-ttl", "0s"},
	} {
		r := runCLI(t, nil, "", append([]string{"serve", "--store", "memory:", "--addr", "127.0.0.1:0"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--ui-max-sessions, --ui-max-sessions-per-identity and --ui-session-ttl must be positive") {
			t.Fatalf("serve %v: exit %d, %s", args, r.code, r.stderr)
		}
	}
}
