package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/postgres"
	"github.com/varplane/varplane/store/postgres/pgtest"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// trustStores are the stores of record the filing rules are tried on: the
// bounds hold whatever keeps the statuses.
var trustStores = []struct {
	name string
	open func(t *testing.T) varplane.Store
}{
	{"memory", func(t *testing.T) varplane.Store { return memory.New() }},
	{"file", func(t *testing.T) varplane.Store {
		s, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log.jsonl"), file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"redis", func(t *testing.T) varplane.Store {
		s, err := redis.Open(context.Background(), redistest.PrefixURL(t, "control-trust"), redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"postgres", func(t *testing.T) varplane.Store {
		s, err := postgres.Open(context.Background(), pgtest.SchemaURL(t, "control_trust", nil), postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// window publishes {"a":1} on scope, and opens a ten-minute canary window
// of minimum min on author's change to {"a":2}.
func (e *env) window(author string, scope varplane.Scope, min int) control.Change {
	e.t.Helper()
	e.publish(scope, `{"a":1}`)
	c := e.propose(author, scope, 1, `{"a":2}`)
	st, body, c := e.act(author, c.ID, "canary", map[string]any{"duration": "10m", "minInstances": min})
	want(e.t, "open a window", st, body, 200, "")
	return c
}

// TestFilingTrust: statuses and reports are filed by instance identities
// only, under at most varplane.MaxInstanceNames names each, with bounded
// bodies (issue 34 item 3), on every store; every refusal has a stable
// code and stores nothing.
func TestFilingTrust(t *testing.T) {
	onTrustStores(t, func(t *testing.T, e *env) {
		win := e.window("alice", "app.flags", 1).Canary.ID
		statusPath := func(id string) string { return "/v1/control/instances/" + id + "/status" }
		reportPath := func(id string) string { return "/v1/control/windows/" + win + "/reports/" + id }
		okStatus, _ := json.Marshal(status("app.flags"))
		bigStatus, _ := json.Marshal(varplane.InstanceStatus{Instance: strings.Repeat("x", varplane.MaxStatusBytes)})
		bigReport, _ := json.Marshal(varplane.CanaryReport{Window: win, Instance: "reader", CandidateError: strings.Repeat("x", varplane.MaxReportBytes)})

		for _, tc := range []struct {
			name, token, path, body string
			status                  int
			code                    varplane.Code
		}{
			{"a read-only token files a status", "viewer", statusPath("viewer"), string(okStatus), 403, varplane.CodeForbidden},
			{"a read-only token files a named status", "viewer", statusPath("viewer:1"), string(okStatus), 403, varplane.CodeForbidden},
			{"a read-only token reports", "viewer", reportPath("viewer"), `{"window":"` + win + `","instance":"viewer"}`, 403, varplane.CodeForbidden},
			{"an administrator (*) files a status", "admin", statusPath("admin"), string(okStatus), 403, varplane.CodeForbidden},
			{"an administrator (*) reports", "admin", reportPath("admin"), `{"window":"` + win + `","instance":"admin","decoded":1}`, 403, varplane.CodeForbidden},
			{"the author reports", "alice", reportPath("alice"), `{"window":"` + win + `","instance":"alice","decoded":1}`, 403, varplane.CodeForbidden},
			{"an instance files a status over the size bound", "reader", statusPath("reader"), string(bigStatus), 413, varplane.CodePayloadTooLarge},
			{"an instance files a report over the size bound", "reader", reportPath("reader"), string(bigReport), 413, varplane.CodePayloadTooLarge},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before, beforeReps := statuses(t, e), reports(t, e, win)
				s, b := e.raw("PUT", tc.path, tc.token, "application/json", tc.body)
				want(t, tc.name, s, b, tc.status, tc.code)
				if after, afterReps := statuses(t, e), reports(t, e, win); len(after) != len(before) || len(afterReps) != len(beforeReps) {
					t.Fatalf("a refused filing stored something: statuses %d → %d, reports %d → %d", len(before), len(after), len(beforeReps), len(afterReps))
				}
			})
		}

		// An instance identity holds varplane.MaxInstanceNames names:
		// its own id and named ones.
		for i := 0; i < varplane.MaxInstanceNames; i++ {
			id := "reader"
			if i > 0 {
				id = fmt.Sprintf("reader:p%d", i)
			}
			s, b := e.raw("PUT", statusPath(id), "reader", "application/json", string(okStatus))
			want(t, "status of "+id, s, b, http.StatusNoContent, "")
		}
		before := statuses(t, e)
		s, b := e.raw("PUT", statusPath("reader:one-more"), "reader", "application/json", string(okStatus))
		want(t, "a name past the bound", s, b, http.StatusBadRequest, varplane.CodeLimitExceeded)
		s, b = e.raw("PUT", reportPath("reader:one-more"), "reader", "application/json", `{"window":"`+win+`","instance":"reader:one-more"}`)
		want(t, "a report under a name past the bound", s, b, http.StatusBadRequest, varplane.CodeLimitExceeded)
		if after := statuses(t, e); len(after) != len(before) || after["reader:one-more"] != nil {
			t.Fatalf("a name past the bound was stored: %d → %d statuses", len(before), len(after))
		}
		// A name it holds is refreshed; another identity is not held
		// to this one's names.
		s, b = e.raw("PUT", statusPath("reader:p1"), "reader", "application/json", string(okStatus))
		want(t, "a held name again", s, b, http.StatusNoContent, "")
		s, b = e.raw("PUT", statusPath("pod"), "pod", "application/json", `{"documents":[]}`)
		want(t, "another identity", s, b, http.StatusNoContent, "")
		var got varplane.InstanceStatus
		if err := json.Unmarshal(statuses(t, e)["reader:p1"], &got); err != nil || got.Identity != "reader" {
			t.Fatalf("the stored status names identity %q (%v), want reader", got.Identity, err)
		}
	})
}

// TestFilingNamesFreeUp: a name is held two minutes past its last status,
// and until the windows it reported on close; then another takes its
// place.
func TestFilingNamesFreeUp(t *testing.T) {
	e := newEnv(t, envOpts{storeInstances: true})
	win := e.window("alice", "app.flags", 1).Canary.ID
	for i := 0; i < varplane.MaxInstanceNames; i++ {
		id := fmt.Sprintf("reader:p%d", i)
		s, b := e.do("PUT", "/v1/control/instances/"+id+"/status", "reader", status("app.flags"), nil)
		want(t, "status", s, b, http.StatusNoContent, "")
	}
	// p0 reports: it holds its name until the window closes.
	s, b := e.do("PUT", "/v1/control/windows/"+win+"/reports/reader:p0", "reader", varplane.CanaryReport{Window: win, Instance: "reader:p0"}, nil)
	want(t, "report", s, b, http.StatusNoContent, "")
	e.clock.Advance(3 * time.Minute)
	for i := 0; i < varplane.MaxInstanceNames-1; i++ {
		s, b := e.do("PUT", fmt.Sprintf("/v1/control/instances/reader:q%d/status", i), "reader", status("app.flags"), nil)
		want(t, "a new name once the old statuses lapsed", s, b, http.StatusNoContent, "")
	}
	s, b = e.do("PUT", "/v1/control/instances/reader:q-last/status", "reader", status("app.flags"), nil)
	want(t, "a name while p0's window is open", s, b, http.StatusBadRequest, varplane.CodeLimitExceeded)
	e.clock.Advance(10 * time.Minute)
	s, b = e.do("PUT", "/v1/control/instances/reader:q-last/status", "reader", status("app.flags"), nil)
	want(t, "a name once p0's window closed", s, b, http.StatusNoContent, "")
}

// TestCanaryEvidence: statuses and reports count toward a window's
// minimum only when an instance filed them, for a scope it may read; the
// author's never do (issue 35 item 3). Each row files one status and one
// report under two names and says whether the window (minimum 2) passes.
func TestCanaryEvidence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		author string // proposes the change
		filer  string // files the evidence
		scope  varplane.Scope
		pass   bool
		reason string
	}{
		{"an instance that may read the scope", "alice", "reader", "app.flags", true, ""},
		{"the author, an instance itself", "erin", "erin", "app.flags", false, "0 of 2 instances"},
		{"an instance that may not read the scope", "alice", "pod", "web.flags", false, "0 of 2 instances"},
		{"an instance of the scope's prefix", "alice", "pod", "app.flags", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{storeInstances: true})
			c := e.window(tc.author, tc.scope, 2)
			win := c.Canary.ID
			e.clock.Advance(11 * time.Minute)
			for _, id := range []string{tc.filer + ":a", tc.filer + ":b"} {
				s, b := e.do("PUT", "/v1/control/instances/"+id+"/status", tc.filer, varplane.InstanceStatus{}, nil)
				want(t, "status", s, b, http.StatusNoContent, "")
				s, b = e.do("PUT", "/v1/control/windows/"+win+"/reports/"+id, tc.filer, varplane.CanaryReport{Window: win, Instance: id}, nil)
				want(t, "report", s, b, http.StatusNoContent, "")
			}
			if err := e.svc.CanaryPass(context.Background(), "pass"); err != nil {
				t.Fatal(err)
			}
			got, err := e.svc.Get(context.Background(), c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if passed := got.Canary.State == control.WindowPassed; passed != tc.pass || !strings.Contains(got.Canary.Reason, tc.reason) {
				t.Fatalf("window %s (%q), want passed %v (%q)", got.Canary.State, got.Canary.Reason, tc.pass, tc.reason)
			}
			if tc.pass {
				return
			}
			// The reports route says why each one does not count.
			var wr control.WindowReports
			s, b := e.do("GET", "/v1/control/changes/"+c.ID+"/reports", "admin", nil, &wr)
			want(t, "reports", s, b, 200, "")
			for _, r := range wr.Reports {
				if r.Identity != tc.filer || r.Discount == "" {
					t.Fatalf("report %+v: want identity %s and a discount", r, tc.filer)
				}
			}
		})
	}
}

// TestFilingNamesShared: two servers sharing a store of record hold an
// instance identity to one bound of names, not one each.
func TestFilingNamesShared(t *testing.T) {
	prefix := redisPrefix(t)
	a, b := redisEnv(t, prefix), redisEnv(t, prefix)
	for i := 0; i < varplane.MaxInstanceNames; i++ {
		s, body := a.do("PUT", fmt.Sprintf("/v1/control/instances/reader:a%d/status", i), "reader", status(), nil)
		want(t, "status on server a", s, body, http.StatusNoContent, "")
	}
	s, body := b.do("PUT", "/v1/control/instances/reader:b0/status", "reader", status(), nil)
	want(t, "a new name on server b", s, body, http.StatusBadRequest, varplane.CodeLimitExceeded)
	if got := statuses(t, b); len(got) != varplane.MaxInstanceNames || got["reader:b0"] != nil {
		t.Fatalf("the store holds %d statuses, want %d without reader:b0", len(got), varplane.MaxInstanceNames)
	}
	// A name the identity holds through a is its own on b too.
	s, body = b.do("PUT", "/v1/control/instances/reader:a3/status", "reader", status(), nil)
	want(t, "a held name on server b", s, body, http.StatusNoContent, "")
}

// namesOf returns the statuses stored under identity's names (its id and
// "<id>:<name>"s).
func namesOf(all map[string][]byte, identity string) map[string][]byte {
	out := map[string][]byte{}
	for id, v := range all {
		if id == identity || strings.HasPrefix(id, identity+":") {
			out[id] = v
		}
	}
	return out
}

// TestFilingStoredNames: an identity that files under one name after
// another keeps at most varplane.MaxStoredNames statuses in the store on
// every store, though each status is kept an hour: a new name takes the
// place of its oldest status that holds no name now, the newest stay, and
// another identity's statuses are untouched. A new name while
// varplane.MaxInstanceNames are held now is refused still.
func TestFilingStoredNames(t *testing.T) {
	onTrustStores(t, func(t *testing.T, e *env) {
		file := func(token, id string) (int, []byte) {
			return e.do("PUT", "/v1/control/instances/"+id+"/status", token, status("app.flags"), nil)
		}
		// Another identity's statuses, the oldest in the store.
		for _, id := range []string{"pod", "pod:x"} {
			s, b := file("pod", id)
			want(t, "status of "+id, s, b, http.StatusNoContent, "")
		}
		pods := namesOf(statuses(t, e), "pod")
		e.clock.Advance(time.Hour / 2)

		const n = 40
		name := func(i int) string { return fmt.Sprintf("reader:n%02d", i) }
		for i := range n {
			if i > 0 && i%varplane.MaxInstanceNames == 0 {
				// The last MaxInstanceNames names are held now: a new
				// one is refused, though older statuses could go.
				s, b := file("reader", "reader:refused")
				want(t, "a new name while the bound is held", s, b, http.StatusBadRequest, varplane.CodeLimitExceeded)
				e.clock.Advance(3 * time.Minute) // they are free again
			}
			s, b := file("reader", name(i))
			want(t, "status of "+name(i), s, b, http.StatusNoContent, "")
			if got := namesOf(statuses(t, e), "reader"); len(got) > varplane.MaxStoredNames {
				t.Fatalf("after %d names the store keeps %d of reader's statuses, want at most %d", i+1, len(got), varplane.MaxStoredNames)
			}
		}
		all := statuses(t, e)
		got := namesOf(all, "reader")
		if len(got) != varplane.MaxStoredNames {
			t.Fatalf("the store keeps %d of reader's statuses, want %d", len(got), varplane.MaxStoredNames)
		}
		for i := range n {
			if kept := got[name(i)] != nil; kept != (i >= n-varplane.MaxStoredNames) {
				t.Errorf("%s kept %v; want the newest %d kept and the oldest gone", name(i), kept, varplane.MaxStoredNames)
			}
		}
		if all["reader:refused"] != nil {
			t.Errorf("a refused name was stored")
		}
		if other := namesOf(all, "pod"); len(other) != len(pods) || string(other["pod"]) != string(pods["pod"]) || string(other["pod:x"]) != string(pods["pod:x"]) {
			t.Fatalf("pod's statuses changed: %q, want %q", other, pods)
		}
	})
}

// TestFilingNamesFlood: an identity that files under a new name every ten
// seconds (never more than varplane.MaxInstanceNames held at a time, so
// never refused) keeps the store's count of statuses bounded by
// varplane.MaxStoredNames, on every store.
func TestFilingNamesFlood(t *testing.T) {
	onTrustStores(t, func(t *testing.T, e *env) {
		s, b := e.do("PUT", "/v1/control/instances/pod/status", "pod", status(), nil)
		want(t, "another identity's status", s, b, http.StatusNoContent, "")
		most := 0
		for i := range 200 {
			s, b := e.do("PUT", fmt.Sprintf("/v1/control/instances/reader:f%d/status", i), "reader", status(), nil)
			want(t, "a new name", s, b, http.StatusNoContent, "")
			all := statuses(t, e)
			most = max(most, len(all))
			if len(all) > varplane.MaxStoredNames+1 || all["pod"] == nil {
				t.Fatalf("after %d names the store holds %d statuses (pod's kept: %v), want at most %d and pod's", i+1, len(all), all["pod"] != nil, varplane.MaxStoredNames+1)
			}
			e.clock.Advance(10 * time.Second)
		}
		if most != varplane.MaxStoredNames+1 {
			t.Fatalf("the store held at most %d statuses, want it to reach %d", most, varplane.MaxStoredNames+1)
		}
	})
}

// onTrustStores runs fn on each of trustStores, with an env whose clock is
// set to now (the shared stores expire by their own clocks).
func onTrustStores(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, so := range trustStores {
		t.Run(so.name, func(t *testing.T) {
			e := newEnv(t, envOpts{store: so.open(t), storeInstances: true})
			e.clock.Advance(time.Since(e.clock.Now()))
			fn(t, e)
		})
	}
}
