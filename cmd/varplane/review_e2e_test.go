package main

import (
	"fmt"
	"path/filepath"
	"strings"
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

// TestReviewRevealsOnlyAudited: through the real server, a token that may
// only mutate cannot read a past body through rollback-as-change (403,
// no change recorded), and a publish whose reason claims another change
// ("change <id>") does not make the head show that change's approvers.
func TestReviewRevealsOnlyAudited(t *testing.T) {
	_, as := reviewServer(t)
	for gen, doc := range []string{"first-secret-ish", "second"} {
		expect(t, as("POST", "/admin/publish", "alice-token", map[string]any{"scope": "app.flags", "document": map[string]any{"v": doc}, "expectedGeneration": gen}), 200, "")
	}
	refused := as("POST", "/control/documents/app.flags:rollback", "mutator-token", map[string]any{"revision": 1})
	expect(t, refused, 403, "forbidden")
	if strings.Contains(string(refused.body), "first-secret-ish") {
		t.Fatalf("the refusal shows the past body: %s", refused.body)
	}
	list := expect(t, as("GET", "/control/changes?scope=app.flags", "alice-token", nil), 200, "")
	if changes, _ := list["changes"].([]any); len(changes) != 0 {
		t.Fatalf("the refused rollback recorded a change: %v", changes)
	}
	rb := expect(t, as("POST", "/control/documents/app.flags:rollback", "alice-token", map[string]any{"revision": 1}), 201, "")
	if !strings.Contains(fmt.Sprint(rb["document"]), "first-secret-ish") {
		t.Fatalf("the auditor's rollback change: %v", rb)
	}

	// A change published under a policy, with two approvers.
	expect(t, as("PUT", "/control/policies/pay", "ops-token", map[string]any{"approvals": 2, "roles": []string{"reviewer"}}), 200, "")
	id := proposeAs(t, as, "alice-token", "pay.limits", 0, map[string]any{"max": 20})
	expect(t, as("POST", "/control/changes/"+id+":approve", "bob-token", nil), 200, "")
	expect(t, as("POST", "/control/changes/"+id+":approve", "carol-token", nil), 200, "")
	expect(t, as("POST", "/control/changes/"+id+":publish", "alice-token", nil), 200, "")
	head := expect(t, as("GET", "/control/documents/pay.limits", "alice-token", nil), 200, "")
	if str(t, head, "change") != id || fmt.Sprint(head["approvedBy"]) != "[bob carol]" {
		t.Fatalf("the change's own head: %v", head)
	}
	// Another scope published directly with a reason naming that change.
	expect(t, as("POST", "/admin/publish", "alice-token", map[string]any{"scope": "app.forged", "document": map[string]any{"v": 1}, "expectedGeneration": 0, "reason": "change " + id}), 200, "")
	forged := expect(t, as("GET", "/control/documents/app.forged", "alice-token", nil), 200, "")
	if forged["change"] != nil || fmt.Sprint(forged["approvedBy"]) != "[]" {
		t.Fatalf("a forged reason made the head show %v approved by %v", forged["change"], forged["approvedBy"])
	}
}

// TestReviewReservedScopes: through the real server with access control, a
// review policy cannot lock administrators out of the access scope: one on
// the scope itself is refused (400), one on its parent group is accepted
// and guards the group's other scopes, and tokens are still created and
// revoked.
func TestReviewReservedScopes(t *testing.T) {
	dir := t.TempDir()
	store := "file:" + filepath.Join(dir, "log.jsonl")
	boot := runCLI(t, nil, "", "migrate", "bootstrap", "--to", store, "--admin", "ops")
	admin := tokenRE.FindStringSubmatch(boot.stdout)
	if boot.code != 0 || admin == nil {
		t.Fatalf("migrate bootstrap: %+v", boot)
	}
	writeFiles(t, dir, map[string]string{"tokens": "policy-token id=polly roles=control:policies\n"})
	s := startServer(t, "--access-control", "--store", store, "--tokens", filepath.Join(dir, "tokens"))
	env := []string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=" + admin[1]}
	pol := []string{"Authorization", "Bearer policy-token"}

	expect(t, call(t, "PUT", s.Base+"/control/policies/varplane.access", map[string]any{"approvals": 1}, pol...), 400, "bad-request")
	expect(t, call(t, "PUT", s.Base+"/control/policies/varplane", map[string]any{"approvals": 2}, pol...), 200, "")
	expect(t, call(t, "POST", s.Base+"/admin/publish", map[string]any{"scope": "varplane.other", "document": map[string]any{}, "expectedGeneration": 0}, pol...), 403, "change-required")

	r := runCLI(t, env, "", "token", "create", "--id", "reader", "--kinds", "read")
	if r.code != 0 || tokenRE.FindStringSubmatch(r.stdout) == nil {
		t.Fatalf("token create under a policy on the access scope's group: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, env, "", "token", "revoke", "reader"); r.code != 0 {
		t.Fatalf("token revoke under a policy on the access scope's group: %d %s %s", r.code, r.stdout, r.stderr)
	}
	pols := expect(t, call(t, "GET", s.Base+"/control/policies", nil, pol...), 200, "")
	if fmt.Sprint(pols["policies"]) != "[map[approvals:2 scope:varplane]]" {
		t.Fatalf("policies = %v", pols["policies"])
	}
}

// TestReviewOneWindowPerScope: through the real server, a second canary
// window on a scope with one open is 409 canary-window-open naming the
// change that holds it, and nothing more is staged; a window on another
// scope opens, and once the first change is withdrawn the slot is free.
func TestReviewOneWindowPerScope(t *testing.T) {
	_, as := reviewServer(t)
	window := map[string]any{"duration": "10m", "minInstances": 0}
	first := proposeAs(t, as, "alice-token", "app.flags", 0, map[string]any{"v": 1})
	second := proposeAs(t, as, "bob-token", "app.flags", 0, map[string]any{"v": 2})
	other := proposeAs(t, as, "bob-token", "app.other", 0, map[string]any{"v": 3})
	expect(t, as("POST", "/control/changes/"+first+":canary", "alice-token", window), 200, "")

	refused := expect(t, as("POST", "/control/changes/"+second+":canary", "bob-token", window), 409, "canary-window-open")
	if refused["change"] != first || refused["scope"] != "app.flags" || !strings.Contains(str(t, refused, "error"), first) {
		t.Fatalf("the refusal does not name change %s: %v", first, refused)
	}
	windows := func() []any {
		w := expect(t, as("GET", "/control/windows", "alice-token", nil), 200, "")
		list, _ := w["windows"].([]any)
		return list
	}
	if got := windows(); len(got) != 1 || !strings.Contains(fmt.Sprint(got), first) {
		t.Fatalf("windows after the refusal: %v", got)
	}
	if c := expect(t, as("GET", "/control/changes/"+second, "bob-token", nil), 200, ""); c["state"] != "checked" {
		t.Fatalf("the refused change: %v", c["state"])
	}
	expect(t, as("POST", "/control/changes/"+other+":canary", "bob-token", window), 200, "")
	expect(t, as("POST", "/control/changes/"+first+":withdraw", "alice-token", nil), 200, "")
	expect(t, as("POST", "/control/changes/"+second+":canary", "bob-token", window), 200, "")
	if got := windows(); len(got) != 2 || strings.Contains(fmt.Sprint(got), first) {
		t.Fatalf("windows after the slot was freed: %v", got)
	}
}
