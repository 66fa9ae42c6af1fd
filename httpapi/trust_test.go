package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/httpapi"
)

// scopesStored lists what the plane's store holds, to check that a refused
// request changed nothing.
func (p *plane) scopesStored() []varplane.Scope {
	p.t.Helper()
	s, err := p.store.Scopes(context.Background())
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func TestCrossSiteWritesAreRefused(t *testing.T) {
	body := `{"scope":"a.b","document":{"x":1}}`
	tests := []struct {
		name   string
		header []string
		status int
	}{
		{"cross-site fetch metadata", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"same-site but other origin", []string{"Sec-Fetch-Site", "same-site"}, 403},
		{"foreign Origin", []string{"Origin", "https://evil.example"}, 403},
		{"form post", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"text/plain (a simple request)", []string{"Content-Type", "text/plain"}, 415},
		{"multipart", []string{"Content-Type", "multipart/form-data; boundary=x"}, 415},
		{"same origin", []string{"Sec-Fetch-Site", "same-origin", "Content-Type", "application/json"}, 201},
		{"curl without a Content-Type", nil, 201},
		{"Origin of the host itself", []string{"Origin", "http://example.com"}, 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlane(t, httpapi.Options{})
			rec := p.do("POST", "/vars/admin/revisions", body, tt.header...)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.status >= 400 {
				code := varplane.CodeForbidden
				if tt.status == 415 {
					code = varplane.CodeUnsupportedMediaType
				}
				wantError(t, rec, tt.status, code)
				if got := p.scopesStored(); len(got) != 0 {
					t.Fatalf("a refused write stored %v", got)
				}
			}
		})
	}
}

func TestTrustedOriginMayWrite(t *testing.T) {
	p := newPlane(t, httpapi.Options{TrustedOrigins: []string{"https://console.example"}})
	if rec := p.do("POST", "/vars/admin/revisions", `{"scope":"a.b","document":1}`, "Origin", "https://console.example", "Sec-Fetch-Site", "cross-site"); rec.Code != 201 {
		t.Fatalf("trusted origin: %d %s", rec.Code, rec.Body)
	}
	if rec := p.do("POST", "/vars/admin/revisions", `{"scope":"a.c","document":1}`, "Origin", "https://other.example"); rec.Code != 403 {
		t.Fatalf("untrusted origin: %d", rec.Code)
	}
}

// TestActorIsTheAuthenticatedIdentity: what a client writes as actor is
// kept as onBehalfOf and never replaces who the token says it is; a token
// without id= is named by its position, never by a digest of its secret.
func TestActorIsTheAuthenticatedIdentity(t *testing.T) {
	grants, err := access.ParseTokens(strings.NewReader("ops-secret id=ops\nbare-secret\n"))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := access.Scoped(grants)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, token, claimed string
		wantActor            string
		auth                 varplane.Authorizer
	}{
		{"named token, forged actor", "ops-secret", "root", "ops", auth},
		{"token without id", "bare-secret", "", "token-2", auth},
		// Without authentication the claim is the only actor there is: it is
		// recorded as the actor, marked unauthenticated (as the reference
		// records it), not replaced by "anonymous".
		{"no tokens configured", "", "mallory", "", varplane.AllowAll},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlane(t, httpapi.Options{Authorizer: tt.auth})
			hdr := []string{"Content-Type", "application/json"}
			if tt.token != "" {
				hdr = append(hdr, "Authorization", "Bearer "+tt.token)
			}
			body := `{"scope":"a.b","document":{"x":1}` + map[bool]string{true: `,"actor":"` + tt.claimed + `"`, false: ""}[tt.claimed != ""] + `}`
			rec := p.do("POST", "/vars/admin/revisions", body, hdr...)
			if rec.Code != 201 {
				t.Fatalf("create: %d %s", rec.Code, rec.Body)
			}
			var res varplane.CreateRevisionResult
			mustJSON(t, rec.Body.Bytes(), &res)
			act := p.do("POST", "/vars/admin/activate", jsonf(`{"scope":"a.b","revision":%q,"expectedGeneration":0,"actor":"someone-else"}`, res.Revision), hdr...)
			if act.Code != 200 {
				t.Fatalf("activate: %d %s", act.Code, act.Body)
			}
			hist := p.do("GET", "/vars/admin/history?scope=a.b", "", hdr[2:]...)
			var h httpapi.HistoryResponse
			mustJSON(t, hist.Body.Bytes(), &h)
			if len(h.Events) != 2 {
				t.Fatalf("history %s", hist.Body)
			}
			if tt.wantActor == "" {
				for i, want := range []string{tt.claimed, "someone-else"} {
					ev := h.Events[i]
					if ev.Actor != want || ev.OnBehalfOf != "" || !ev.Unauthenticated {
						t.Errorf("event %d: actor %q onBehalfOf %q unauthenticated %v, want the claim %q, no onBehalfOf, unauthenticated", i, ev.Actor, ev.OnBehalfOf, ev.Unauthenticated, want)
					}
				}
				return
			}
			for i, ev := range h.Events {
				if ev.Actor != tt.wantActor || ev.Unauthenticated {
					t.Errorf("event %d actor %q (unauthenticated %v), want %q", i, ev.Actor, ev.Unauthenticated, tt.wantActor)
				}
			}
			if got := h.Events[0].OnBehalfOf; got != tt.claimed {
				t.Errorf("create onBehalfOf %q, want %q", got, tt.claimed)
			}
			if got := h.Events[1].OnBehalfOf; got != "someone-else" {
				t.Errorf("activate onBehalfOf %q", got)
			}
			// No digest of the token, however short, appears anywhere.
			if tt.token != "" {
				sum := sha256.Sum256([]byte(tt.token))
				for _, n := range []int{4, 8, 16} {
					if bytes.Contains(hist.Body.Bytes(), []byte(hex.EncodeToString(sum[:n]))) {
						t.Errorf("history holds %d bytes of the token's SHA-256", n)
					}
				}
				if bytes.Contains(hist.Body.Bytes(), []byte(tt.token)) {
					t.Error("history holds the token")
				}
			}
		})
	}
}

// TestServerRefusesForeignHosts drives a real listener: a request whose Host
// names another site (DNS rebinding) is 421 and stores nothing, while the
// loopback names and an allowed name are served.
func TestServerRefusesForeignHosts(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	srv := httpapi.NewServer("127.0.0.1:0", p.h)
	srv.AllowedHosts = []string{"varplane.internal"}
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	post := func(host string) int {
		req, _ := http.NewRequest("POST", srv.URL()+"/vars/admin/revisions", strings.NewReader(`{"scope":"a.b","document":1}`))
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("rebound.attacker.example"); got != http.StatusMisdirectedRequest {
		t.Fatalf("foreign host: %d", got)
	}
	if got := p.scopesStored(); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
	for _, host := range []string{"localhost:1234", "varplane.internal", strings.TrimPrefix(srv.URL(), "http://")} {
		if got := post(host); got != 201 && got != 200 {
			t.Fatalf("host %s: %d", host, got)
		}
	}
}
