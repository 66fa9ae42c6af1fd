package main

import (
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane/control"
)

// TestPrintFleetLastSeen: an instance whose status is older than the
// fleet's freshness (the stores keep it an hour) is printed as last seen
// with its age, never as live.
func TestPrintFleetLastSeen(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	page := &control.FleetPage{AsOf: now, FreshSeconds: 60, Instances: []control.FleetInstance{
		{Instance: "pod-live", Live: true, Ready: true, LastStatus: now, AgeSeconds: 5, Scopes: []control.FleetScope{}},
		{Instance: "pod-gone", Live: false, Ready: true, LastStatus: now.Add(-20 * time.Minute), AgeSeconds: 1200, Scopes: []control.FleetScope{}},
	}}
	var b strings.Builder
	if err := printFleet(&b, page); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"pod-live  live       5s", "pod-gone  last seen  20m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
