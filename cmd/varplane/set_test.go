package main

import (
	"strings"
	"testing"
)

// TestSet publishes through the CLI: a new document, the same one again
// (found, activated at the next generation), a stale generation (refused,
// nothing changed), and --scope instead of the argument.
func TestSet(t *testing.T) {
	s := startServer(t)
	env := []string{"VARPLANE_SERVER=" + s.URL}
	const key = "agentic.lanes.set"
	r := runCLI(t, env, `{"enabled": true}`, "set", key, "--actor", "ops")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "set "+key+" generation 1 revision sha256:") || !strings.Contains(r.stdout, "(created)") {
		t.Fatalf("set = %+v", r)
	}
	r = runCLI(t, env, "enabled: true\n", "set", key)
	if r.code != 0 || !strings.Contains(r.stdout, "generation 2") || !strings.Contains(r.stdout, "(already stored)") {
		t.Fatalf("set of the same document without --expected-generation = %+v", r)
	}
	r = runCLI(t, env, `{"enabled": false}`, "set", key, "--expected-generation", "1")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "error: revision-conflict:") || !strings.Contains(r.stderr, "currentGeneration: 2") {
		t.Fatalf("set at a stale generation = %+v", r)
	}
	r = runCLI(t, env, `{"enabled": false}`, "set", "--scope", key, "--expected-generation", "2", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"generation": 3`) || !strings.Contains(r.stdout, `"created": true`) {
		t.Fatalf("set --scope -o json = %+v", r)
	}
	if r = runCLI(t, env, `{}`, "set"); r.code != ExitUsage {
		t.Fatalf("set without a scope = %+v, want a usage error", r)
	}
}
