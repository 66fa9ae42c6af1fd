package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestDryRunTellsTheTruth: through the real server and binary, --dry-run of
// set, activate, rollback and deactivate goes down the write's own path on
// the server (?dryRun=true): what the write would refuse (a review policy
// over a scope of the cascade, an owned scope, a token without mutate, a
// stale generation, an invalid document) the dry run refuses with the same
// code, saying it is a dry run, and exits 1; what it would accept it
// describes and exits 0; neither changes anything, not even a rejected
// event. The repro: `deactivate svc --dry-run` listed three scopes
// and exited 0 where the real run was refused change-required.
func TestDryRunTellsTheTruth(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": "alice-token id=alice kinds=read,audit,mutate\n" +
		"ops-token id=ops roles=control:policies\nmutator-token id=mallory kinds=mutate\nreader-token id=rita kinds=read,audit\n"})
	s := startServer(t, "--store", "memory:", "--tokens", filepath.Join(dir, "tokens"))
	as := func(method, path, token string, body any) answer {
		t.Helper()
		return call(t, method, s.Base+path, body, "Authorization", "Bearer "+token)
	}
	cli := func(token string) func(t *testing.T, want int, stdin string, args ...string) cliResult {
		return expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=" + token})
	}
	alice, mutator, reader := cli("alice-token"), cli("mutator-token"), cli("reader-token")
	for _, sc := range []string{"svc.a", "svc.b", "svc.c"} {
		alice(t, 0, `{"n":1}`, "set", sc)
	}
	alice(t, 0, `{"n":2}`, "set", "svc.a")
	expect(t, as("PUT", "/control/policies/svc.b", "ops-token", map[string]any{"approvals": 1}), 200, "")
	// state is every generation and every event count the runs could move.
	state := func() string {
		t.Helper()
		var b strings.Builder
		for _, sc := range []string{"svc", "svc.a", "svc.b", "svc.c", "grp", "varplane-control"} {
			h := expect(t, as("GET", "/admin/history?scope="+sc, "alice-token", nil), 200, "")
			st := expect(t, as("GET", "/admin/status?scope="+sc, "alice-token", nil), 200, "")
			fmt.Fprintf(&b, "%s@%d/%d ", sc, num(t, st, "generation"), len(h["events"].([]any)))
		}
		return b.String()
	}
	before := state()

	refusals := []struct {
		name   string
		run    func(t *testing.T, want int, stdin string, args ...string) cliResult
		stdin  string
		args   []string
		code   string
		detail string
	}{
		{"the issue's repro: a cascade over a scope under a policy", alice, "", []string{"deactivate", "svc"}, "change-required", "svc.b is under a review policy"},
		{"a set under a policy", alice, `{"n":3}`, []string{"set", "svc.b"}, "change-required", "varplane change propose svc.b"},
		{"a rollback under a policy", alice, "", []string{"rollback", "svc.b", "--expected-generation", "1", "--to-generation", "1"}, "change-required", "varplane change rollback svc.b"},
		{"an owned scope", alice, "", []string{"deactivate", "varplane-control", "--expected-generation", "0"}, "scope-owned", ""},
		{"a token without mutate", reader, `{"n":3}`, []string{"set", "svc.a"}, "forbidden", "mutate"},
		{"a stale generation", alice, `{"n":3}`, []string{"set", "svc.a", "--expected-generation", "1"}, "revision-conflict", "currentGeneration: 2"},
		{"a revision not stored", alice, "", []string{"activate", "svc.c", "sha256:" + strings.Repeat("ab", 32), "--expected-generation", "1"}, "not-found", ""},
		{"an invalid document", alice, `[1]`, []string{"set", "grp", "--expected-generation", "0"}, "revision-invalid", ""},
	}
	dry := make([]cliResult, len(refusals))
	for i, c := range refusals {
		dry[i] = c.run(t, 1, c.stdin, append(c.args, "--dry-run")...)
	}
	accepted := []struct {
		run   func(t *testing.T, want int, stdin string, args ...string) cliResult
		stdin string
		args  []string
		out   string
	}{
		{alice, "", []string{"deactivate", "svc.a"}, "would deactivate svc.a at generation 3 (active now)"},
		{alice, "", []string{"deactivate", "svc.c"}, "would deactivate svc.c at generation 2"},
		{alice, `{"n":3}`, []string{"set", "svc.a"}, "would set svc.a generation 3 revision sha256:"},
		{alice, `{"n":1}`, []string{"set", "svc.a"}, "(already stored)"},
		{alice, "", []string{"rollback", "svc.a"}, "would be rolled back: svc.a generation 3"},
		{mutator, `{"n":3}`, []string{"set", "svc.a", "--expected-generation", "2"}, "would set svc.a generation 3"},
	}
	for _, c := range accepted {
		r := c.run(t, 0, c.stdin, append(c.args, "--dry-run")...)
		if !strings.Contains(r.stdout, c.out) || !strings.Contains(r.stdout, "dry run: the server accepts this write; nothing changed") {
			t.Fatalf("varplane %s --dry-run:\n%s\nwant %q", strings.Join(c.args, " "), r.stdout, c.out)
		}
	}
	if r := mutator(t, 1, `{"n":3}`, "set", "svc.a", "--dry-run"); !strings.Contains(r.stderr, "needs audit") {
		// set reads the generation first (audit), as the write does.
		t.Fatalf("a mutate-only token's dry run without --expected-generation:\n%s", r.stderr)
	}
	if after := state(); after != before {
		t.Fatalf("a dry run changed something:\nbefore %s\nafter  %s", before, after)
	}
	// Each write meets the refusal its dry run announced.
	for i, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			real := c.run(t, 1, c.stdin, c.args...)
			if !strings.Contains(dry[i].stderr, "would be refused (dry run; nothing changed)") {
				t.Fatalf("the dry run's refusal does not say it is one:\n%s", dry[i].stderr)
			}
			realCode, dryCode := refusalCode(real.stderr), refusalCode(dry[i].stderr)
			if realCode != c.code || dryCode != realCode {
				t.Fatalf("dry run refused\n%s\nthe write refused\n%s", dry[i].stderr, real.stderr)
			}
			if c.detail != "" && (!strings.Contains(dry[i].stderr, c.detail) || !strings.Contains(real.stderr, c.detail)) {
				t.Fatalf("%q missing:\ndry run: %s\nwrite: %s", c.detail, dry[i].stderr, real.stderr)
			}
		})
	}
	// The route itself: dryRun is true or false.
	expect(t, as("POST", "/admin/deactivate?dryRun=yes", "alice-token", map[string]any{"scope": "svc.c", "expectedGeneration": 1}), 400, "bad-request")
	d := expect(t, as("POST", "/admin/deactivate?dryRun=true", "alice-token", map[string]any{"scope": "svc.c", "expectedGeneration": 1}), 200, "")
	if d["dryRun"] != true || num(t, d, "generation") != 2 {
		t.Fatalf("dry-run deactivation = %v", d)
	}
	expect(t, as("POST", "/admin/deactivate?dryRun=true", "reader-token", map[string]any{"scope": "svc.c", "expectedGeneration": 1}), 403, "forbidden")
}

// refusalCode is the code of the "error: <code>: …" line of a refusal.
func refusalCode(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if rest, ok := strings.CutPrefix(line, "error: "); ok {
			code, _, _ := strings.Cut(rest, ":")
			return code
		}
	}
	return ""
}
