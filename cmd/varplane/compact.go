package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/file"
)

// This file holds retention's two entrances: "varplane compact", which
// compacts a file store's log offline, and serve's reclamation pass every
// --reclaim-interval (startRetention).

// policyFlags are the retention policy's flags, shared by serve and compact.
type policyFlags struct {
	retention.Policy
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.RetainCount, "retain-count", retention.DefaultRetainCount, "revisions kept per scope, the most recently created (the head counts among them when it is one; an older head, and revisions younger than --retain-min-age, are kept besides)")
	fs.DurationVar(&p.RetainMinAge, "retain-min-age", retention.DefaultRetainMinAge, "revisions younger than this are kept")
	fs.DurationVar(&p.OrphanAge, "orphan-age", retention.DefaultOrphanAge, "revision records whose commit never completed (no revision-created event: a commit cut short between its two writes, on Redis) are reclaimed once older than this; a revision created and not yet activated is not one")
}

func (p *policyFlags) check() error {
	if err := p.Validate(); err != nil {
		return usagef("--retain-count, --retain-min-age, --orphan-age: %s", varplane.ErrorMessage(err))
	}
	return nil
}

// CompactCommand runs a reclamation pass on a file store's log offline and
// rewrites the log without the documents it reclaimed. It takes the store's
// lock, as serve does, so it refuses a log a server has open.
type CompactCommand struct {
	m *Main
}

// Run parses args and compacts the log.
func (c *CompactCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("compact", "--store file:PATH [--reclaim] [flags]", `
The file store's log is the log book, appended forever: nothing rewrites it
unless the operator asks. With --reclaim, a reclamation pass runs with the
retention policy (--retain-count, --retain-min-age, --orphan-age), as serve
runs it every --reclaim-interval when asked to; no open change is known
offline. The log is then written again without the documents of the
revisions reclaimed: every event stays, with its link in its scope's chain
(the chain does not cover documents), and a reclaimed revision answers 410
revision-reclaimed from then on. The new log is written beside the old one,
fsync'ed and renamed over it: a crash leaves one or the other, whole.

Without --reclaim nothing is rewritten: the store writes its checkpoint
beside the log (the state a restart starts from) and stops. The log must not
be open in a running server (the store's lock is taken, as serve takes it).`)
	store := fs.String("store", envOr(c.m.Getenv, "VARPLANE_STORE", defaultStore), "file store to compact: file:PATH (env VARPLANE_STORE)")
	reclaim := fs.Bool("reclaim", false, "run a reclamation pass and rewrite the log without the documents it reclaimed")
	var pf policyFlags
	pf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := pf.check(); err != nil {
		return err
	}
	scheme, rest, _ := strings.Cut(*store, ":")
	path := strings.TrimPrefix(rest, "//")
	if !strings.EqualFold(scheme, "file") || path == "" {
		return usagef("--store %q: compact takes a file store, file:PATH", redactURL(*store))
	}
	if _, err := os.Stat(path); err != nil {
		return usagef("--store %s: %v", path, err)
	}
	log, err := newLogger(c.m.Stderr, "text", "warn")
	if err != nil {
		return err
	}
	s, err := file.Open(ctx, path, file.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("open file store %s: %w", path, err)
	}
	defer s.Close()
	size, _ := s.LogSize()
	t0 := time.Now()
	reclaimed := 0
	if *reclaim {
		engine := varplane.NewEngine(s, varplane.Options{Logger: log})
		defer engine.Close()
		r, err := retention.New(s, retention.Options{Policy: pf.Policy, Holder: holderToken(), Logger: log, InUse: openChangesInUse(engine, log)})
		if err != nil {
			return err
		}
		// The pass ends with the store's compaction (FinishReclaim).
		rep, err := r.RunOnce(ctx)
		if err != nil {
			return fmt.Errorf("reclamation pass: %w", err)
		}
		reclaimed = rep.Reclaimed
	}
	after, _ := s.LogSize()
	if err := s.Close(); err != nil {
		return err
	}
	if !*reclaim {
		fmt.Fprintf(c.m.Stdout, "%s: nothing rewritten (%d bytes); the checkpoint beside it is current; give --reclaim to drop the documents of old revisions\n", path, size)
		return nil
	}
	fmt.Fprintf(c.m.Stdout, "compacted %s: %d → %d bytes, %d revision bodies reclaimed, every event kept, in %s\n",
		path, size, after, reclaimed, time.Since(t0).Round(time.Millisecond))
	return nil
}

// holderToken is this process's lease holder token: unique per process.
func holderToken() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	h := strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f {
			return '-'
		}
		return r
	}, host)
	return fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b[:]))
}

// startRetention starts serve's reclamation passes every
// cfg.reclaimInterval on a store that reclaims (all four: memory, file,
// Redis and PostgreSQL; see varplane.Reclaimer), and returns the runner
// (nil when none runs) and the function that stops it. A read-only replica
// runs none: it could take no lease and reclaim nothing, the writers run
// them.
func startRetention(ctx context.Context, cfg serveConfig, engine *varplane.Engine, store varplane.Store, log *slog.Logger) (*retention.Runner, func(), error) {
	none := func() {}
	if cfg.reclaimInterval == 0 {
		return nil, none, nil
	}
	if ro, ok := varplane.StoreAs[varplane.ReadOnlyStore](store); ok && ro.ReadOnly() {
		log.Info("retention: a read-only replica runs no reclamation passes", "store", store.Name())
		return nil, none, nil
	}
	st, ok := store.(retention.Reclaimer)
	if !ok {
		log.Warn("retention: this store does not reclaim revisions yet; --reclaim-interval has no effect", "store", store.Name())
		return nil, none, nil
	}
	r, err := retention.New(st, retention.Options{Policy: cfg.policy.Policy, Interval: cfg.reclaimInterval, Holder: holderToken(), Logger: log, InUse: openChangesInUse(engine, log)})
	if err != nil {
		return nil, none, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Run(runCtx)
	}()
	return r, func() {
		cancel()
		wg.Wait()
	}, nil
}

// openChangesInUse names the revisions the open change requests rest on,
// read from the store whether or not this server serves the control API:
// a change proposed through another replica holds its base here too.
func openChangesInUse(engine *varplane.Engine, log *slog.Logger) retention.InUse {
	svc := control.New(engine, control.NewGuard(), control.Options{Logger: log})
	return svc.RevisionsInUse
}
