package ui

import (
	"context"
	"encoding/json"
	"html"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// fileStatus writes an instance's status in the stack's store, as an
// instance cache does at its heartbeat.
func fileStatus(t *testing.T, s *stack, st varplane.InstanceStatus) {
	t.Helper()
	hs, ok := varplane.StoreAs[varplane.HeartbeatStore](s.engine.Store())
	if !ok {
		t.Fatal("the stack's store keeps no statuses")
	}
	b, _ := json.Marshal(st)
	if err := hs.WriteStatus(context.Background(), st.Instance, b); err != nil {
		t.Fatal(err)
	}
}

// TestFleetPage lists the fleet: a live instance behind the head with its
// labels, one last seen 20 minutes ago (listed as last seen, not live), a
// document installed as failed as a rejection; one
// scope alone with ?s=; the change page links to its scope's fleet; and a
// token that may not audit a scope does not see that scope's entries.
func TestFleetPage(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"a":1}`, "")
	s.publish(t, "app.x", `{"a":2}`, "")
	s.publish(t, "app.y", `{"b":1}`, "")
	now := time.Now()
	fileStatus(t, s, varplane.InstanceStatus{Instance: "pod-a", WrittenAt: now, Ready: true, Labels: map[string]string{"region": "eu-west"},
		Documents: []varplane.InstanceDocument{{Scope: "app.x", Generation: 1, Revision: "sha256:aa"}, {Scope: "app.y", Generation: 1, Revision: "sha256:bb"}}})
	fileStatus(t, s, varplane.InstanceStatus{Instance: "pod-b", WrittenAt: now.Add(-20 * time.Minute), Ready: true,
		Documents: []varplane.InstanceDocument{{Scope: "app.x", Generation: 2, Revision: "sha256:cc", Failed: true}}})

	b := newBrowser(t, s)
	b.signin(readerToken)
	_, page := b.do("GET", "/ui/fleet", nil)
	a, pb := rowOf(t, page, "pod-a"), rowOf(t, page, "pod-b")
	for _, want := range []string{"live", "region=eu-west", "app.x</a> generation 1, <strong>1 behind</strong> generation 2", "app.y</a> generation 1, up to date", "<td>none</td>"} {
		if !strings.Contains(a, want) {
			t.Errorf("pod-a's row has no %q:\n%s", want, a)
		}
	}
	if strings.Contains(pb, `badge on">live`) {
		t.Errorf("pod-b, last seen 20 minutes ago, is shown live:\n%s", pb)
	}
	for _, want := range []string{`<span class="badge off">last seen</span>`, `app.x</a> generation 2 <span class="badge off">failed</span>`, "app.x generation 2 did not decode"} {
		if !strings.Contains(pb, want) {
			t.Errorf("pod-b's row has no %q:\n%s", want, pb)
		}
	}
	if !strings.Contains(page, `aria-current="page">Fleet</a>`) {
		t.Errorf("the navigation does not mark the fleet page")
	}

	_, page = b.do("GET", "/ui/fleet?s=app.y", nil)
	if a := rowOf(t, page, "pod-a"); !strings.Contains(a, "app.y") || strings.Contains(a, "app.x") {
		t.Errorf("?s=app.y: pod-a's row shows another scope:\n%s", a)
	}
	if pb := rowOf(t, page, "pod-b"); !strings.Contains(pb, "nothing of this scope") {
		t.Errorf("?s=app.y: pod-b's row:\n%s", pb)
	}

	// The change page links to the fleet of its scope.
	c := canaryChange(t, s, `{"a":3}`)
	_, page = b.do("GET", "/ui/change?id="+c.ID, nil)
	if !strings.Contains(html.UnescapeString(page), `id="fleet-link" href="/ui/fleet?s=app.x"`) {
		t.Errorf("the change page does not link to its scope's fleet:\n%s", page)
	}
}
