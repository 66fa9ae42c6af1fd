package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyCommand: varplane verify reads a running server's log (no lock
// taken) and finds it sound, with the same chain digest the API anchors;
// --store file: and an export directory verify the same way; a log whose
// middle was altered is named broken, at its line, with exit 1; bad
// arguments are usage errors.
func TestVerifyCommand(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log.jsonl")
	s := startServer(t, "--store", "file:"+logPath)
	for i, key := range []string{"audit.a", "audit.b", "audit.a", "other.x"} {
		gen := 0
		if i == 2 {
			gen = 1
		}
		expect(t, call(t, "POST", s.Base+"/admin/publish", map[string]any{"scope": key, "document": map[string]any{"n": i}, "expectedGeneration": gen}), 200, "")
	}
	// A subtree deactivation: one event, and a cascade entry in other.x.
	expect(t, call(t, "POST", s.Base+"/admin/deactivate", map[string]any{"scope": "other", "expectedGeneration": 0}), 200, "")
	anchor := expect(t, call(t, "GET", s.Base+"/admin/chain", nil), 200, "")

	r := runCLI(t, nil, "", "verify", logPath)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "sound: log ") || !strings.Contains(r.stdout, "chain digest: "+anchor["digest"].(string)) {
		t.Fatalf("verify of the running server's log = %+v, want sound with the API's digest %v", r, anchor["digest"])
	}
	r = runCLI(t, nil, "", "verify", "--store", "file:"+logPath, "-o", "json")
	var res verifyResult
	if err := json.Unmarshal([]byte(r.stdout), &res); r.code != 0 || err != nil || !res.Sound || res.Scopes != 4 || res.Events != 9 || res.Documents != 4 {
		t.Fatalf("verify --store -o json = %+v (%v), want sound, 4 scopes, 9 events, 4 documents", r, err)
	}

	export := filepath.Join(dir, "export")
	s.stop()
	if r := runCLI(t, nil, "", "migrate", "export", "--from", "file:"+logPath, "--root", "audit.a", "--out", export); r.code != 0 {
		t.Fatalf("migrate export = %+v", r)
	}
	if r := runCLI(t, nil, "", "verify", export); r.code != 0 || !strings.HasPrefix(r.stdout, "sound: export ") {
		t.Fatalf("verify of the export = %+v", r)
	}

	// Alter the middle of copies of the log: line 2, an activation.
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, alter := range []struct{ name, old, new string }{
		{"a member added twice", `"kind":"activated"`, `"kind":"activated","actor":"mallory"`},
		{"a value changed", `"timestamp":"20`, `"timestamp":"19`},
	} {
		lines := bytes.SplitAfter(data, []byte("\n"))
		if !bytes.Contains(lines[1], []byte(`"kind":"activated"`)) || !bytes.Contains(lines[1], []byte(alter.old)) {
			t.Fatalf("line 2 is not the activation expected: %s", lines[1])
		}
		lines[1] = bytes.Replace(lines[1], []byte(alter.old), []byte(alter.new), 1)
		bad := filepath.Join(dir, "altered.jsonl")
		if err := os.WriteFile(bad, bytes.Join(lines, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		r = runCLI(t, nil, "", "verify", bad)
		if r.code != ExitRefused || !strings.HasPrefix(r.stdout, "BROKEN: log ") || !strings.Contains(r.stdout, "line 2") {
			t.Fatalf("verify of a log with %s = %+v, want exit 1 naming line 2", alter.name, r)
		}
	}

	for _, args := range [][]string{
		{"verify"},
		{"verify", logPath, "--store", "file:" + logPath},
		{"verify", "--store", "memory:"},
		{"verify", filepath.Join(dir, "missing")},
		{"verify", logPath, "-o", "yaml"},
	} {
		if r := runCLI(t, nil, "", args...); r.code != ExitUsage {
			t.Errorf("%v = %+v, want a usage error", args, r)
		}
	}
}
