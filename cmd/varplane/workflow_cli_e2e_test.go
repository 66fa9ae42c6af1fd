package main

import (
	"strings"
	"testing"
)

// TestCLICoversTheWorkflow: rollback and deactivate read the generation as
// set does (saying so on stderr); under a review policy a direct rollback
// or set is refused with a hint naming the change command, and `change
// rollback` proposes it; `policy set|list|get|delete` manage the policies.
func TestCLICoversTheWorkflow(t *testing.T) {
	s := startServer(t)
	env := []string{"VARPLANE_SERVER=" + s.URL}
	run := cliRunner(t, env)
	run(0, `{"n":1}`, "set", "app.x")
	run(0, `{"n":2}`, "set", "app.x")
	run(0, `{"n":1}`, "set", "app.y")

	r := run(0, "", "rollback", "app.x")
	if !strings.Contains(r.stderr, "rollback: app.x is at generation 2 (read now") {
		t.Fatalf("rollback did not say what it read: %q", r.stderr)
	}
	if st, g, body := readGen(t, s.Base, "app.x"); st != 200 || g != 3 || !strings.Contains(string(body), `"n":1`) {
		t.Fatalf("after rollback app.x = %d g%d %s", st, g, body)
	}
	r = run(0, "", "deactivate", "app.y")
	if !strings.Contains(r.stderr, "deactivate: app.y is at generation 1 (read now") {
		t.Fatalf("deactivate did not say what it read: %q", r.stderr)
	}
	// A stale generation given explicitly is still refused.
	run(1, "", "rollback", "app.x", "--expected-generation", "1")

	r = run(0, "", "policy", "set", "app", "--approvals", "1", "--roles", "reviewer")
	if !strings.Contains(r.stdout, "policy app: 1 approval(s) by a holder of reviewer") {
		t.Fatalf("policy set printed %q", r.stdout)
	}
	if r = run(0, "", "policy", "list"); !strings.Contains(r.stdout, "app: 1 approval(s)") {
		t.Fatalf("policy list printed %q", r.stdout)
	}
	if r = run(0, "", "policy", "get", "app.x"); !strings.Contains(r.stdout, "app.x is covered by the policy on app") {
		t.Fatalf("policy get printed %q", r.stdout)
	}

	r = run(1, "", "rollback", "app.x")
	if !strings.Contains(r.stderr, "change-required") || !strings.Contains(r.stderr, "varplane change rollback app.x") {
		t.Fatalf("a rollback under a policy: %q", r.stderr)
	}
	r = run(1, `{"n":9}`, "set", "app.x")
	if !strings.Contains(r.stderr, "varplane change propose app.x") {
		t.Fatalf("a set under a policy: %q", r.stderr)
	}
	r = run(0, "", "change", "rollback", "app.x", "--note", "back to 1")
	if !strings.Contains(r.stderr, "proposing generation 2's document") || !strings.Contains(r.stdout, "change ch-") {
		t.Fatalf("change rollback: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if st, g, _ := readGen(t, s.Base, "app.x"); st != 200 || g != 3 {
		t.Fatalf("proposing moved app.x to %d", g)
	}

	// The change and the policies are the project's own records: out of
	// the user's list unless asked for.
	if r = run(0, "", "list"); strings.Contains(r.stdout, "varplane-control") || !strings.Contains(r.stdout, "app.x") {
		t.Fatalf("list shows the project's records, or not the user's scopes:\n%s", r.stdout)
	}
	if r = run(0, "", "list", "--internal"); !strings.Contains(r.stdout, "varplane-control.policies") {
		t.Fatalf("list --internal:\n%s", r.stdout)
	}
	run(0, "", "policy", "delete", "app")
	if r = run(0, "", "policy", "get", "app.x"); !strings.Contains(r.stdout, "no policy covers app.x") {
		t.Fatalf("policy get after delete printed %q", r.stdout)
	}
	run(2, "", "policy", "set", "app") // no --approvals
	run(2, "", "policy", "frobnicate") // unknown subcommand
	run(2, "", "change", "rollback")   // no scope
}

// TestCLINamesTheMissingRight: a write whose generation read is refused
// says why it needed audit and how to do without it; a whole-tree watch
// refused to a narrowed token points at --prefix.
func TestCLINamesTheMissingRight(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": "admin-tok\nwriter-tok kinds=read,mutate prefixes=app.\n"})
	s := startServer(t, "--store", "memory:", "--tokens", dir+"/tokens")
	admin := []string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=admin-tok"}
	if r := runCLI(t, admin, `{"n":1}`, "set", "app.x"); r.code != 0 {
		t.Fatalf("set as admin: %+v", r)
	}
	writer := []string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=writer-tok"}
	r := runCLI(t, writer, `{"n":2}`, "set", "app.x")
	if r.code != 1 || !strings.Contains(r.stderr, "needs audit") || !strings.Contains(r.stderr, "--expected-generation N") {
		t.Fatalf("set without audit: %+v", r)
	}
	if r := runCLI(t, writer, `{"n":2}`, "set", "app.x", "--expected-generation", "1"); r.code != 0 {
		t.Fatalf("set with the generation given: %+v", r)
	}
	r = runCLI(t, writer, "", "watch", "--idle-timeout", "1s")
	if r.code != 1 || !strings.Contains(r.stderr, "varplane watch --prefix PREFIX") {
		t.Fatalf("a narrowed token watching everything: %+v", r)
	}
}
