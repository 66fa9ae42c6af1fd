package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// TestInstancesCLI files two SDK consumers' statuses through the real
// server (as an instance identity) and lists them with `varplane instances`: every instance with its
// labels, the generation it installed and how far behind the head, a
// document it installed as failed as a rejection; one scope alone with
// SCOPE; one page with --limit and its next; -o json is the route's page;
// a token narrowed to one scope sees no other scope's entries.
func TestInstancesCLI(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("admin-token id=ops\nlimits-token id=lim kinds=read,audit prefixes=app.limits\npod-token id=pod kinds=read roles="+varplane.InstanceRole+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--tokens", tokens)
	env := []string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=admin-token"}
	run := expectCLI(env)
	run(t, 0, `{"on": true}`, "set", "app.flags")
	run(t, 0, `{"on": false}`, "set", "app.flags")
	run(t, 0, `{"n": 1}`, "set", "app.limits")
	status := func(id string, docs ...map[string]any) {
		t.Helper()
		a := call(t, http.MethodPut, s.Base+"/control/instances/"+id+"/status",
			map[string]any{"instance": id, "writtenAt": time.Now(), "ready": true, "root": "app.flags",
				"labels": map[string]string{"region": "eu"}, "documents": docs}, "Authorization", "Bearer pod-token")
		if a.status != http.StatusNoContent {
			t.Fatalf("file status of %s: %d %s", id, a.status, a.body)
		}
	}
	status("pod:pod-a", map[string]any{"scope": "app.flags", "generation": 1, "revision": "sha256:aa"},
		map[string]any{"scope": "app.limits", "generation": 1, "revision": "sha256:bb"})
	status("pod:pod-b", map[string]any{"scope": "app.flags", "generation": 2, "revision": "sha256:cc", "failed": true})

	r := run(t, 0, "", "instances")
	for _, want := range []string{
		"INSTANCE", "pod:pod-a  live", "app.flags   1    1 (", "app.limits  1    -",
		"pod:pod-a: labels region=eu",
		"pod:pod-b: rejected app.flags generation 2 sha256:cc: installed as failed (did not decode)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("instances: no %q in\n%s", want, r.stdout)
		}
	}

	r = run(t, 0, "", "instances", "app.limits", "-o", "json")
	var p control.FleetPage
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("instances -o json: %v\n%s", err, r.stdout)
	}
	if len(p.Instances) != 2 || len(p.Instances[0].Scopes) != 1 || p.Instances[0].Scopes[0].Scope != "app.limits" || len(p.Instances[1].Scopes) != 0 || !p.Instances[0].Live || p.Instances[0].Identity != "pod" {
		t.Errorf("instances app.limits -o json = %s", r.stdout)
	}

	r = run(t, 0, "", "instances", "--limit", "1")
	if !strings.Contains(r.stdout, "pod:pod-a") || strings.Contains(r.stdout, "pod:pod-b") ||
		!strings.Contains(r.stdout, "next: varplane instances --limit 1 --after pod:pod-a") {
		t.Errorf("instances --limit 1 =\n%s", r.stdout)
	}
	r = run(t, 0, "", "instances", "--limit", "1", "--after", "pod:pod-a")
	if !strings.Contains(r.stdout, "pod:pod-b") || strings.Contains(r.stdout, "next:") {
		t.Errorf("instances --after =\n%s", r.stdout)
	}
	// A token that may audit app.limits alone sees no entry of app.flags.
	r = expectCLI([]string{"VARPLANE_SERVER=" + s.URL, "VARPLANE_TOKEN=limits-token"})(t, 0, "", "instances")
	if !strings.Contains(r.stdout, "app.limits") || strings.Contains(r.stdout, "app.flags") || !strings.Contains(r.stdout, "pod:pod-b") {
		t.Errorf("instances as a token of app.limits =\n%s", r.stdout)
	}
	run(t, ExitUsage, "", "instances", "--after", "x")
	run(t, ExitUsage, "", "instances", "--limit", "1000")
}
