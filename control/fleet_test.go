package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/memory"
)

// fileStatus writes an instance's status in the store, as an instance
// cache does at its heartbeat.
func fileStatus(t *testing.T, s varplane.Store, st varplane.InstanceStatus) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	writeStatusValue(t, s, st.Instance, b)
}

func writeStatusValue(t *testing.T, s varplane.Store, id string, b []byte) {
	t.Helper()
	hs, ok := varplane.StoreAs[varplane.HeartbeatStore](s)
	if !ok {
		t.Fatalf("the %s store keeps no statuses", s.Name())
	}
	if err := hs.WriteStatus(context.Background(), id, b); err != nil {
		t.Fatal(err)
	}
	if err := hs.ListInstance(context.Background(), id, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// TestFleet lists the fleet on every shared store, through the HTTP routes:
// pages in id order, liveness, labels, installed generations and lag
// against the heads, the last canary report, rejections (a document
// installed as failed, a candidate's error), and entries of scopes the
// caller may not audit left out.
func TestFleet(t *testing.T) {
	for _, sc := range trustStores { // every shared store, opened fresh
		t.Run(sc.name, func(t *testing.T) {
			s := sc.open(t)
			e := newEnv(t, envOpts{store: s, storeInstances: true})
			e.clock.Advance(time.Since(e.clock.Now()))
			e.publish("app.a", `{"v":1}`)
			e.publish("app.a", `{"v":2}`)
			e.publish("app.b", `{"v":1}`)
			e.publish("secret", `{"secret.a":1}`)
			c := e.propose("alice", "app.b", 1, `{"v":2}`)
			st, b, cw := e.act("alice", c.ID, "canary", map[string]any{"duration": "10m", "minInstances": 0})
			want(t, "canary", st, b, http.StatusOK, "")
			if cw.Canary == nil {
				t.Fatalf("no window: %s", b)
			}
			window := cw.Canary.ID

			now := e.clock.Now()
			fileStatus(t, s, varplane.InstanceStatus{Instance: "pod-a", WrittenAt: now, Ready: true, Root: "secret",
				Labels: map[string]string{"region": "eu"},
				Documents: []varplane.InstanceDocument{
					{Scope: "app.a", Generation: 1, Revision: "sha256:a1", LagSeconds: 0.5},
					{Scope: "app.b", Generation: 1, Revision: "sha256:b1"},
					{Scope: "secret", Generation: 1, Revision: "sha256:s1"},
				}})
			fileStatus(t, s, varplane.InstanceStatus{Instance: "pod-b", WrittenAt: now, Ready: true,
				Documents: []varplane.InstanceDocument{{Scope: "app.a", Generation: 2, Revision: "sha256:a2", Failed: true}}})
			fileStatus(t, s, varplane.InstanceStatus{Instance: "pod-c", WrittenAt: now.Add(-90 * time.Second), Ready: true,
				Documents: []varplane.InstanceDocument{{Scope: "app.a", Generation: 2, Revision: "sha256:a2"}}})
			writeStatusValue(t, s, "zz-garbage", []byte("not a status"))
			rb, _ := json.Marshal(varplane.CanaryReport{Window: window, Instance: "pod-a", Decoded: 3, Errors: 1, CandidateError: "boom", At: now})
			hs, _ := varplane.StoreAs[varplane.HeartbeatStore](s)
			if err := hs.WriteCanaryReport(context.Background(), window, "pod-a", rb); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(10 * time.Second)

			// Two pages of two: pod-a, pod-b; then pod-c (the value that is
			// not a status is no instance).
			var p1, p2 control.FleetPage
			st, b = e.do("GET", "/v1/control/instances?limit=2", "alice", nil, &p1)
			want(t, "page 1", st, b, http.StatusOK, "")
			if got := fleetIDs(p1); got != "pod-a,pod-b" || p1.Next != "pod-b" {
				t.Fatalf("page 1 = %s next %q, want pod-a,pod-b next pod-b: %s", got, p1.Next, b)
			}
			st, b = e.do("GET", "/v1/control/instances?limit=2&after="+p1.Next, "alice", nil, &p2)
			want(t, "page 2", st, b, http.StatusOK, "")
			if got := fleetIDs(p2); got != "pod-c" || p2.Next != "" {
				t.Fatalf("page 2 = %s next %q, want pod-c and no next: %s", got, p2.Next, b)
			}
			if p1.FreshSeconds != 60 {
				t.Errorf("freshSeconds = %v, want 60", p1.FreshSeconds)
			}

			a, pb, pc := p1.Instances[0], p1.Instances[1], p2.Instances[0]
			if !a.Live || !pb.Live || pc.Live {
				t.Errorf("live = %v %v %v, want true true false (pod-c's status is 100 s old)", a.Live, pb.Live, pc.Live)
			}
			if a.Labels["region"] != "eu" {
				t.Errorf("labels = %v", a.Labels)
			}
			if a.Root != "" {
				t.Errorf("root = %q shown to a caller that may not audit it", a.Root)
			}
			if got := fleetScopes(a); got != "app.a@1,app.b@1" {
				t.Fatalf("pod-a scopes = %s, want app.a@1,app.b@1 (secret left out)", got)
			}
			if sa := a.Scopes[0]; sa.Head != 2 || sa.Behind != 1 || sa.BehindSeconds < 10 || sa.ConfirmedLagSeconds != 0.5 {
				t.Errorf("pod-a app.a = %+v, want head 2, behind 1 for at least 10 s, confirmed lag 0.5", sa)
			}
			if sb := a.Scopes[1]; sb.Head != 1 || sb.Behind != 0 || sb.BehindSeconds != 0 {
				t.Errorf("pod-a app.b = %+v, want up to date", sb)
			}
			if r := a.LastReport; r == nil || r.Window != window || r.Change != c.ID || r.Scope != "app.b" || r.Decoded != 3 || r.CandidateError != "boom" {
				t.Errorf("pod-a last report = %+v", a.LastReport)
			}
			if len(a.Rejections) != 1 || a.Rejections[0].Kind != control.RejectionCandidate || a.Rejections[0].Error != "boom" || a.Rejections[0].Change != c.ID {
				t.Errorf("pod-a rejections = %+v, want the candidate's error", a.Rejections)
			}
			if len(pb.Rejections) != 1 || pb.Rejections[0] != (control.FleetRejection{Kind: control.RejectionDecode, Scope: "app.a", Generation: 2, Revision: "sha256:a2"}) {
				t.Errorf("pod-b rejections = %+v, want app.a generation 2 failed to decode", pb.Rejections)
			}
			if sa := pb.Scopes[0]; !sa.Failed || sa.Behind != 0 {
				t.Errorf("pod-b app.a = %+v, want failed, not behind", sa)
			}

			// An administrator sees the scope alice may not, and the root.
			var all control.FleetPage
			st, b = e.do("GET", "/v1/control/instances", "admin", nil, &all)
			want(t, "admin", st, b, http.StatusOK, "")
			if got := fleetScopes(all.Instances[0]); got != "app.a@1,app.b@1,secret@1" || all.Instances[0].Root != "secret" {
				t.Errorf("admin: pod-a scopes = %s root %q, want secret too", got, all.Instances[0].Root)
			}

			// Per scope: each instance shows its entry of the scope alone;
			// the report of another scope's window is not shown.
			var sp control.FleetPage
			st, b = e.do("GET", "/v1/control/documents/app.a/instances", "alice", nil, &sp)
			want(t, "scope", st, b, http.StatusOK, "")
			if got := fleetIDs(sp); got != "pod-a,pod-b,pod-c" {
				t.Fatalf("scope page = %s", got)
			}
			if got := fleetScopes(sp.Instances[0]); got != "app.a@1" || sp.Instances[0].LastReport != nil || len(sp.Instances[0].Rejections) != 0 {
				t.Errorf("scope app.a, pod-a = %s %+v %+v", got, sp.Instances[0].LastReport, sp.Instances[0].Rejections)
			}

			for _, bad := range []struct{ path, token string }{
				{"/v1/control/documents/secret/instances", "alice"},
				{"/v1/control/instances", ""},
				{"/v1/control/instances?limit=0", "alice"},
				{"/v1/control/instances?limit=201", "alice"},
				{"/v1/control/instances?limit=x", "alice"},
				{"/v1/control/instances?after=a&after=b", "alice"},
				{"/v1/control/instances?after=" + strings.Repeat("x", varplane.MaxInstanceID+1), "alice"},
			} {
				if st, b := e.do("GET", bad.path, bad.token, nil, nil); st < 400 || st >= 500 {
					t.Errorf("GET %s as %q = %d %s, want a 4xx", bad.path, bad.token, st, b)
				}
			}
		})
	}
}

// TestFleetUnknown: with no instances wired, the view says the fleet is
// unknown rather than empty.
func TestFleetUnknown(t *testing.T) {
	e := newEnv(t, envOpts{})
	p, err := e.svc.Fleet(context.Background(), control.FleetQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Unknown == "" || len(p.Instances) != 0 {
		t.Errorf("page = %+v, want unknown", p)
	}
}

func fleetIDs(p control.FleetPage) string {
	out := ""
	for i, in := range p.Instances {
		if i > 0 {
			out += ","
		}
		out += in.Instance
	}
	return out
}

func fleetScopes(in control.FleetInstance) string {
	out := ""
	for i, s := range in.Scopes {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%s@%d", s.Scope, s.Generation)
	}
	return out
}

// pageOnlyStore fails the test when the whole status list is read: the
// fleet view reads one page through StatusPager.
type pageOnlyStore struct {
	*memory.Store
	t      *testing.T
	limits []int
}

func (s *pageOnlyStore) InstanceStatuses(context.Context) (map[string][]byte, error) {
	s.t.Error("the fleet view read every status")
	return nil, nil
}

func (s *pageOnlyStore) InstanceStatusPage(ctx context.Context, after string, limit int) ([]varplane.StatusValue, string, error) {
	s.limits = append(s.limits, limit)
	return s.Store.InstanceStatusPage(ctx, after, limit)
}

// TestFleetReadsOnePage: a request reads one page of statuses, of the
// default size without a limit and of at most MaxFleetLimit.
func TestFleetReadsOnePage(t *testing.T) {
	s := &pageOnlyStore{Store: memory.New(), t: t}
	e := newEnv(t, envOpts{store: s, storeInstances: true})
	e.clock.Advance(time.Since(e.clock.Now()))
	for i := range 3 {
		fileStatus(t, s, varplane.InstanceStatus{Instance: fmt.Sprintf("pod-%d", i), WrittenAt: e.clock.Now()})
	}
	for _, path := range []string{"/v1/control/instances", "/v1/control/instances?limit=200", "/v1/control/instances?limit=2"} {
		var p control.FleetPage
		st, b := e.do("GET", path, "alice", nil, &p)
		want(t, path, st, b, http.StatusOK, "")
	}
	if got := fmt.Sprint(s.limits); got != fmt.Sprint([]int{control.DefaultFleetLimit, control.MaxFleetLimit, 2}) {
		t.Errorf("page reads = %s, want one per request: 50, 200, 2", got)
	}
}

// TestFleetScopesBounded: an instance holding more scopes than a page
// shows lists MaxFleetScopes of those the caller may see and counts the
// others it may see, never those it may not.
func TestFleetScopesBounded(t *testing.T) {
	e := newEnv(t, envOpts{storeInstances: true})
	e.clock.Advance(time.Since(e.clock.Now()))
	var docs []varplane.InstanceDocument
	for i := range control.MaxFleetScopes + 5 {
		docs = append(docs, varplane.InstanceDocument{Scope: varplane.Scope(fmt.Sprintf("app.s%03d", i)), Generation: 1})
	}
	docs = append(docs, varplane.InstanceDocument{Scope: "zz.hidden", Generation: 1})
	fileStatus(t, e.store, varplane.InstanceStatus{Instance: "pod-a", WrittenAt: e.clock.Now(), Documents: docs})
	p, err := e.svc.Fleet(context.Background(), control.FleetQuery{May: func(s varplane.Scope) (bool, error) { return s != "zz.hidden", nil }})
	if err != nil {
		t.Fatal(err)
	}
	in := p.Instances[0]
	if len(in.Scopes) != control.MaxFleetScopes || in.ScopesOmitted != 5 || in.Scopes[0].Scope != "app.s000" {
		t.Errorf("scopes shown %d (first %s), omitted %d; want %d, app.s000, 5", len(in.Scopes), in.Scopes[0].Scope, in.ScopesOmitted, control.MaxFleetScopes)
	}
}
