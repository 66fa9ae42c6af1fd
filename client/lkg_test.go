package client_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/varplane/varplane/client"
)

// TestLastKnownGood: a client that installed a head keeps a copy on disk; a
// client started while the server is down serves it marked stale; when the
// server answers, its head replaces the copy, and a no-head removes it.
func TestLastKnownGood(t *testing.T) {
	dir := t.TempDir()
	p := startPlane(t, planeOptions{})
	p.activate("app.k", `{"n":1}`)
	opts := client.Options{LastKnownGood: dir, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}

	c1, err := client.New(p.url(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Register("app.k"); err != nil {
		t.Fatal(err)
	}
	c1.Start()
	waitFor(t, "the runtime head", func() bool { v, _ := c1.Value("app.k"); return v.Tier == client.TierRuntime })
	c1.Stop()
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 1 {
		t.Fatalf("last-known-good files = %v, want one", files)
	}

	p.stop()
	p.activateDirect("app.k", `{"n":2}`)
	c2, err := client.New(p.url(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Register("app.k"); err != nil {
		t.Fatal(err)
	}
	c2.Start()
	defer c2.Stop()
	v, ok := c2.Value("app.k")
	if !ok || v.Tier != client.TierStale || string(v.Raw) != `{"n":1}` || v.Generation != 1 || v.Tier.String() != "stale" {
		t.Fatalf("value with the server down = %+v, want the stale copy of generation 1", v)
	}
	p.start()
	waitFor(t, "the server's head to replace the copy", func() bool {
		v, _ := c2.Value("app.k")
		return v.Tier == client.TierRuntime && string(v.Raw) == `{"n":2}`
	})
	p.deactivate("app.k")
	waitFor(t, "the no-head to remove the copy", func() bool {
		v, _ := c2.Value("app.k")
		_, err := os.Stat(filepath.Join(dir, "YXBwLms.json"))
		return v.Tier == client.TierNone && os.IsNotExist(err)
	})
}
