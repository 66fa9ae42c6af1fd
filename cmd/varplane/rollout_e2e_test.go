package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/instance"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/redis"
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
	t.Parallel() // its own servers, store and files: it waits mostly on them
	r := newPrivateRedis(t)
	const prefix = "e2eroll"
	u := r.url(prefix)
	rolloutFleet(t, []string{"--store", u, "--redis-revalidate-interval", "100ms"}, func(i int) *server {
		return startServer(t, "--store", u, "--read-only", "--root", "app.flags", "--redis-revalidate-interval", "100ms",
			"--instance-id", fmt.Sprintf("rep-%d", i))
	}, func() varplane.Store {
		s, err := redis.Open(context.Background(), u, redis.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestRolloutFleetPostgres is TestRolloutFleet on PostgreSQL: the control
// planes are processes on one schema, the fleet embedded instances (read
// replicas are Redis's).
func TestRolloutFleetPostgres(t *testing.T) {
	t.Parallel() // its own servers, store and files: it waits mostly on them
	u := postgresSchemaURL(t)
	rolloutFleet(t, []string{"--store", u}, nil, func() varplane.Store {
		s, err := postgres.Open(context.Background(), u, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// strictFlags decodes a document unless it has a member "undecodable": a
// revision the embedded instances reject.
func strictFlags(_ context.Context, rec *varplane.RevisionRecord) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(rec.Document, &m); err != nil {
		return nil, err
	}
	if _, bad := m["undecodable"]; bad {
		return nil, errors.New("member undecodable is not a flag")
	}
	return m, nil
}

// fleetMember is a replica process or an embedded instance of the test.
type fleetMember struct {
	id  string
	gen func() (int, string) // the generation it serves, and what it answered
}

// rolloutFleet runs the scenarios of TestRolloutFleet with control planes
// started with storeArgs, replica processes from replica (nil: none) and
// embedded instances over stores from embedded.
func rolloutFleet(t *testing.T, storeArgs []string, replica func(i int) *server, embedded func() varplane.Store) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tokens": "alice-token id=alice kinds=read,audit,mutate\nbob-token id=bob roles=reviewer\nviewer-token id=viewer kinds=read,audit\n"})
	var failing atomic.Bool
	alerts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"FlagErrors"}}]}}`)
			return
		}
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	t.Cleanup(alerts.Close)
	ctlArgs := append(slices.Clone(storeArgs), "--tokens", filepath.Join(dir, "tokens"), "--rollout-interval", "200ms", "--gate", "alerts="+alerts.URL)
	a := startServer(t, ctlArgs...)
	as := func(method, path, token string, body any) answer {
		t.Helper()
		return call(t, method, a.Base+path, body, "Authorization", "Bearer "+token)
	}
	expect(t, as("POST", "/admin/publish", "alice-token", map[string]any{"scope": "app.flags", "document": map[string]any{"v": 1}, "expectedGeneration": 0}), 200, "")
	var reps []fleetMember
	var replicas []*server
	for i := 0; replica != nil && i < 3; i++ {
		rep := replica(i)
		replicas = append(replicas, rep)
		reps = append(reps, fleetMember{id: fmt.Sprintf("rep-%d", i), gen: func() (int, string) {
			st, g, body := readGen(t, rep.Base, "app.flags")
			if st != 200 {
				return -1, string(body)
			}
			return g, string(body)
		}})
	}
	for i := range 3 {
		s := embedded()
		t.Cleanup(func() { _ = s.Close() })
		c, err := instance.New(context.Background(), s, instance.Options[map[string]any]{Root: "app.flags", Decode: strictFlags,
			InstanceID: fmt.Sprintf("emb-%d", i), RevalidateInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		reps = append(reps, fleetMember{id: fmt.Sprintf("emb-%d", i), gen: func() (int, string) {
			d, err := c.Get(context.Background(), "app.flags")
			if err != nil {
				return -1, err.Error()
			}
			return int(d.Generation), fmt.Sprint(d.Value)
		}})
	}
	servesAll := func(what string, want func(i int) int) {
		t.Helper()
		for i, m := range reps {
			eventually(t, 20*time.Second, fmt.Sprintf("%s: %s serving generation %d", what, m.id, want(i)), func() (bool, string) {
				g, body := m.gen()
				return g == want(i), body
			})
		}
	}
	servesAll("before", func(int) int { return 1 })

	id := proposeAs(t, as, "alice-token", "app.flags", 1, map[string]any{"v": 2})
	expect(t, as("POST", "/control/changes/"+id+":approve", "bob-token", map[string]any{}), 200, "")
	// A bake long enough to kill the control plane within the first step.
	ro := expect(t, as("POST", "/control/changes/"+id+":rollout", "alice-token", map[string]any{
		"strategy": map[string]any{"kind": "linear", "steps": []any{map[string]any{"share": 5000, "bake": "4s"}, map[string]any{"share": 10000, "bake": "1s"}}},
		"gates":    map[string]any{"maxLag": "30s"}}), 201, "")
	rid := str(t, ro, "id")
	selected := func(i int) bool { return rollout.Selected(reps[i].id, rid, 5000) }
	servesAll("the first step", func(i int) int {
		if selected(i) {
			return 2
		}
		return 1
	})
	// An evaluation for an entity key is decided by the key on every read
	// replica, whatever the replica itself serves to plain reads.
	var keyIn, keyOut string
	for i := 0; keyIn == "" || keyOut == ""; i++ {
		if k := fmt.Sprint("user-", i); rollout.Selected(k, rid, 5000) {
			keyIn = k
		} else {
			keyOut = k
		}
	}
	for i, rep := range replicas {
		for k, want := range map[string]float64{keyIn: 2, keyOut: 1} {
			ev := expect(t, call(t, "POST", rep.Base+"/ofrep/v1/evaluate/flags/app.flags%23/v", map[string]any{"context": map[string]any{"targetingKey": k}}), 200, "")
			if ev["value"] != want {
				t.Fatalf("replica %s (selected %v) evaluates v for key %s (selected %v) as %v, want %v", reps[i].id, selected(i), k, k == keyIn, ev["value"], want)
			}
		}
	}
	// The fleet view shows who serves the rollout's revision.
	eventually(t, 10*time.Second, "the fleet view of the rollout", func() (bool, string) {
		res := runCLI(t, []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=viewer-token"}, "", "instances", "app.flags")
		n := strings.Count(res.stdout, "of rollout "+rid)
		want := 0
		for i := range reps {
			if selected(i) {
				want++
			}
		}
		return res.code == 0 && n == want, res.stdout + res.stderr
	})
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
	for i, m := range reps {
		if g, body := m.gen(); (g == 2) != selected(i) || g < 1 {
			t.Fatalf("%s serves generation %d (%s) with no control plane (selected %v)", m.id, g, body, selected(i))
		}
	}
	a = startServer(t, ctlArgs...)
	servesAll("after the rollout", func(int) int { return 2 })
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
	if res := runCLI(t, env, "", "change", "show", id); res.code != 0 || !strings.Contains(res.stdout, "rollout: "+rid) {
		t.Fatalf("change show: %d %s %s", res.code, res.stdout, res.stderr)
	}
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
	servesAll("the second rollout", func(int) int { return 3 })
	expect(t, as("POST", "/control/rollouts/"+ro2.ID+":abort", "viewer-token", map[string]any{}), 403, "forbidden")
	expect(t, as("POST", "/control/rollouts/"+ro2.ID+":abort", "alice-token", map[string]any{"note": "not today"}), 200, "")
	servesAll("after the abort", func(int) int { return 2 })
	if st, g, _ := readGen(t, a.Base, "app.flags", "Authorization", "Bearer viewer-token"); st != 200 || g != 2 {
		t.Fatalf("head %d after an abort", g)
	}
	show := runCLI(t, env, "", "rollout", "show", ro2.ID)
	if show.code != 0 || !strings.Contains(show.stdout, "aborted") || !strings.Contains(show.stdout, "abort by alice") {
		t.Fatalf("rollout show: %d %s %s", show.code, show.stdout, show.stderr)
	}

	// A third rollout, of a revision the embedded instances cannot
	// decode: their reports roll it back by itself.
	alice := []string{"VARPLANE_SERVER=" + a.URL, "VARPLANE_TOKEN=alice-token"}
	rolledBack := func(doc map[string]any, gate string) {
		t.Helper()
		id := proposeAs(t, as, "alice-token", "app.flags", 2, doc)
		expect(t, as("POST", "/control/changes/"+id+":approve", "bob-token", map[string]any{}), 200, "")
		ro := expect(t, as("POST", "/control/changes/"+id+":rollout", "alice-token", map[string]any{"strategy": "linear:2:1h", "gates": map[string]any{"checks": []string{"alerts"}}}), 201, "")
		rid := str(t, ro, "id")
		eventually(t, 20*time.Second, "the rollback by "+gate, func() (bool, string) {
			got := expect(t, as("GET", "/control/rollouts/"+rid, "viewer-token", nil), 200, "")
			return got["state"] == "rolled-back", fmt.Sprint(got["state"], got["gateStates"])
		})
		show := runCLI(t, env, "", "rollout", "show", rid)
		if !strings.Contains(show.stdout, "rollback by varplane:rollout") || !strings.Contains(show.stdout, "gate "+gate+": fail") {
			t.Fatalf("rollout show after the rollback by %s: %s %s", gate, show.stdout, show.stderr)
		}
		ch := expect(t, as("GET", "/control/changes/"+id, "viewer-token", nil), 200, "")
		if ch["state"] != "failed" {
			t.Fatalf("the change after a rollback: %v", ch["state"])
		}
		servesAll("after the rollback by "+gate, func(int) int { return 2 })
	}
	rolledBack(map[string]any{"v": 4, "undecodable": true}, "rejections")
	// A fourth, stopped by the external check firing during the bake.
	failing.Store(true)
	rolledBack(map[string]any{"v": 5}, "check:alerts")
	failing.Store(false)

	// Deletion protection: the fleet holds app.flags, so a script is
	// refused naming each instance with when it last said so (a dry run
	// says the same), and goes ahead with --force.
	res = runCLI(t, alice, "", "deactivate", "app.flags", "--dry-run")
	if res.code != 1 || !strings.Contains(res.stderr, "confirmation-required") || !strings.Contains(res.stderr, "emb-0 (live, ") || !strings.Contains(res.stderr, "in the last hour") {
		t.Fatalf("dry run of a deactivation held by replicas: %d %s %s", res.code, res.stdout, res.stderr)
	}
	res = runCLI(t, alice, "", "deactivate", "app.flags")
	if res.code != 1 || !strings.Contains(res.stderr, "confirmation-required") || !strings.Contains(res.stderr, "emb-0 (live, ") || !strings.Contains(res.stderr, "--force") {
		t.Fatalf("deactivate held by replicas: %d %s %s", res.code, res.stdout, res.stderr)
	}
	if st, g, _ := readGen(t, a.Base, "app.flags", "Authorization", "Bearer viewer-token"); st != 200 || g != 2 {
		t.Fatalf("a refused deactivation changed the head: %d %d", st, g)
	}
	if res = runCLI(t, alice, "", "deactivate", "app.flags", "--force"); res.code != 0 {
		t.Fatalf("deactivate --force: %d %s %s", res.code, res.stdout, res.stderr)
	}
}
