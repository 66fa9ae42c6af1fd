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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/file"
)

// This file holds retention's two entrances: "varplane compact", which
// compacts a file store's log offline, and the serve extension that runs a
// reclamation pass every --reclaim-interval.

func init() {
	commands = append(commands, commandInfo{"compact", "compact a file store's log offline (checkpoint; optionally reclaim old revisions first)",
		func(m *Main) command { return &CompactCommand{m: m} }})
	serveExtensions = append(serveExtensions, func() serveExtension { return &retentionExtension{} })
}

// policyFlags are the retention policy's flags, shared by serve and compact.
type policyFlags struct {
	retention.Policy
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.RetainCount, "retain-count", retention.DefaultRetainCount, "revisions kept per scope, the most recently created (the head counts among them when it is one; an older head, and revisions younger than --retain-min-age, are kept besides)")
	fs.DurationVar(&p.RetainMinAge, "retain-min-age", retention.DefaultRetainMinAge, "revisions younger than this are kept")
	fs.DurationVar(&p.OrphanAge, "orphan-age", retention.DefaultOrphanAge, "revisions that never became the head are reclaimed once older than this")
}

func (p *policyFlags) check() error {
	if err := p.Validate(); err != nil {
		return usagef("--retain-count, --retain-min-age, --orphan-age: %s", varplane.ErrorMessage(err))
	}
	return nil
}

// CompactCommand compacts a file store's log: a checkpoint of the current
// state, then the log goes on from there, so that a restart reads the live
// state and not all history. It takes the store's lock, as serve does, so
// it refuses a log a server has open.
type CompactCommand struct {
	m *Main
}

// Run parses args and compacts the log.
func (c *CompactCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("compact", "--store file:PATH [--reclaim] [flags]", `
Rewrite a file store's log as a checkpoint (the current state, the retained
revisions, the idempotency records and every event, documents apart) and
swap it in atomically (rename, then the directory is fsync'ed). A crash at
any point leaves the old log or the new one, whole. The log must not be open
in a running server (the store's lock is taken, as serve takes it).

With --reclaim, a reclamation pass runs first with the retention policy
(--retain-count, --retain-min-age, --orphan-age), as serve runs it every
--reclaim-interval; no open change is known offline.`)
	store := fs.String("store", envOr(c.m.Getenv, "VARPLANE_STORE", defaultStore), "file store to compact: file:PATH (env VARPLANE_STORE)")
	reclaim := fs.Bool("reclaim", false, "run a reclamation pass before compacting")
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
	size, _ := s.LogSize()
	t0 := time.Now()
	res, err := s.Compact(ctx, nil)
	if err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	fmt.Fprintf(c.m.Stdout, "compacted %s: %d → %d bytes, %d events in the checkpoint, %d revision bodies reclaimed, in %s\n",
		path, size, res.After, res.Events, reclaimed, time.Since(t0).Round(time.Millisecond))
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

// retentionExtension runs reclamation passes in serve on the stores that
// reclaim (all four: memory, file, Redis and PostgreSQL; see
// retention.Reclaimer).
type retentionExtension struct {
	interval time.Duration
	policy   policyFlags
}

func (e *retentionExtension) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&e.interval, "reclaim-interval", retention.DefaultInterval, "time between reclamation passes, the first one interval after start (0: none)")
	e.policy.register(fs)
}

func (e *retentionExtension) Start(ctx context.Context, rt *serveRuntime) (func(context.Context) error, error) {
	if e.interval < 0 {
		return nil, usagef("--reclaim-interval must not be negative")
	}
	if err := e.policy.check(); err != nil {
		return nil, err
	}
	if e.interval == 0 {
		return nil, nil
	}
	if ro, ok := rt.Store.(varplane.ReadOnlyStore); ok && ro.ReadOnly() {
		// It could take no lease and reclaim nothing: the writers run the
		// passes.
		rt.Logger.Info("retention: a read-only replica runs no reclamation passes", "store", rt.Store.Name())
		return nil, nil
	}
	st, ok := rt.Store.(retention.Reclaimer)
	if !ok {
		rt.Logger.Warn("retention: this store does not reclaim revisions yet; --reclaim-interval has no effect", "store", rt.Store.Name())
		return nil, nil
	}
	r, err := retention.New(st, retention.Options{Policy: e.policy.Policy, Interval: e.interval, Holder: holderToken(), Logger: rt.Logger, InUse: openChangesInUse(rt.Engine, rt.Logger)})
	if err != nil {
		return nil, err
	}
	fs, _ := rt.Store.(*file.Store)
	rt.metrics = append(rt.metrics, func(reg *prometheus.Registry) { reg.MustRegister(retentionCollector{r: r, fs: fs}) })
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Run(runCtx)
	}()
	return func(context.Context) error {
		cancel()
		wg.Wait()
		return nil
	}, nil
}

// openChangesInUse names the revisions the open change requests rest on,
// read from the store whether or not this server serves the control API:
// a change proposed through another replica holds its base here too.
func openChangesInUse(engine *varplane.Engine, log *slog.Logger) retention.InUse {
	svc := control.New(engine, control.NewGuard(), control.Options{Logger: log})
	return svc.RevisionsInUse
}

// retentionCollector exports a Runner's metrics, and the log's size for a
// file store.
type retentionCollector struct {
	r  *retention.Runner
	fs *file.Store
}

var (
	descReclaimed = prometheus.NewDesc("varplane_retention_revisions_reclaimed_total", "Revision bodies reclaimed by retention passes.", nil, nil)
	descFailed    = prometheus.NewDesc("varplane_retention_deletions_failed_total", "Revision body deletions that failed (retried by the next pass).", nil, nil)
	descLastPass  = prometheus.NewDesc("varplane_retention_last_pass_timestamp_seconds", "When the last reclamation pass started (0: none yet).", nil, nil)
	descDuration  = prometheus.NewDesc("varplane_retention_last_pass_duration_seconds", "How long the last reclamation pass took.", nil, nil)
	descLogSize   = prometheus.NewDesc("varplane_file_log_bytes", "Size of the file store's log.", nil, nil)
	descBodies    = prometheus.NewDesc("varplane_file_bodies_resident", "Revision documents the file store holds in memory (heads, and revisions committed since the last compaction); the others are read from the log on use.", nil, nil)
	descBodyBytes = prometheus.NewDesc("varplane_file_bodies_resident_bytes", "Bytes of the revision documents the file store holds in memory.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c retentionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReclaimed, descFailed, descLastPass, descDuration, descLogSize, descBodies, descBodyBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c retentionCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.r.Metrics()
	var last float64
	if !m.LastPass.IsZero() {
		last = float64(m.LastPass.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(descReclaimed, prometheus.CounterValue, float64(m.Reclaimed))
	ch <- prometheus.MustNewConstMetric(descFailed, prometheus.CounterValue, float64(m.DeletionsFailed))
	ch <- prometheus.MustNewConstMetric(descLastPass, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(descDuration, prometheus.GaugeValue, m.LastDuration.Seconds())
	if c.fs != nil {
		if n, err := c.fs.LogSize(); err == nil {
			ch <- prometheus.MustNewConstMetric(descLogSize, prometheus.GaugeValue, float64(n))
		}
		b := c.fs.Bodies()
		ch <- prometheus.MustNewConstMetric(descBodies, prometheus.GaugeValue, float64(b.Resident))
		ch <- prometheus.MustNewConstMetric(descBodyBytes, prometheus.GaugeValue, float64(b.ResidentBytes))
	}
}
