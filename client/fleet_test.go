package client_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/file"
)

// TestCanaryLabels: an SDK consumer's CanaryOptions.Labels are filed with
// its status and shown by the fleet view.
func TestCanaryLabels(t *testing.T) {
	st, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log"), file.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := startCanaryServer(t, st)
	c, err := client.New(s.srv.URL, client.Options{Token: "cons-a", Transport: client.TransportNone, Logger: slog.New(slog.DiscardHandler),
		Canary: &client.CanaryOptions{InstanceID: "cons-a:pod-1", Interval: time.Hour, Labels: map[string]string{"region": "eu", "version": "1.4"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if err := c.Beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	var page control.FleetPage
	s.call("GET", "/instances", "alice", nil, &page)
	if len(page.Instances) != 1 || page.Instances[0].Instance != "cons-a:pod-1" || page.Instances[0].Labels["region"] != "eu" || page.Instances[0].Labels["version"] != "1.4" {
		t.Fatalf("fleet = %+v, want cons-a:pod-1 with its labels", page.Instances)
	}
}
