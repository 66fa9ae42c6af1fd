package control_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/memory"
)

// reportingStore is a memory store that also keeps heartbeats and canary
// reports as raw values (control.HeartbeatStore, control.ReportReader),
// so the reports route runs through control.StoreInstances as on Redis.
type reportingStore struct {
	varplane.Store
	mu       sync.Mutex
	statuses map[string][]byte
	reports  map[string]map[string][]byte
}

func (s *reportingStore) InstanceStatuses(context.Context) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.statuses {
		out[k] = v
	}
	return out, nil
}

func (s *reportingStore) CanaryReports(_ context.Context, window string) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.reports[window] {
		out[k] = v
	}
	return out, nil
}

func (s *reportingStore) beat(t *testing.T, id string, at time.Time) {
	t.Helper()
	b, err := json.Marshal(varplane.InstanceStatus{Instance: id, WrittenAt: at})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.statuses[id] = b
	s.mu.Unlock()
}

func (s *reportingStore) file(window, id, value string) {
	s.mu.Lock()
	if s.reports[window] == nil {
		s.reports[window] = map[string][]byte{}
	}
	s.reports[window][id] = []byte(value)
	s.mu.Unlock()
}

func TestWindowReports(t *testing.T) {
	rs := &reportingStore{Store: memory.New(), statuses: map[string][]byte{}, reports: map[string]map[string][]byte{}}
	e := newEnv(t, envOpts{store: rs, storeInstances: true})
	e.publish("app.flags", `{"a":1}`)
	e.publish("secret", `{"secret.a":1}`)
	c := e.propose("alice", "app.flags", 1, `{"a":2}`)

	// A change that opened no window has no reports.
	s, b := e.do("GET", "/v1/control/changes/"+c.ID+"/reports", "dave", nil, nil)
	want(t, "reports without a window", s, b, 404, varplane.CodeNotFound)

	s, b, c = e.act("alice", c.ID, "canary", map[string]any{"duration": "10m", "minInstances": 2})
	want(t, "open a window", s, b, 200, "")
	win := c.Canary.ID
	now := e.clock.Now()
	for _, id := range []string{"clean", "liar", "garbled", "elsewhere", "negative", "silent"} {
		rs.beat(t, id, now)
	}
	rs.beat(t, "stale", now.Add(-2*time.Minute))
	report := func(instance, window string, decoded int64, cerr string) string {
		b, _ := json.Marshal(varplane.CanaryReport{Window: window, Instance: instance, Decoded: decoded, CandidateError: cerr, At: now})
		return string(b)
	}
	rs.file(win, "clean", report("clean", win, 4, ""))
	rs.file(win, "liar", report("someone-else", win, 1, ""))
	rs.file(win, "garbled", `{"window":`)
	rs.file(win, "elsewhere", report("elsewhere", "other-window", 1, ""))
	rs.file(win, "negative", report("negative", win, -3, ""))
	rs.file("other-window", "clean", report("clean", "other-window", 1, ""))

	var wr control.WindowReports
	s, b = e.do("GET", "/v1/control/changes/"+c.ID+"/reports", "dave", nil, &wr)
	want(t, "reports", s, b, 200, "")
	if wr.Change != c.ID || wr.Window.ID != win || wr.Window.MinInstances != 2 || wr.Window.State != control.WindowOpen || !wr.Window.ClosesAt.Equal(c.Canary.ClosesAt) {
		t.Fatalf("window = %+v, want the change's", wr.Window)
	}
	byFiled := map[string]varplane.CanaryReportEntry{}
	order := []string{}
	for _, r := range wr.Reports {
		byFiled[r.FiledAs] = r
		order = append(order, r.FiledAs)
	}
	if want := []string{"clean", "elsewhere", "garbled", "liar", "negative"}; !equalStrings(order, want) {
		t.Fatalf("reports filed as %v, want %v (sorted, only this window's)", order, want)
	}
	for _, tc := range []struct {
		filed, instance string
		doubtful        bool
		doubt           string
	}{
		{"clean", "clean", false, ""},
		{"liar", "someone-else", true, `a report filed under instance "liar" names instance "someone-else"`},
		{"garbled", "garbled", true, `the report of instance "garbled" carries a negative count`},
		{"elsewhere", "elsewhere", true, `a report found on window ` + win + ` names window "other-window"`},
		{"negative", "negative", true, `the report of instance "negative" carries a negative count`},
	} {
		r := byFiled[tc.filed]
		if r.Instance != tc.instance || r.Doubtful != tc.doubtful || r.Doubt != tc.doubt {
			t.Errorf("report filed as %s = %+v, want instance %s doubtful %v (%q)", tc.filed, r, tc.instance, tc.doubtful, tc.doubt)
		}
	}
	if r := byFiled["clean"]; r.Decoded != 4 || !r.At.Equal(now) || r.Window != win {
		t.Errorf("clean report = %+v", r)
	}
	// "liar" names another instance, so "liar" itself has not reported;
	// "stale" is not fresh and is not waited for.
	if want := []string{"liar", "silent"}; !equalStrings(wr.Unreported, want) {
		t.Fatalf("unreported = %v, want %v", wr.Unreported, want)
	}
	// The verdicts are Evaluate's: past the window's end it stays open
	// with the first doubtful report's reason.
	var reports []varplane.CanaryReport
	for _, r := range wr.Reports {
		reports = append(reports, varplane.CanaryReport{Window: r.Window, Instance: r.Instance, FiledAs: r.FiledAs, Decoded: r.Decoded, Errors: r.Errors})
	}
	state, reason := control.Evaluate(wr.Window, wr.Window.ClosesAt.Add(time.Second), nil, reports)
	if first := byFiled["elsewhere"].Doubt; state != control.WindowOpen || reason != first {
		t.Fatalf("Evaluate = %s (%s), want open with %q", state, reason, first)
	}

	// A candidate error is shown, not doubtful.
	rs.file(win, "silent", report("silent", win, 0, "decode: boom"))
	wr = control.WindowReports{}
	e.do("GET", "/v1/control/changes/"+c.ID+"/reports", "dave", nil, &wr)
	for _, r := range wr.Reports {
		if r.FiledAs == "silent" && (r.CandidateError != "decode: boom" || r.Doubtful) {
			t.Fatalf("silent's report = %+v", r)
		}
	}
	if !equalStrings(wr.Unreported, []string{"liar"}) {
		t.Fatalf("unreported after silent's report = %v", wr.Unreported)
	}

	// Authorized as reading the change: audit on its scope.
	sc := e.propose("admin", "secret", 1, `{"secret.a":2}`)
	_, _, sc = e.act("admin", sc.ID, "canary", map[string]any{"duration": "10m", "minInstances": 0})
	for _, tc := range []struct {
		name, token, path string
		status            int
		code              varplane.Code
	}{
		{"no token", "", "/v1/control/changes/" + c.ID + "/reports", 401, varplane.CodeUnauthorized},
		{"unknown token", "mallory", "/v1/control/changes/" + c.ID + "/reports", 403, varplane.CodeForbidden},
		{"no audit on the scope", "dave", "/v1/control/changes/" + sc.ID + "/reports", 403, varplane.CodeForbidden},
		{"the scope's auditor", "admin", "/v1/control/changes/" + sc.ID + "/reports", 200, ""},
		{"unknown change", "dave", "/v1/control/changes/nope/reports", 404, varplane.CodeNotFound},
		{"a hostile id", "dave", "/v1/control/changes/" + strings.Repeat("%2e%2e%2F", 400) + "/reports", 404, varplane.CodeNotFound},
		{"an id with a NUL", "dave", "/v1/control/changes/ch-%00/reports", 404, varplane.CodeNotFound},
	} {
		s, b := e.do("GET", tc.path, tc.token, nil, nil)
		want(t, tc.name, s, b, tc.status, tc.code)
	}
	s, b = e.do("POST", "/v1/control/changes/"+c.ID+"/reports", "alice", map[string]any{}, nil)
	want(t, "POST on the read route", s, b, http.StatusMethodNotAllowed, varplane.CodeMethodNotAllowed)
}

