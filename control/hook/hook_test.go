package hook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/control/hook"
	"github.com/varplane/varplane/store/memory"
)

// service returns a control service over a memory store with checks.
func service(t *testing.T, checks ...control.Check) (*control.Service, varplane.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	guard := control.NewGuard()
	eng := varplane.NewEngine(st, varplane.Options{Owners: guard.Owners()})
	t.Cleanup(eng.Close)
	return control.New(eng, guard, control.Options{Checks: checks}), st
}

// events counts the events of scope in st.
func events(t *testing.T, st varplane.Store, scope varplane.Scope) int {
	t.Helper()
	h, err := st.History(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	return len(h)
}

const rev = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

func TestParseAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ok         bool
		issues     int
		reads      int
	}{
		{"passed", `{"issues":[],"reads":[]}`, true, 0, 0},
		{"empty object", `{}`, true, 0, 0},
		{"issues and reads", `{"issues":[{"code":"cap","path":"/max","message":"over the cap"}],"reads":[{"scope":"platform.caps","generation":3,"revision":"` + rev + `"},{"scope":"platform.none","generation":0}]}`, true, 1, 2},
		{"deactivated head", `{"reads":[{"scope":"a.b","generation":4}]}`, true, 0, 1},
		{"unknown member", `{"issues":[],"verdict":"ok"}`, false, 0, 0},
		{"repeated member", `{"issues":[],"issues":[]}`, false, 0, 0},
		{"case folded member", `{"Issues":[]}`, false, 0, 0},
		{"bad scope", `{"reads":[{"scope":"../x","generation":1,"revision":"` + rev + `"}]}`, false, 0, 0},
		{"bad revision", `{"reads":[{"scope":"a.b","generation":1,"revision":"md5:1"}]}`, false, 0, 0},
		{"revision at generation 0", `{"reads":[{"scope":"a.b","generation":0,"revision":"` + rev + `"}]}`, false, 0, 0},
		{"issue without message", `{"issues":[{"path":"/x"}]}`, false, 0, 0},
		{"not json", `ok`, false, 0, 0},
		{"array", `[]`, false, 0, 0},
		{"deep", strings.Repeat(`{"issues":`, 300) + "[]" + strings.Repeat("}", 300), false, 0, 0},
		{"too many issues", `{"issues":[` + strings.TrimSuffix(strings.Repeat(`{"message":"m"},`, hook.MaxIssues+1), ",") + `]}`, false, 0, 0},
		{"too large", `{"issues":[{"message":"` + strings.Repeat("x", hook.MaxAnswerBytes) + `"}]}`, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans, err := hook.ParseAnswer([]byte(tc.body))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err == nil && (len(ans.Issues) != tc.issues || len(ans.Reads) != tc.reads) {
				t.Fatalf("answer = %+v", ans)
			}
		})
	}
}

func FuzzParseAnswer(f *testing.F) {
	f.Add([]byte(`{"issues":[{"code":"c","path":"/a","message":"m"}],"reads":[{"scope":"a.b","generation":2,"revision":"` + rev + `"}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"reads":[{"scope":"a","generation":18446744073709551615}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ans, err := hook.ParseAnswer(body)
		if err != nil {
			return
		}
		if len(ans.Issues) > hook.MaxIssues || len(ans.Reads) > hook.MaxReads {
			t.Fatalf("over the caps: %d issues, %d reads", len(ans.Issues), len(ans.Reads))
		}
		for _, r := range ans.Reads {
			if !r.Scope.Valid() || (r.Revision != "" && r.Generation == 0) {
				t.Fatalf("accepted read %+v", r)
			}
		}
	})
}

// TestCheckCalls: the webhook receives the candidate and the bearer token;
// its issues come back and its declared reads are recorded on the change.
func TestCheckCalls(t *testing.T) {
	var got hook.Request
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		_, _ = io.WriteString(w, `{"issues":[{"code":"cap","path":"/max","message":"over the cap"}],"reads":[{"scope":"platform.caps","generation":3,"revision":"`+rev+`"}]}`)
	}))
	defer srv.Close()
	chk, err := hook.New("caps", srv.URL+"/check?secret=s3", hook.Options{Token: "t0k"})
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := service(t, chk)
	c, err := svc.Propose(context.Background(), varplane.Identity{ID: "alice"}, control.ProposeRequest{Scope: "app.x", Document: json.RawMessage(`{"max":50}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got.Check != "caps" || got.Scope != "app.x" || string(got.Document) != `{"max":50}` || auth != "Bearer t0k" {
		t.Fatalf("webhook got %+v (auth %q)", got, auth)
	}
	r := c.Checks[len(c.Checks)-1]
	if r.Name != "caps" || r.Passed || len(r.Issues) != 1 || len(r.Reads) != 1 || r.Reads[0].Revision != rev {
		t.Fatalf("result = %+v", r)
	}
	if c.State != control.StateFailed {
		t.Fatalf("state = %s", c.State)
	}
}

// TestCheckUnavailable: a webhook that answers no result fails the proposal
// with check-unavailable, stores no revision and no change, names the
// check but not its URL, and logs the host and path at WARN.
func TestCheckUnavailable(t *testing.T) {
	slow := make(chan struct{})
	defer close(slow)
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		reason  string
	}{
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, "answered 500"},
		{"not a result", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"ok":true}`) }, "not a check result"},
		{"huge", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write(bytes.Repeat([]byte(" "), hook.MaxAnswerBytes+10))
		}, "not a check result"},
		{"stalls", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the client leave
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		}, "did not answer in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			var logs bytes.Buffer
			chk, err := hook.New("caps", srv.URL+"/check?secret=s3", hook.Options{Timeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			svc, st := service(t, chk)
			_, err = svc.Propose(context.Background(), varplane.Identity{ID: "alice"}, control.ProposeRequest{Scope: "app.x", Document: json.RawMessage(`{"max":1}`)})
			if varplane.ErrorCode(err) != varplane.CodeCheckUnavailable || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err = %v, want check-unavailable (%s)", err, tc.reason)
			}
			if strings.Contains(err.Error(), "127.0.0.1") || strings.Contains(err.Error(), "s3") || strings.Contains(logs.String(), "s3") {
				t.Fatalf("the URL leaked: err %q, logs %q", err, logs.String())
			}
			if !strings.Contains(logs.String(), "/check") {
				t.Fatalf("no WARN naming the webhook: %q", logs.String())
			}
			if n := events(t, st, "app.x"); n != 0 {
				t.Fatalf("the failed proposal wrote %d events of app.x", n)
			}
			if l, _ := svc.List(context.Background(), control.ListRequest{}); len(l) != 0 {
				t.Fatalf("the failed proposal recorded %d changes", len(l))
			}
		})
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"", "http://h/x"}, {"a b", "http://h/x"}, {"a=b", "http://h/x"}, {control.SchemaCheck, "http://h/x"},
		{"ok", "ftp://h/x"}, {"ok", "/relative"}, {"ok", "http:///nohost"},
	} {
		if _, err := hook.New(tc.name, tc.url, hook.Options{}); err == nil {
			t.Errorf("New(%q, %q) accepted", tc.name, tc.url)
		}
	}
}
