package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane/retention"
)

// TestRetentionDefaults: serve reclaims nothing on the file and memory
// stores unless --reclaim-interval asks for it (the log book is kept whole),
// refuses a policy flag that would then do nothing, and keeps the
// reference's hourly passes on Redis and PostgreSQL.
func TestRetentionDefaults(t *testing.T) {
	for _, tc := range []struct {
		store    string
		args     []string
		interval time.Duration
		refused  string // a word of the usage error
	}{
		{store: "file:.varplane/log.jsonl", interval: 0},
		{store: "memory:", interval: 0},
		{store: "file:x", args: []string{"--reclaim-interval", "1m"}, interval: time.Minute},
		{store: "file:x", args: []string{"--reclaim-interval", "1m", "--retain-count", "3"}, interval: time.Minute},
		{store: "file:x", args: []string{"--retain-count", "3"}, refused: "--retain-count"},
		{store: "memory:", args: []string{"--orphan-age", "1s"}, refused: "--orphan-age"},
		{store: "redis://127.0.0.1:6379/0", interval: retention.DefaultInterval},
		{store: "postgres://x@127.0.0.1/db", args: []string{"--retain-count", "3"}, interval: retention.DefaultInterval},
		{store: "postgres://x@127.0.0.1/db", args: []string{"--reclaim-interval", "0"}, interval: 0},
	} {
		t.Run(tc.store+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			cfg := serveConfig{store: tc.store}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.DurationVar(&cfg.reclaimInterval, "reclaim-interval", retention.DefaultInterval, "")
			cfg.policy.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := cfg.retentionDefaults(fs)
			var usage *usageError
			switch {
			case tc.refused != "":
				if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err = %v, want a usage error naming %s", err, tc.refused)
				}
			case err != nil:
				t.Fatalf("err = %v", err)
			case cfg.reclaimInterval != tc.interval:
				t.Fatalf("reclaim interval %v, want %v", cfg.reclaimInterval, tc.interval)
			}
		})
	}
}
