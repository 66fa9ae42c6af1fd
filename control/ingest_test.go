package control_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// beats is what the memory store keeps of instances, read back directly.
type beats interface {
	InstanceStatuses(ctx context.Context) (map[string][]byte, error)
	CanaryReports(ctx context.Context, window string) (map[string][]byte, error)
}

func statuses(t *testing.T, e *env) map[string][]byte {
	t.Helper()
	m, err := e.store.(beats).InstanceStatuses(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func reports(t *testing.T, e *env, window string) map[string][]byte {
	t.Helper()
	m, err := e.store.(beats).CanaryReports(context.Background(), window)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// raw sends a body as is, with a content type.
func (e *env) raw(method, path, token, contentType, body string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(b.String())
}

func status(scopes ...varplane.Scope) varplane.InstanceStatus {
	st := varplane.InstanceStatus{Instance: "claimed-in-body", WrittenAt: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), Ready: true, Documents: []varplane.InstanceDocument{}}
	for _, sc := range scopes {
		st.Documents = append(st.Documents, varplane.InstanceDocument{Scope: sc, Generation: 1, Revision: varplane.Revision("sha256:" + strings.Repeat("a", 64))})
	}
	return st
}

// TestIngestStatus: a consumer files its heartbeat under its own identity
// only, for scopes it may read only, through a bounded strict body; every
// refusal leaves nothing stored.
func TestIngestStatus(t *testing.T) {
	e := newEnv(t, envOpts{storeInstances: true})
	e.publish("app.flags", `{"a":1}`)

	s, b := e.do("PUT", "/v1/control/instances/reader/status", "reader", status("app.flags"), nil)
	want(t, "a reader files its status", s, b, http.StatusNoContent, "")
	s, b = e.do("PUT", "/v1/control/instances/reader:pod-2/status", "reader", status(), nil)
	want(t, "a reader files a named process's status", s, b, http.StatusNoContent, "")
	got := statuses(t, e)
	var st varplane.InstanceStatus
	if err := json.Unmarshal(got["reader"], &st); err != nil {
		t.Fatalf("stored status %s: %v", got["reader"], err)
	}
	// Stored as sent, but written at the server's time: freshness is the
	// server's to judge.
	if st.Instance != "claimed-in-body" || !st.WrittenAt.Equal(e.clock.Now()) || len(st.Documents) != 1 || st.Documents[0].Scope != "app.flags" {
		t.Fatalf("stored status = %+v, want the body with writtenAt %v", st, e.clock.Now())
	}
	// The control plane sees both as instances.
	in := control.StoreInstances(e.engine)
	list, err := in.Statuses(context.Background())
	if err != nil || len(list) != 2 || list[0].Instance != "reader" || list[0].Installed["app.flags"] != 1 || list[1].Instance != "reader:pod-2" {
		t.Fatalf("Statuses = %+v, %v", list, err)
	}

	huge := `{"instance":"x","documents":[],"root":"` + strings.Repeat("a", varplane.DefaultMaxBodyBytes) + `"}`
	deep := `{"instance":"x","documents":[],"root":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`
	for _, tc := range []struct {
		name, token, id, ctype, body string
		status                       int
		code                         varplane.Code
	}{
		{"no token", "", "reader", "application/json", `{}`, 401, varplane.CodeUnauthorized},
		{"unknown token", "nobody", "reader", "application/json", `{}`, 403, varplane.CodeForbidden},
		{"forged id", "reader", "alice", "application/json", `{"instance":"alice"}`, 403, varplane.CodeForbidden},
		{"forged named id", "reader", "alice:pod-1", "application/json", `{}`, 403, varplane.CodeForbidden},
		{"a longer identity", "reader", "readerx", "application/json", `{}`, 403, varplane.CodeForbidden},
		{"an empty name", "reader", "reader:", "application/json", `{}`, 403, varplane.CodeForbidden},
		{"braces in the id", "reader", "reader:{x}", "application/json", `{}`, 400, varplane.CodeBadRequest},
		{"a scope it may not read", "reader", "reader:p3", "application/json", `{"documents":[{"scope":"secret","generation":1}]}`, 403, varplane.CodeForbidden},
		{"a bad scope", "reader", "reader:p3", "application/json", `{"documents":[{"scope":"Not A Scope","generation":1}]}`, 400, varplane.CodeBadRequest},
		{"not JSON", "reader", "reader:p3", "application/json", `{`, 400, varplane.CodeBadRequest},
		{"an unknown field", "reader", "reader:p3", "application/json", `{"instance":"x","extra":1}`, 400, varplane.CodeBadRequest},
		{"a wrong type", "reader", "reader:p3", "application/json", `{"documents":"all"}`, 400, varplane.CodeBadRequest},
		{"no body", "reader", "reader:p3", "application/json", ``, 400, varplane.CodeBadRequest},
		{"a form", "reader", "reader:p3", "application/x-www-form-urlencoded", `a=b`, 415, varplane.CodeUnsupportedMediaType},
		{"a huge body", "reader", "reader:p3", "application/json", huge, 413, varplane.CodePayloadTooLarge},
		{"a deep body", "reader", "reader:p3", "application/json", deep, 400, varplane.CodeLimitExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := statuses(t, e)
			s, b := e.raw("PUT", "/v1/control/instances/"+tc.id+"/status", tc.token, tc.ctype, tc.body)
			want(t, tc.name, s, b, tc.status, tc.code)
			after := statuses(t, e)
			if len(after) != len(before) || string(after["reader"]) != string(before["reader"]) {
				t.Fatalf("a refused status changed what is stored: %q → %q", before, after)
			}
		})
	}
	s, b = e.do("GET", "/v1/control/instances/reader/status", "reader", nil, nil)
	want(t, "GET a status", s, b, http.StatusMethodNotAllowed, varplane.CodeMethodNotAllowed)
	// Too many documents is refused before any is authorized.
	many := status()
	for range varplane.MaxStatusDocuments + 1 {
		many.Documents = append(many.Documents, varplane.InstanceDocument{Scope: "app.flags"})
	}
	s, b = e.do("PUT", "/v1/control/instances/reader:many/status", "reader", many, nil)
	want(t, "too many documents", s, b, 400, varplane.CodeLimitExceeded)
}

// TestIngestReports: the open windows are listed to every consumer (the
// scope only to who may read it), the candidate only to who may read its
// scope, and a report is filed under the caller's own id on an open window;
// a report that counts needs read on the window's scope.
func TestIngestReports(t *testing.T) {
	e := newEnv(t, envOpts{storeInstances: true})
	c := e.window("alice", "app.flags", 1)
	win := c.Canary.ID
	sec := e.propose("admin", "secret", 0, `{"secret.a":1}`)
	st, body, sec := e.act("admin", sec.ID, "canary", map[string]any{"duration": "10m", "minInstances": 1})
	want(t, "open a window on secret", st, body, 200, "")
	secWin := sec.Canary.ID

	var ws struct {
		Windows []varplane.StagedWindow `json:"windows"`
	}
	s, b := e.do("GET", "/v1/control/windows", "reader", nil, &ws)
	want(t, "list windows", s, b, 200, "")
	if len(ws.Windows) != 2 || ws.Windows[0].Window != win || ws.Windows[0].Scope != "app.flags" || ws.Windows[0].Revision != c.Revision ||
		ws.Windows[1].Window != secWin || ws.Windows[1].Scope != "" || ws.Windows[1].Revision != "" || ws.Windows[1].ClosesAt.IsZero() {
		t.Fatalf("windows as reader = %+v, want app.flags's whole and secret's by id alone", ws.Windows)
	}
	s, b = e.do("GET", "/v1/control/windows", "", nil, nil)
	want(t, "list windows without a token", s, b, 401, varplane.CodeUnauthorized)

	var cand varplane.CanaryCandidate
	s, b = e.do("GET", "/v1/control/windows/"+win+"/candidate", "reader", nil, &cand)
	want(t, "read the candidate", s, b, 200, "")
	if cand.Window != win || cand.Scope != "app.flags" || cand.Base != 1 || string(cand.Document) != `{"a":2}` {
		t.Fatalf("candidate = %+v (%s)", cand, cand.Document)
	}
	s, b = e.do("GET", "/v1/control/windows/"+secWin+"/candidate", "reader", nil, nil)
	want(t, "the candidate of a scope it may not read", s, b, 403, varplane.CodeForbidden)
	s, b = e.do("GET", "/v1/control/windows/nope-1/candidate", "reader", nil, nil)
	want(t, "the candidate of no window", s, b, 404, varplane.CodeNotFound)

	rep := func(window, inst string, decoded int64) varplane.CanaryReport {
		return varplane.CanaryReport{Window: window, Instance: inst, Decoded: decoded, At: e.clock.Now()}
	}
	s, b = e.do("PUT", "/v1/control/windows/"+win+"/reports/reader", "reader", rep(win, "reader", 3), nil)
	want(t, "a reader reports", s, b, http.StatusNoContent, "")
	// Holding no read on secret, it may still say the candidate does not
	// concern it, and nothing more.
	s, b = e.do("PUT", "/v1/control/windows/"+secWin+"/reports/reader", "reader", rep(secWin, "reader", 0), nil)
	want(t, "an empty report on a scope it may not read", s, b, http.StatusNoContent, "")
	s, b = e.do("PUT", "/v1/control/windows/"+secWin+"/reports/reader:2", "reader", rep(secWin, "reader:2", 1), nil)
	want(t, "a counting report on a scope it may not read", s, b, 403, varplane.CodeForbidden)
	if r := reports(t, e, secWin); len(r) != 1 || r["reader:2"] != nil {
		t.Fatalf("reports of the secret window = %q, want the empty one alone", r)
	}

	huge := `{"window":"` + win + `","instance":"reader","candidateError":"` + strings.Repeat("x", varplane.DefaultMaxBodyBytes) + `"}`
	for _, tc := range []struct {
		name, token, path, body string
		status                  int
		code                    varplane.Code
	}{
		{"no token", "", win + "/reports/reader", `{}`, 401, varplane.CodeUnauthorized},
		{"forged id", "reader", win + "/reports/alice", `{"window":"` + win + `","instance":"alice","decoded":1}`, 403, varplane.CodeForbidden},
		{"forged named id", "reader", win + "/reports/alice:x", `{}`, 403, varplane.CodeForbidden},
		{"a closed window", "reader", "nope-1/reports/reader", `{}`, 404, varplane.CodeNotFound},
		{"not JSON", "reader", win + "/reports/reader", `{"decoded":`, 400, varplane.CodeBadRequest},
		{"an unknown field", "reader", win + "/reports/reader", `{"FiledAs":"alice"}`, 400, varplane.CodeBadRequest},
		{"a huge body", "reader", win + "/reports/reader", huge, 413, varplane.CodePayloadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reports(t, e, win)
			s, b := e.raw("PUT", "/v1/control/windows/"+tc.path, tc.token, "application/json", tc.body)
			want(t, tc.name, s, b, tc.status, tc.code)
			after := reports(t, e, win)
			if len(after) != len(before) || string(after["reader"]) != string(before["reader"]) {
				t.Fatalf("a refused report changed what is stored: %q → %q", before, after)
			}
		})
	}

	// A report filed under one id and naming another is stored as is, and
	// keeps the window open as doubtful, past its duration.
	s, b = e.do("PUT", "/v1/control/windows/"+win+"/reports/reader:2", "reader", rep(win, "alice", 1), nil)
	want(t, "a report naming another instance", s, b, http.StatusNoContent, "")
	e.clock.Advance(11 * time.Minute)
	s, b = e.do("PUT", "/v1/control/instances/reader/status", "reader", status("app.flags"), nil)
	want(t, "status", s, b, http.StatusNoContent, "")
	if err := e.svc.CanaryPass(context.Background(), "pass"); err != nil {
		t.Fatal(err)
	}
	got, err := e.svc.Get(context.Background(), c.ID)
	if err != nil || got.State != control.StateCanary || got.Canary.State != control.WindowOpen || !strings.Contains(got.Canary.Reason, `filed under instance "reader:2"`) {
		t.Fatalf("change after a forged report = %+v, %v; want canary, open as doubtful", got.Canary, err)
	}
}
