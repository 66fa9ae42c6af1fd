package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRollbackIsRecognisable: through the real server, a rollback given a
// reason of its own (which replaces "rollback to …") is still told from an
// activation: its log line is an activated event (the log keeps its four
// kinds) carrying "rollbackOf" (the generation it rolled back), which no
// other line carries; varplane history marks it, -o json has the field,
// the log verifies (the chain covers it) and a restarted server reads it
// back the same. A reviewed rollback change's publish is marked the same.
func TestRollbackIsRecognisable(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log.jsonl")
	writeFiles(t, dir, map[string]string{"tokens": "alice-token id=alice roles=*\nbob-token id=bob roles=*\n"})
	tokens := filepath.Join(dir, "tokens")
	s := startServer(t, "--store", "file:"+logPath, "--tokens", tokens)
	run := expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=alice-token"})
	bob := expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=bob-token"})
	run(t, 0, `{"n":1}`, "set", "app.x")
	run(t, 0, `{"n":2}`, "set", "app.x")
	run(t, 0, "", "rollback", "app.x", "--reason", "bad deploy")
	// Under a policy, the rollback goes through a change.
	run(t, 0, `{"n":3}`, "set", "app.x")
	run(t, 0, "", "policy", "set", "app", "--approvals", "1")
	r := run(t, 0, "", "change", "rollback", "app.x", "--to-generation", "3", "-o", "json")
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &c); err != nil || c.ID == "" {
		t.Fatalf("change rollback: %q %v", r.stdout, err)
	}
	bob(t, 0, "", "change", "approve", c.ID)
	run(t, 0, "", "change", "publish", c.ID)

	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	marked := map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev struct {
			Kind       string `json:"kind"`
			Scope      string `json:"scope"`
			Generation int    `json:"generation"`
			RollbackOf *int   `json:"rollbackOf"`
			Timestamp  string `json:"timestamp"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Timestamp == "" {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch ev.Kind {
		case "revision-created", "activated", "deactivated", "rejected":
		default:
			t.Fatalf("a log line of a fifth kind: %s", line)
		}
		if ev.RollbackOf != nil {
			if ev.Kind != "activated" || ev.Scope != "app.x" {
				t.Fatalf("rollbackOf on %s", line)
			}
			marked[ev.Generation] = *ev.RollbackOf
		}
	}
	if len(marked) != 2 || marked[3] != 2 || marked[5] != 4 {
		t.Fatalf("the log's rollbacks (generation → rolled back) = %v, want 3 → 2 and 5 → 4", marked)
	}
	check := func(when string) {
		t.Helper()
		r := run(t, 0, "", "history", "app.x")
		if strings.Count(r.stdout, "(rollback of ") != 2 || !strings.Contains(r.stdout, "activated (rollback of 2)") || !strings.Contains(r.stdout, "bad deploy") {
			t.Fatalf("%s: history:\n%s", when, r.stdout)
		}
		r = run(t, 0, "", "history", "app.x", "-o", "json")
		if strings.Count(r.stdout, `"rollbackOf"`) != 2 {
			t.Fatalf("%s: history -o json:\n%s", when, r.stdout)
		}
	}
	check("live")
	if r := runCLI(t, nil, "", "verify", logPath); r.code != 0 || !strings.HasPrefix(r.stdout, "sound: ") {
		t.Fatalf("verify: %+v", r)
	}
	s.stop()
	s = startServer(t, "--store", "file:"+logPath, "--tokens", tokens)
	run = expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=alice-token"})
	check("after a restart")
}
