package ui

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/varplane/varplane"
)

// TestBrowserFleet follows the change page's link to its scope's fleet,
// then the navigation to the whole fleet, in a real browser.
func TestBrowserFleet(t *testing.T) {
	s := newStack(t)
	s.publish(t, "app.x", `{"a":1}`, "")
	s.publish(t, "app.x", `{"a":2}`, "")
	fileStatus(t, s, varplane.InstanceStatus{Instance: "pod-a", WrittenAt: time.Now(), Ready: true, Labels: map[string]string{"region": "eu"},
		Documents: []varplane.InstanceDocument{{Scope: "app.x", Generation: 1, Revision: "sha256:aa"}, {Scope: "app.y", Generation: 3, Failed: true}}})
	c := canaryChange(t, s, `{"a":3}`)
	ctx := newTab(t)
	signinAs(t, ctx, s.srv.URL, readerToken)
	run(t, ctx, chromedp.Navigate(s.srv.URL+"/ui/change?id="+c.ID), chromedp.WaitVisible(chromedp.CSS("#fleet-link")))
	clickAndLoad(t, ctx, "#fleet-link", "#fleet")
	wantText(t, ctx, "h1", "Instances of app.x")
	wantText(t, ctx, `#fleet tr[data-instance="pod-a"]`, "1 behind generation 2")
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#fleet tr[data-instance="pod-a"] a[href*="app.y"]').length`)); n != 0 {
		t.Fatalf("the fleet of app.x shows app.y")
	}
	clickAndLoad(t, ctx, `nav a[href="/ui/fleet"]`, "#fleet")
	wantText(t, ctx, `#fleet tr[data-instance="pod-a"]`, "app.y generation 3 did not decode")
	wantText(t, ctx, `#fleet tr[data-instance="pod-a"]`, "region=eu")
	shoot(t, ctx, "fleet")
}
