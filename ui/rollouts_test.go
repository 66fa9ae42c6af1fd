package ui

import (
	"context"
	"html"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/rollout"
)

// TestRolloutPages: the list shows a rollout in progress with its step and
// share; its page shows the steps (the current one marked), each gate's
// state and evidence, its events and, to a token that may change the
// scope, the controls; pausing and aborting through the page are events of
// the rollout; a reader sees no controls and its forged post is refused.
func TestRolloutPages(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"a":1}`, "")
	ctx := context.Background()
	alice := varplane.Identity{ID: "alice", Roles: []string{"*"}}
	bob := varplane.Identity{ID: "bob", Roles: []string{"*"}}
	c, err := s.svc.Propose(ctx, alice, control.ProposeRequest{Scope: "app.x", Base: 1, Document: []byte(`{"a":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.Approve(ctx, bob, c.ID, ""); err != nil {
		t.Fatal(err)
	}
	st, _ := rollout.ParseStrategy("linear:4:1h")
	ro, err := s.svc.StartRollout(ctx, alice, c.ID, control.StartRolloutRequest{Strategy: st})
	if err != nil {
		t.Fatal(err)
	}
	// A selected instance that does not serve the revision: the lag gate
	// is pending, with evidence.
	var sel string
	for i := 0; sel == ""; i++ {
		if id := "pod-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26); rollout.Selected(id, ro.ID, 2500) {
			sel = id
		}
	}
	s.in.SetStatuses(control.InstanceStatus{Instance: sel, At: time.Now(), Installed: map[varplane.Scope]varplane.Generation{"app.x": 1}})
	if err := s.svc.RolloutPass(ctx, "t"); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, s)
	b.signin(adminToken)
	_, page := b.do("GET", "/ui/rollouts", nil)
	page = html.UnescapeString(page)
	for _, want := range []string{ro.ID, "app.x", "1 of 4", "25%", c.ID, `aria-current="page">Rollouts</a>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the rollouts page has no %q:\n%s", want, page)
		}
	}
	_, page = b.do("GET", "/ui/rollout?id="+ro.ID, nil)
	page = html.UnescapeString(page)
	for _, want := range []string{`aria-current="step" class="current">25% of the instances, bake 1h0m0s`, "<strong>lag</strong>: pending", `instance "` + sel + `"`,
		"<strong>rejections</strong>: pass", "start by alice", `id="rollout-controls"`, `value="pause"`, "data-live-poll"} {
		if !strings.Contains(page, want) {
			t.Errorf("the rollout page has no %q:\n%s", want, page)
		}
	}
	fileStatus(t, s, varplane.InstanceStatus{Instance: "pod-r", WrittenAt: time.Now(), Ready: true,
		Documents: []varplane.InstanceDocument{{Scope: "app.x", Generation: 1, Revision: "sha256:aa", Rollout: ro.ID, Serving: ro.Revision}}})
	_, page = b.do("GET", "/ui/fleet", nil)
	if row := rowOf(t, page, "pod-r"); !strings.Contains(row, "of rollout <a href=\"/ui/rollout?id="+ro.ID+"\">") {
		t.Errorf("the fleet page does not show what the instance serves of the rollout:\n%s", row)
	}
	_, page = b.do("GET", "/ui/scope?s=app.x", nil)
	if !strings.Contains(html.UnescapeString(page), `id="rollout-link"><a href="/ui/rollout?id=`+ro.ID+`">`) {
		t.Errorf("the scope page does not link to its rollout:\n%s", page)
	}
	csrf := b.csrf("/ui/rollout?id=" + ro.ID)
	b.do("POST", "/ui/rollout", url.Values{"csrf": {csrf}, "id": {ro.ID}, "action": {"pause"}, "note": {"looking"}})
	if got, _ := s.svc.GetRollout(ctx, ro.ID); got.State != varplane.RolloutPaused || got.Events[len(got.Events)-1].Note != "looking" {
		t.Fatalf("after pause: %s %+v", got.State, got.Events)
	}

	r := newBrowser(t, s)
	r.signin(readerToken)
	_, page = r.do("GET", "/ui/rollout?id="+ro.ID, nil)
	if strings.Contains(page, `id="rollout-controls"`) {
		t.Error("a reader is shown the controls")
	}
	rc := r.csrf("/ui/rollout?id=" + ro.ID)
	r.do("POST", "/ui/rollout", url.Values{"csrf": {rc}, "id": {ro.ID}, "action": {"abort"}})
	if got, _ := s.svc.GetRollout(ctx, ro.ID); got.State != varplane.RolloutPaused {
		t.Fatalf("a reader's forged abort: %s", got.State)
	}

	b.do("POST", "/ui/rollout", url.Values{"csrf": {csrf}, "id": {ro.ID}, "action": {"abort"}, "note": {"stop"}})
	got, _ := s.svc.GetRollout(ctx, ro.ID)
	if got.State != varplane.RolloutAborted {
		t.Fatalf("after abort: %s", got.State)
	}
	_, page = b.do("GET", "/ui/rollout?id="+ro.ID, nil)
	if strings.Contains(page, "data-live-poll") || strings.Contains(page, `id="rollout-controls"`) || !strings.Contains(page, "abort by alice") {
		t.Errorf("an ended rollout's page:\n%s", page)
	}
}
