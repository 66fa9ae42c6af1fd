package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane/rollout"
)

// TestRolloutFleet takes read replicas (instances, each its own process)
// on a private Redis through rollouts driven by the real server: at the
// first step exactly the replicas the stable hash selects serve the new
// generation; the control plane is killed in the middle of the step and a
// new one resumes the rollout from the stored step, never serving the
// revision outside it; the head moves once the last step baked, and
// `varplane wait` returns at once. A second rollout is aborted by a
// person (a token that may not change the scope is refused) and every
// replica is back on the head.
func TestRolloutFleet(t *testing.T) {
	r := newPrivateRedis(t)
	const prefix = "e2eroll"
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": "alice-token id=alice kinds=read,audit,mutate\nbob-token id=bob roles=reviewer\nviewer-token id=viewer kinds=read,audit\n"})
	ctlArgs := []string{"--store", r.url(prefix), "--redis-revalidate-interval", "100ms", "--tokens", filepath.Join(dir, "tokens"), "--rollout-interval", "200ms"}
	a := startServer(t, ctlArgs...)
	as := func(method, path, token string, body any) answer {
		t.Helper()
		return call(t, method, a.Base+path, body, "Authorization", "Bearer "+token)
	}
	expect(t, as("POST", "/admin/publish", "alice-token", map[string]any{"scope": "app.flags", "document": map[string]any{"v": 1}, "expectedGeneration": 0}), 200, "")
	var reps []*server
	for i := range 4 {
		reps = append(reps, startServer(t, "--store", r.url(prefix), "--read-only", "--root", "app.flags", "--redis-revalidate-interval", "100ms",
			"--instance-id", fmt.Sprintf("rep-%d", i)))
	}
	for _, rep := range reps {
		eventually(t, 10*time.Second, "the replica serving generation 1", func() (bool, string) {
			st, g, body := readGen(t, rep.Base, "app.flags")
			return st == 200 && g == 1, string(body)
		})
	}

	id := proposeAs(t, as, "alice-token", "app.flags", 1, map[string]any{"v": 2})
	expect(t, as("POST", "/control/changes/"+id+":approve", "bob-token", map[string]any{}), 200, "")
	// A bake long enough to kill the control plane within the first step.
	ro := expect(t, as("POST", "/control/changes/"+id+":rollout", "alice-token", map[string]any{
		"strategy": map[string]any{"kind": "linear", "steps": []any{map[string]any{"share": 5000, "bake": "4s"}, map[string]any{"share": 10000, "bake": "1s"}}},
		"gates":    map[string]any{"maxLag": "30s"}}), 201, "")
	rid := str(t, ro, "id")
	selected := func(i int) bool { return rollout.Selected(fmt.Sprintf("rep-%d", i), rid, 5000) }
	for i, rep := range reps {
		want := 1
		if selected(i) {
			want = 2
		}
		eventually(t, 10*time.Second, fmt.Sprintf("rep-%d serving generation %d at the first step", i, want), func() (bool, string) {
			st, g, body := readGen(t, rep.Base, "app.flags")
			return st == 200 && g == want, string(body)
		})
	}
	// The read API shows the rollout; the head has not moved.
	state := expect(t, as("GET", "/control/documents/app.flags/rollout", "viewer-token", nil), 200, "")
	if state["state"] != "running" || num(t, state, "step") != 0 || num(t, state, "share") != 5000 {
		t.Fatalf("the rollout's state: %v", state)
	}
	if st, g, _ := readGen(t, a.Base, "app.flags", "Authorization", "Bearer viewer-token"); st != 200 || g != 1 {
		t.Fatalf("the control plane serves generation %d during the rollout", g)
	}
	// Kill the control plane in the middle of the step; a new one resumes.
	a.stop()
	for i, rep := range reps {
		if st, g, _ := readGen(t, rep.Base, "app.flags"); st != 200 || (g == 2) != selected(i) {
			t.Fatalf("rep-%d serves generation %d with no control plane (selected %v)", i, g, selected(i))
		}
	}
	a = startServer(t, ctlArgs...)
	for i, rep := range reps {
		eventually(t, 20*time.Second, fmt.Sprintf("rep-%d on generation 2 after the rollout", i), func() (bool, string) {
			st, g, body := readGen(t, rep.Base, "app.flags")
			return st == 200 && g == 2, string(body)
		})
	}
	eventually(t, 10*time.Second, "the head moving", func() (bool, string) {
		st, g, body := readGen(t, a.Base, "app.flags", "Authorization", "Bearer viewer-token")
		return st == 200 && g == 2, string(body)
	})
	// The head moves first, then the rollout and its change are recorded.
	eventually(t, 10*time.Second, "the rollout completed and its change published", func() (bool, string) {
		done := expect(t, as("GET", "/control/rollouts/"+rid, "viewer-token", nil), 200, "")
		ch := expect(t, as("GET", "/control/changes/"+id, "viewer-token", nil), 200, "")
		return done["state"] == "completed" && ch["state"] == "published" && ch["rollout"] == rid, fmt.Sprint(done["state"], ch["state"])
	})
	env := []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=viewer-token"}
	eventually(t, 10*time.Second, "every replica's status", func() (bool, string) {
		res := runCLI(t, env, "", "wait", "app.flags", "--generation", "2", "--min", "100%", "--timeout", "2s")
		return res.code == 0, res.stdout + res.stderr
	})
	if res := runCLI(t, env, "", "wait", "app.flags", "--generation", "3", "--min", "50%", "--timeout", "1s"); res.code != 1 || !strings.Contains(res.stderr, "timed out") {
		t.Fatalf("wait for a generation nobody has: exit %d %s %s", res.code, res.stdout, res.stderr)
	}

	// A second rollout, aborted by a person.
	id2 := proposeAs(t, as, "alice-token", "app.flags", 2, map[string]any{"v": 3})
	expect(t, as("POST", "/control/changes/"+id2+":approve", "bob-token", map[string]any{}), 200, "")
	res := runCLI(t, []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=alice-token"}, "", "rollout", "start", id2, "--strategy", "linear:1:1h", "-o", "json")
	if res.code != 0 {
		t.Fatalf("rollout start: %d %s %s", res.code, res.stdout, res.stderr)
	}
	var ro2 struct{ ID string }
	if err := json.Unmarshal([]byte(res.stdout), &ro2); err != nil {
		t.Fatal(err, res.stdout)
	}
	for i, rep := range reps {
		eventually(t, 10*time.Second, fmt.Sprintf("rep-%d serving the second rollout", i), func() (bool, string) {
			st, g, body := readGen(t, rep.Base, "app.flags")
			return st == 200 && g == 3, string(body)
		})
	}
	expect(t, as("POST", "/control/rollouts/"+ro2.ID+":abort", "viewer-token", map[string]any{}), 403, "forbidden")
	expect(t, as("POST", "/control/rollouts/"+ro2.ID+":abort", "alice-token", map[string]any{"note": "not today"}), 200, "")
	for i, rep := range reps {
		eventually(t, 10*time.Second, fmt.Sprintf("rep-%d back on the head", i), func() (bool, string) {
			st, g, body := readGen(t, rep.Base, "app.flags")
			return st == 200 && g == 2, string(body)
		})
	}
	if st, g, _ := readGen(t, a.Base, "app.flags", "Authorization", "Bearer viewer-token"); st != 200 || g != 2 {
		t.Fatalf("head %d after an abort", g)
	}
	show := runCLI(t, env, "", "rollout", "show", ro2.ID)
	if show.code != 0 || !strings.Contains(show.stdout, "aborted") || !strings.Contains(show.stdout, "abort by alice") {
		t.Fatalf("rollout show: %d %s %s", show.code, show.stdout, show.stderr)
	}

	// Deletion protection: the replicas hold app.flags, so a script is
	// refused naming them, and goes ahead with --force.
	alice := []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=alice-token"}
	res = runCLI(t, alice, "", "deactivate", "app.flags")
	if res.code != 1 || !strings.Contains(res.stderr, "confirmation-required") || !strings.Contains(res.stderr, "rep-0") || !strings.Contains(res.stderr, "--force") {
		t.Fatalf("deactivate held by replicas: %d %s %s", res.code, res.stdout, res.stderr)
	}
	if st, g, _ := readGen(t, a.Base, "app.flags", "Authorization", "Bearer viewer-token"); st != 200 || g != 2 {
		t.Fatalf("a refused deactivation changed the head: %d %d", st, g)
	}
	if res = runCLI(t, alice, "", "deactivate", "app.flags", "--force"); res.code != 0 {
		t.Fatalf("deactivate --force: %d %s %s", res.code, res.stdout, res.stderr)
	}
}
