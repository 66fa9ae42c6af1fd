package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestListForAReader: through the real server, a token that may only read
// the scopes under one prefix lists exactly those (it listed none when the
// list needed audit), without who changed them last.
func TestListForAReader(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": "ops-token id=ops\nreader-token id=rita kinds=read prefixes=svc.\n"})
	s := startServer(t, "--store", "memory:", "--tokens", filepath.Join(dir, "tokens"))
	ops := expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=ops-token"})
	reader := expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=reader-token"})
	ops(t, 0, `{"n":1}`, "set", "svc.a")
	ops(t, 0, `{"n":1}`, "set", "pay.b")
	r := reader(t, 0, "", "list")
	if !strings.Contains(r.stdout, "svc.a") || strings.Contains(r.stdout, "pay.b") || strings.Contains(r.stdout, "ops") {
		t.Fatalf("a reader's list:\n%s", r.stdout)
	}
}
