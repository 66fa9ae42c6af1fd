package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The first hour of a new user (issue 36): what the README and docs/ lead a
// newcomer to type, and what the binary must answer for it to work.

// mustContain fails t unless got holds every one of wants.
func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Fatalf("%s: %q lacks %q", what, got, w)
		}
	}
}

// TestGuardedGenerationHelp: rollback and deactivate read the current
// generation when --expected-generation is not given, so their help must
// not call the flag required; activate's must.
func TestGuardedGenerationHelp(t *testing.T) {
	for _, tc := range []struct {
		command string
		want    string
	}{
		{"rollback", "generation the scope must be at (default: its current one, read first)"},
		{"deactivate", "generation the scope must be at (default: its current one, read first)"},
		{"activate", "generation the scope must be at (required)"},
	} {
		r := runCLI(t, nil, "", tc.command, "-h")
		if r.code != 0 {
			t.Fatalf("%s -h: exit %d: %s", tc.command, r.code, r.stderr)
		}
		mustContain(t, tc.command+" -h", r.stdout+r.stderr, tc.want)
	}
	// What the help says holds: no usage error without the flag.
	s := startServer(t, "--store", "memory:")
	run := expectCLI([]string{"VARPLANE_SERVER=" + s.URL})
	run(t, 0, `{"n": 1}`, "set", "a.b")
	run(t, 0, `{"n": 2}`, "set", "a.b")
	run(t, 0, "", "rollback", "a.b")
	run(t, 0, "", "deactivate", "a.b")
	if r := runCLI(t, []string{"VARPLANE_SERVER=" + s.URL}, "", "activate", "a.b", "--revision", "abc"); r.code != ExitUsage || !strings.Contains(r.stderr, "--expected-generation is required") {
		t.Fatalf("activate without --expected-generation: %+v", r)
	}
}

// TestChangeShowNamesSchema: a change's schema check says which schema it
// ran against, and says so when there was none, instead of a bare
// "passed" that reads as a schema's verdict.
func TestChangeShowNamesSchema(t *testing.T) {
	s := startServer(t, "--documents", writeServiceSchema(t))
	run := expectCLI([]string{"VARPLANE_SERVER=" + s.URL})
	r := run(t, 0, `{"port": 1}`, "change", "propose", "svc.checkout")
	mustContain(t, "unbound propose", r.stdout, "check schema: passed (no schema bound or named: syntax and numbers only)")
	run(t, 0, "", "schema", "bind", "svc", "service-config/v1")
	r = run(t, 0, `{"port": 2}`, "change", "propose", "svc.cart")
	mustContain(t, "bound propose", r.stdout, "check schema: passed against service-config/v1\n")
	r = run(t, 0, `{"port": "x"}`, "change", "propose", "svc.web")
	mustContain(t, "failed propose", r.stdout, "check schema: failed against service-config/v1\n", "document.type at /port")
}

// TestWatchNarrowedToken: a token narrowed to prefixes=agentic. (as the
// tokens file and docs/access.md write it) is told which prefix it may
// watch, whether it watches everything, its grant's text (agentic.) or the
// scope above it (agentic); and may watch a scope below its prefix.
func TestWatchNarrowedToken(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops-token\nagentic-token kinds=read,audit prefixes=agentic.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--store", "memory:", "--tokens", tokens)
	ops := expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=ops-token"})
	narrow := expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=agentic-token"})
	ops(t, 0, `{"n": 1}`, "set", "agentic.lanes.vinci")

	r := narrow(t, ExitUsage, "", "watch", "--prefix", "agentic.")
	mustContain(t, "watch --prefix agentic.", r.stderr, "without the trailing dot", "--prefix agentic.NAME")
	r = narrow(t, 1, "", "watch", "--prefix", "agentic")
	mustContain(t, "watch --prefix agentic", r.stderr, "error: forbidden:", "hint: ", "--prefix PREFIX.NAME")
	r = narrow(t, 1, "", "watch")
	mustContain(t, "watch", r.stderr, "error: forbidden:", "hint: ", "--prefix PREFIX.NAME")
	// ... and what the hints name works.
	got, stderr := followWatch(t, []string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=agentic-token"}, 1, "--prefix", "agentic.lanes")
	mustContain(t, "watch --prefix agentic.lanes (stderr "+stderr.String()+")", got, "head agentic.lanes.vinci generation 1")
}
