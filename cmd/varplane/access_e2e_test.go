package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeAccessControl: the first administrator from migrate bootstrap
// administers tokens through the CLI on a server with --access-control and
// a tokens file; the file is asked first, the store second; the access
// scope cannot be written through the var admin API; a revoked token is
// refused at once; no token reaches a log line, an error or the history.
func TestServeAccessControl(t *testing.T) {
	store := "file:" + filepath.Join(t.TempDir(), "log.jsonl")
	r := runCLI(t, nil, "", "migrate", "bootstrap", "--to", store, "--admin", "ops")
	admin := tokenRE.FindStringSubmatch(r.stdout)
	if r.code != 0 || admin == nil {
		t.Fatalf("bootstrap: %d %s %s", r.code, r.stdout, r.stderr)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": "file-reader id=ci kinds=read\n"})
	s := startServer(t, "--store", store, "--access-control", "--tokens", filepath.Join(dir, "tokens"))
	env := func(token string) []string {
		return []string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=" + token}
	}
	bearer := func(token string) []string { return []string{"Authorization", "Bearer " + token} }

	r = runCLI(t, env(admin[1]), "", "token", "create", "--id", "reader", "--kinds", "read", "--prefixes", "app.")
	reader := tokenRE.FindStringSubmatch(r.stdout)
	if r.code != 0 || reader == nil {
		t.Fatalf("token create: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, env(reader[1]), "", "token", "create", "--id", "x"); r.code != 1 || !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("token create by a reader: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, env(admin[1]), "", "token", "create"); r.code != 2 {
		t.Fatalf("token create without --id: %d", r.code)
	}
	if r := runCLI(t, env(admin[1]), "", "token", "create", "--id", "bad", "--kinds", "write"); r.code != 1 {
		t.Fatalf("token create with a bad kind: %d %s", r.code, r.stderr)
	}

	expect(t, call(t, "GET", s.Base+"?key=app.x", nil, bearer(reader[1])...), 404, "no-head")
	expect(t, call(t, "GET", s.Base+"?key=other.x", nil, bearer(reader[1])...), 403, "forbidden")
	expect(t, call(t, "GET", s.Base+"?key=other.x", nil, bearer("file-reader")...), 404, "no-head")
	expect(t, call(t, "GET", s.Base+"/admin/status?scope=app.x", nil, bearer("file-reader")...), 403, "forbidden")
	expect(t, call(t, "GET", s.Base+"?key=app.x", nil), 401, "unauthorized")
	// The administrator may do anything through the var API but write the
	// access scope, which only the access API writes.
	expect(t, call(t, "POST", s.Base+"/admin/publish", map[string]any{"scope": "app.x", "document": map[string]any{"on": true}, "expectedGeneration": 0}, bearer(admin[1])...), 200, "")
	expect(t, call(t, "POST", s.Base+"/admin/publish", map[string]any{"scope": "varplane.access", "document": map[string]any{"principals": map[string]any{}}, "expectedGeneration": 2}, bearer(admin[1])...), 403, "scope-owned")
	expect(t, call(t, "POST", s.Base+"/admin/deactivate", map[string]any{"scope": "varplane", "expectedGeneration": 0}, bearer(admin[1])...), 403, "scope-owned")

	r = runCLI(t, env(admin[1]), "", "token", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "reader") || !strings.Contains(r.stdout, "ops") || strings.Contains(r.stdout, "sha256:") {
		t.Fatalf("token list: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, env(admin[1]), "", "token", "revoke", "reader"); r.code != 0 {
		t.Fatalf("token revoke: %d %s %s", r.code, r.stdout, r.stderr)
	}
	a := call(t, "GET", s.Base+"?key=app.x", nil, bearer(reader[1])...)
	expect(t, a, 403, "forbidden")
	if r := runCLI(t, env(admin[1]), "", "token", "revoke", "reader"); r.code != 1 || !strings.Contains(r.stderr, "not-found") {
		t.Fatalf("token revoke again: %d %s", r.code, r.stderr)
	}

	hist := call(t, "GET", s.Base+"/admin/history?scope=varplane.access", nil, bearer(admin[1])...)
	expect(t, hist, 200, "")
	if !strings.Contains(string(hist.body), `"reason":"bootstrap"`) || !strings.Contains(string(hist.body), `"actor":"ops"`) {
		t.Fatalf("history: %s", hist.body)
	}
	for _, tok := range []string{admin[1], reader[1]} {
		for what, text := range map[string]string{"history": string(hist.body), "log": s.logs(), "error": string(a.body)} {
			if strings.Contains(text, tok) {
				t.Errorf("the %s holds a token", what)
			}
		}
	}
}

// TestServeAccessReplicas: two servers on one Redis; a token revoked
// through one is refused by the other.
func TestServeAccessReplicas(t *testing.T) {
	u := startRedis(t)
	r := runCLI(t, nil, "", "migrate", "bootstrap", "--to", u, "--admin", "ops")
	admin := tokenRE.FindStringSubmatch(r.stdout)
	if r.code != 0 || admin == nil {
		t.Fatalf("bootstrap: %d %s %s", r.code, r.stdout, r.stderr)
	}
	a := startServer(t, "--store", u, "--access-control", "--redis-revalidate-interval", "200ms")
	b := startServer(t, "--store", u, "--access-control", "--redis-revalidate-interval", "200ms")
	r = runCLI(t, []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=" + admin[1]}, "", "token", "create", "--id", "ci", "--kinds", "read")
	ci := tokenRE.FindStringSubmatch(r.stdout)
	if r.code != 0 || ci == nil {
		t.Fatalf("token create: %d %s %s", r.code, r.stdout, r.stderr)
	}
	auth := []string{"Authorization", "Bearer " + ci[1]}
	// A new token is accepted by B once the change reaches it.
	eventually(t, 5*time.Second, "replica B to accept the new token", func() (bool, string) {
		got := call(t, "GET", b.Base+"?key=app.x", nil, auth...)
		return got.status == 404, string(got.body)
	})
	if r := runCLI(t, []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=" + admin[1]}, "", "token", "revoke", "ci"); r.code != 0 {
		t.Fatalf("token revoke: %d %s", r.code, r.stderr)
	}
	expect(t, call(t, "GET", a.Base+"?key=app.x", nil, auth...), 403, "forbidden")
	eventually(t, 5*time.Second, "replica B to refuse the revoked token", func() (bool, string) {
		got := call(t, "GET", b.Base+"?key=app.x", nil, auth...)
		return got.status == 403, string(got.body)
	})
}

// TestServeReservesAccessScope: without --access-control the access scope
// is still reserved, so that a server started with it later never trusts
// principals written around the access API; and the access API is off.
func TestServeReservesAccessScope(t *testing.T) {
	s := startServer(t, "--store", "memory:")
	expect(t, call(t, "POST", s.Base+"/admin/publish", map[string]any{"scope": "varplane.access", "document": map[string]any{"principals": map[string]any{}}, "expectedGeneration": 0}), 403, "scope-owned")
	expect(t, call(t, "POST", s.Base+"/admin/revisions", map[string]any{"scope": "varplane.access", "document": map[string]any{"principals": map[string]any{}}}), 403, "scope-owned")
	if a := call(t, "GET", s.Base+"/access/tokens", nil); a.status != 404 {
		t.Fatalf("GET {base}/access/tokens without --access-control: %d %s", a.status, a.body)
	}
}
