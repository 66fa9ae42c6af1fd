package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane/client"
)

// TestChangeCLI drives reviewed changes through the CLI against a served
// control API: propose, show, list, publish without a policy; under a
// policy the direct set is refused (change-required), a publish without
// approvals is refused, the author cannot approve, and withdraw closes it.
func TestChangeCLI(t *testing.T) {
	s := startServer(t)
	env := []string{"VARPLANE_SERVER=" + s.URL}
	idRE := regexp.MustCompile(`^change (ch-[0-9a-f]{16}) `)

	r := runCLI(t, env, `{"enabled": true}`, "change", "propose", "app.flags", "--note", "first")
	m := idRE.FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil || !strings.Contains(r.stdout, " checked base 0 by anonymous") || !strings.Contains(r.stdout, "check schema: passed") {
		t.Fatalf("change propose = %+v", r)
	}
	id := m[1]
	if r = runCLI(t, env, "", "change", "show", id); r.code != 0 || !strings.Contains(r.stdout, "note: first") {
		t.Fatalf("change show = %+v", r)
	}
	if r = runCLI(t, env, "", "change", "list", "--state", "open"); r.code != 0 || !strings.HasPrefix(r.stdout, id+" app.flags checked") {
		t.Fatalf("change list = %+v", r)
	}
	if r = runCLI(t, env, "", "change", "publish", id); r.code != 0 || !strings.Contains(r.stdout, "published as generation 1 by anonymous") {
		t.Fatalf("change publish = %+v", r)
	}
	if r = runCLI(t, env, "", "change", "publish", id); r.code != ExitRefused || !strings.Contains(r.stderr, "error: change-state:") {
		t.Fatalf("change publish twice = %+v", r)
	}

	// A policy on app: the direct write is refused, the change waits for an
	// approver other than its author.
	req, _ := http.NewRequest(http.MethodPut, s.Base+"/control/policies/app", strings.NewReader(`{"approvals":1}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("put policy: %d", resp.StatusCode)
	}
	if r = runCLI(t, env, `{"enabled": false}`, "set", "app.flags"); r.code != ExitRefused || !strings.Contains(r.stderr, "error: change-required:") {
		t.Fatalf("set under a policy = %+v", r)
	}
	r = runCLI(t, env, `enabled: false`, "change", "propose", "app.flags")
	if m = idRE.FindStringSubmatch(r.stdout); r.code != 0 || m == nil || !strings.Contains(r.stdout, "base 1") {
		t.Fatalf("change propose on base 1 = %+v", r)
	}
	id = m[1]
	if r = runCLI(t, env, "", "change", "publish", id); r.code != ExitRefused || !strings.Contains(r.stderr, "0 of 1 approvals") || !strings.Contains(r.stderr, "approves it (varplane change approve "+id+")") {
		t.Fatalf("unapproved publish = %+v", r)
	}
	if r = runCLI(t, env, "", "change", "approve", id); r.code != ExitRefused || !strings.Contains(r.stderr, "error: forbidden:") {
		t.Fatalf("self-approval = %+v", r)
	}
	if r = runCLI(t, env, "", "change", "rebase", id, "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"state": "checked"`) {
		t.Fatalf("rebase = %+v", r)
	}
	if r = runCLI(t, env, "", "change", "withdraw", id, "--note", "not needed"); r.code != 0 || !strings.Contains(r.stdout, " withdrawn ") {
		t.Fatalf("withdraw = %+v", r)
	}
	if r = runCLI(t, env, "", "change"); r.code != ExitUsage {
		t.Fatalf("change without a subcommand = %+v", r)
	}
	if r = runCLI(t, env, "", "change", "explode"); r.code != ExitUsage {
		t.Fatalf("unknown subcommand = %+v", r)
	}
}

// TestPrintReports: change show's canary lines name every report, mark a
// doubtful one and one that does not count with why, and list the fresh
// instances that are silent.
func TestPrintReports(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rep := client.ChangeReports{
		Window: client.CanaryWindow{ID: "ch-1-3", State: "open", Reason: "a report filed under instance \"i2\" names instance \"i9\"", ClosesAt: at, MinInstances: 2},
		Reports: []client.CanaryReport{
			{Instance: "i1", FiledAs: "i1", Decoded: 4, At: at},
			{Instance: "i9", FiledAs: "i2", Decoded: 1, Errors: 1, CandidateError: "boom", At: at, Doubtful: true, Doubt: "named another"},
			{Instance: "alice:x", FiledAs: "alice:x", At: at, Identity: "alice", Discount: "filed by \"alice\", the change's author"},
		},
		Unreported: []string{"i3"},
	}
	var b strings.Builder
	if err := printReports(&b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"canary window ch-1-3: open, closes 2026-03-01T12:00:00Z, at least 2 instance(s)\n",
		"reason: a report filed under",
		"report of i1: decoded 4, errors 0, at 2026-03-01T12:00:00Z\n",
		"report of i2: decoded 1, errors 1, at 2026-03-01T12:00:00Z, naming instance i9, candidate error: boom (doubtful: named another)\n",
		"report of alice:x: decoded 0, errors 0, at 2026-03-01T12:00:00Z, filed by alice (does not count: filed by \"alice\", the change's author)\n",
		"no report from i3 (its status is fresh)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := printReports(&b, &client.ChangeReports{Window: client.CanaryWindow{ID: "w", State: "passed"}}); err != nil || !strings.Contains(b.String(), "no report yet") {
		t.Fatalf("empty window: %q %v", b.String(), err)
	}
}