// TestWindowReportsWithoutInstances: a control plane no instance reports
// to says so.
func TestWindowReportsWithoutInstances(t *testing.T) {
	in := &instances{staged: map[string]bool{}, reports: map[string][]varplane.CanaryReport{}}
	e := newEnv(t, envOpts{instances: in})
	e.publish("app.flags", `{"a":1}`)
	c := e.propose("alice", "app.flags", 1, `{"a":2}`)
	_, _, c = e.act("alice", c.ID, "canary", map[string]any{"duration": "1m", "minInstances": 0})
	// Duplicated names (an Instances that is not a store can answer them)
	// are doubtful after the first.
	in.reports[c.Canary.ID] = []varplane.CanaryReport{{Window: c.Canary.ID, Instance: "a"}, {Window: c.Canary.ID, Instance: "a", Decoded: 1}}
	var wr control.WindowReports
	s, b := e.do("GET", "/v1/control/changes/"+c.ID+"/reports", "dave", nil, &wr)
	want(t, "reports", s, b, 200, "")
	if len(wr.Reports) != 2 || wr.Reports[0].Doubtful || !wr.Reports[1].Doubtful || wr.Reports[1].FiledAs != "a" {
		t.Fatalf("duplicated reports = %+v", wr.Reports)
	}
	// A store that keeps no reports (the bare Store contract, as a store
	// from outside this module): a change recorded with a window (opened
	// elsewhere) answers store-unsupported there.
	e2 := newEnv(t, envOpts{store: struct{ varplane.Store }{e.store}, storeInstances: true})
	s, b = e2.do("GET", "/v1/control/changes/"+c.ID+"/reports", "dave", nil, nil)
	want(t, "reports on a store without them", s, b, 400, varplane.CodeStoreUnsupported)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
