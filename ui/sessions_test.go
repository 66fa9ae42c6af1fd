package ui

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

// accessStack is a console over a server whose tokens are principals held
// in the store (serve --access-control): revoking one is a commit, which
// the hub rechecks every stream on, as serve wires it.
type accessStack struct {
	engine *varplane.Engine
	svc    *access.Service
	hub    *push.Hub
	srv    *httptest.Server
}

func newAccessStack(t *testing.T, opts Options) *accessStack {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memory.New()
	engine := varplane.NewEngine(st, varplane.Options{Logger: log, Owners: []varplane.Owner{access.Owner}})
	hub := push.New(engine, push.Options{Logger: log, RecheckInterval: -1, RecheckOn: func(s varplane.Scope) bool { return s == access.Scope }})
	authz := access.Combine(nil, access.NewAuthorizer(st))
	api := httpapi.NewHandler(engine, httpapi.Options{Base: "/vars", Authorizer: authz, Logger: log, Hub: hub})
	opts.API, opts.Base, opts.Authorizer, opts.Logger = api, "/vars", authz, log
	api.Mount("/ui/", New(opts))
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		hub.Close()
		srv.Close()
		api.Close()
		engine.Close()
		_ = st.Close()
	})
	return &accessStack{engine: engine, svc: access.NewService(engine), hub: hub, srv: srv}
}

// principal creates a read-only principal and returns its token.
func (s *accessStack) principal(t *testing.T, id string) string {
	t.Helper()
	c, err := s.svc.Create(context.Background(), id, access.Binding{Kinds: []varplane.Kind{varplane.KindRead, varplane.KindAudit}}, access.Root("setup"), "")
	if err != nil {
		t.Fatal(err)
	}
	return c.Token
}

// signedIn reports whether b's session still opens the scopes page.
func signedIn(b *browser) bool {
	resp, _ := b.do("GET", "/ui/", nil)
	return resp.StatusCode == http.StatusOK
}

// One identity signing in far more often than the table holds (the attack:
// 1,030 sign-ins by a read-only token) ends only its own sessions: another
// identity's session stays valid, the table stays bounded, and the
// attacker's newest session works.
func TestSigninFloodLeavesOtherIdentitiesSignedIn(t *testing.T) {
	s := newAccessStack(t, Options{MaxSessions: 64, MaxSessionsPerIdentity: 4})
	mallory, bea := s.principal(t, "mallory"), s.principal(t, "bea")
	victim := newBrowser(t, &stack{srv: s.srv})
	victim.signin(bea)
	attacker := newBrowser(t, &stack{srv: s.srv})
	csrf := attacker.csrf("/ui/signin")
	for i := range 1030 {
		resp, _ := attacker.do("POST", "/ui/signin", url.Values{"csrf": {csrf}, "token": {mallory}, "next": {"/ui/"}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-in %d: %d", i, resp.StatusCode)
		}
		csrf = attacker.csrf("/ui/signin") // the sign-in cookie is single-use
	}
	if !signedIn(victim) {
		t.Fatal("another identity's sign-ins ended the victim's session")
	}
	if !signedIn(attacker) {
		t.Error("the attacker's newest session does not work")
	}
}

// A full table of other identities' sessions refuses a sign-in with the
// stable code (503 too-many-subscribers) instead of signing anyone out,
// and a revoked principal's session frees its slot.
func TestSigninToAFullTableIsRefused(t *testing.T) {
	s := newAccessStack(t, Options{MaxSessions: 2, MaxSessionsPerIdentity: 2})
	a, b, c := s.principal(t, "a"), s.principal(t, "b"), s.principal(t, "c")
	ba, bb, bc := newBrowser(t, &stack{srv: s.srv}), newBrowser(t, &stack{srv: s.srv}), newBrowser(t, &stack{srv: s.srv})
	ba.signin(a)
	bb.signin(b)
	resp, page := bc.do("POST", "/ui/signin", url.Values{"csrf": {bc.csrf("/ui/signin")}, "token": {c}, "next": {"/ui/"}})
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(page, string(varplane.CodeTooManyRequests)) {
		t.Fatalf("sign-in to a full table: %d\n%s", resp.StatusCode, page)
	}
	if !signedIn(ba) || !signedIn(bb) {
		t.Fatal("a refused sign-in ended a session")
	}
	if _, err := s.svc.Revoke(context.Background(), "a", access.Root("setup"), ""); err != nil {
		t.Fatal(err)
	}
	bc.signin(c) // the revoked principal's slot is swept
	if !signedIn(bc) || !signedIn(bb) {
		t.Fatal("after a revocation: no room for c, or b signed out")
	}
}

// Revoking a principal ends its console session and its live stream: the
// stream is sent a close event ("revoked") as soon as the revocation is
// committed, and the session's next request goes to the sign-in page.
func TestRevokedTokenEndsSessionAndLiveStream(t *testing.T) {
	s := newAccessStack(t, Options{})
	tok := s.principal(t, "rita")
	b := newBrowser(t, &stack{srv: s.srv})
	b.signin(tok)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL+"/ui/live", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("live: %d", resp.StatusCode)
	}
	waitSubs := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); s.hub.Stats().Subscribers != n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d subscribers, want %d", s.hub.Stats().Subscribers, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitSubs(1)
	if _, err := s.svc.Revoke(context.Background(), "rita", access.Root("setup"), ""); err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		events = append(events, sc.Text())
	}
	got := strings.Join(events, "\n")
	if !strings.Contains(got, "event: close") || !strings.Contains(got, `"reason":"revoked"`) {
		t.Fatalf("the live stream ended without a revoked close event (err %v):\n%s", sc.Err(), got)
	}
	waitSubs(0)
	r, _ := b.do("GET", "/ui/", nil)
	if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/ui/signin") {
		t.Fatalf("the revoked token's session still opens pages: %d %s", r.StatusCode, r.Header.Get("Location"))
	}
}
