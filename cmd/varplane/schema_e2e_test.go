package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeServiceSchema writes the schema service-config/v1 (an object whose
// only member is an integer port) into a new --documents directory.
func writeServiceSchema(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "service-config"), 0o755); err != nil {
		t.Fatal(err)
	}
	schema := `{"type":"object","properties":{"port":{"type":"integer"}},"required":["port"],"additionalProperties":false}`
	if err := os.WriteFile(filepath.Join(dir, "service-config", "v1.json"), []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "service-config", "v2.json"), []byte(`{"type":"object"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCLITypedScopes drives docs/schemas.md's example through the real
// binary: `schema list|bind|unbind`, a dry run that lists the heads the
// schema rejects, a binding refused over them unless --force, then set
// (with and without --schema-id), validate and rollback under the binding.
func TestCLITypedScopes(t *testing.T) {
	s := startServer(t, "--documents", writeServiceSchema(t))
	env := []string{"VARPLANE_SERVER=" + s.URL}
	run := cliRunner(t, env)
	has := func(what, got string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(got, w) {
				t.Fatalf("%s: %q lacks %q", what, got, w)
			}
		}
	}
	run(0, `{"port": 8080, "legacy": true}`, "set", "svc.checkout")
	run(0, `{"port": 1}`, "set", "svc.cart")

	r := run(0, "", "schema", "list")
	has("list", r.stdout, "service-config/v1", "service-config/v2", "no bindings")

	r = run(0, "", "schema", "bind", "svc", "service-config/v1", "--dry-run")
	has("dry run", r.stdout, "would check 2 current head(s); 1 rejected", "rejected: svc.checkout (generation 1)", "unknown field 'legacy'")
	r = run(1, "", "schema", "bind", "svc", "service-config/v1")
	has("refused bind", r.stderr, "revision-invalid", `schema "service-config/v1"`, "svc.checkout", "hint: ", "--force")
	run(0, "", "schema", "list") // still unbound: checked below by the accepted write
	run(0, `{"port": 8080, "legacy": 2}`, "set", "svc.checkout")

	r = run(0, "", "schema", "bind", "svc", "service-config/v1", "--force")
	has("forced bind", r.stdout, "bound svc to service-config/v1", "1 rejected")
	has("list after bind", run(0, "", "schema", "list").stdout, "svc -> service-config/v1")

	r = run(1, `{"port": "x"}`, "set", "svc.checkout")
	has("set under the binding", r.stderr, "revision-invalid", "service-config/v1", "/port")
	r = run(1, `{"port": 9}`, "set", "svc.checkout", "--schema-id", "service-config/v2")
	has("set naming another schema", r.stderr, "document.schema-mismatch", "service-config/v2")
	r = run(1, `{"port": 9, "x": 1}`, "validate", "svc.checkout")
	has("validate", r.stdout, "invalid against service-config/v1 (bound to svc): 1 issue(s)")
	has("validate valid", run(0, `{"port": 9}`, "validate", "svc.new").stdout, "valid against service-config/v1 (bound to svc)")

	run(0, `{"port": 9}`, "set", "svc.checkout")
	r = run(1, "", "rollback", "svc.checkout")
	has("rollback to a rejected revision", r.stderr, "revision-invalid", "service-config/v1")
	run(0, `{"port": 2}`, "set", "svc.cart")
	run(0, "", "rollback", "svc.cart")

	run(2, "", "schema", "bind", "svc")
	run(2, "", "schema", "frobnicate")
	run(1, "", "schema", "bind", "svc", "nope/v1")
	run(0, "", "schema", "unbind", "svc")
	run(0, `{"port": "x"}`, "set", "svc.checkout")
	run(1, "", "schema", "unbind", "svc")
}

// cliRunner returns a function that runs the CLI with env and stdin and
// fails the test unless it exits want.
func cliRunner(t *testing.T, env []string) func(want int, stdin string, args ...string) cliResult {
	return func(want int, stdin string, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, env, stdin, args...)
		if r.code != want {
			t.Fatalf("varplane %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
		}
		return r
	}
}
