package main

import (
	"path/filepath"
	"testing"
)

// reviewServer starts a server with the control API and a tokens file of
// reviewers: alice proposes, bob and carol hold the reviewer role, dave
// holds no role, ops manages policies, mutator may only mutate. It
// returns the server and a function that sends a request as a token.
func reviewServer(t *testing.T, args ...string) (*server, func(method, path, token string, body any) answer) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": "alice-token id=alice kinds=read,audit,mutate\n" +
		"bob-token id=bob roles=reviewer\ncarol-token id=carol roles=reviewer\ndave-token id=dave kinds=read,audit,mutate\n" +
		"ops-token id=ops roles=control:policies\nmutator-token id=mallory kinds=mutate\n"})
	s := startServer(t, append([]string{"--store", "memory:", "--tokens", filepath.Join(dir, "tokens")}, args...)...)
	as := func(method, path, token string, body any) answer {
		t.Helper()
		return call(t, method, s.Base+path, body, "Authorization", "Bearer "+token)
	}
	return s, as
}

// proposeAs proposes doc on scope at base as token and returns the
// change's id.
func proposeAs(t *testing.T, as func(string, string, string, any) answer, token, scope string, base int, doc any) string {
	t.Helper()
	c := expect(t, as("POST", "/control/changes", token, map[string]any{"scope": scope, "base": base, "document": doc}), 201, "")
	return str(t, c, "id")
}

// TestReviewPublishRechecksPolicy: through the real server, a change
// approved under a one-approval policy does not publish once the policy
// asks for three approvals by reviewers (409 change-state, the head stays
// where it was); with the approvals the raised policy asks for, it does.
func TestReviewPublishRechecksPolicy(t *testing.T) {
	_, as := reviewServer(t)
	expect(t, as("PUT", "/control/policies/pay", "ops-token", map[string]any{"approvals": 1}), 200, "")
	id := proposeAs(t, as, "alice-token", "pay.limits", 0, map[string]any{"max": 20})
	approved := expect(t, as("POST", "/control/changes/"+id+":approve", "dave-token", nil), 200, "")
	if str(t, approved, "state") != "approved" {
		t.Fatalf("after dave's approval: %v", approved["state"])
	}
	expect(t, as("PUT", "/control/policies/pay", "ops-token", map[string]any{"approvals": 3, "roles": []string{"reviewer"}}), 200, "")
	expect(t, as("POST", "/control/changes/"+id+":publish", "alice-token", nil), 409, "change-state")
	expect(t, as("GET", "/control/documents/pay.limits", "alice-token", nil), 404, "no-head")

	expect(t, as("POST", "/control/changes/"+id+":approve", "bob-token", nil), 200, "")
	expect(t, as("POST", "/control/changes/"+id+":approve", "carol-token", nil), 200, "")
	// dave's approval does not count under the raised policy: two of three.
	expect(t, as("POST", "/control/changes/"+id+":publish", "alice-token", nil), 409, "change-state")
	expect(t, as("PUT", "/control/policies/pay", "ops-token", map[string]any{"approvals": 2, "roles": []string{"reviewer"}}), 200, "")
	pub := expect(t, as("POST", "/control/changes/"+id+":publish", "alice-token", nil), 200, "")
	if str(t, pub, "state") != "published" {
		t.Fatalf("publish with two reviewers: %v", pub["state"])
	}
	head := expect(t, as("GET", "/control/documents/pay.limits", "alice-token", nil), 200, "")
	if num(t, head, "generation") != 1 || str(t, head, "change") != id {
		t.Fatalf("head = %v", head)
	}
}
