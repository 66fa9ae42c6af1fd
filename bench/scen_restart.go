package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/file"
)

// writeLog writes a file-store log of events lines over scopes scopes: each
// scope in turn gets a revision-created event (a distinct 1 KiB document)
// followed by its activation at the next generation, the two written as a
// publish writes them, each line linked into its scope's chain
// (file.LogWriter: log format 3, what the store writes).
func writeLog(path string, events, scopes, docSize int) (varplane.Scope, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	lw := file.NewLogWriter(w)
	gens := make([]varplane.Generation, scopes)
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var first varplane.Scope
	for i := 0; i+1 < events+1; i += 2 {
		k := (i / 2) % scopes
		scope := varplane.Scope(fmt.Sprintf("bench.restart.s%d", k))
		if i == 0 {
			first = scope
		}
		doc := makeDoc(docSize, string(scope), i)
		digest := canonical.DigestCanonical(doc) // makeDoc output is canonical
		ts = ts.Add(time.Millisecond)
		created := varplane.Event{Kind: varplane.EventRevisionCreated, Scope: scope, Revision: varplane.Revision(digest),
			Document: doc, Actor: "bench", Timestamp: ts}
		if i+1 >= events {
			if err := lw.Write(&created); err != nil {
				return "", err
			}
			break
		}
		prev := gens[k]
		gens[k]++
		act := varplane.Event{Kind: varplane.EventActivated, Scope: scope, Revision: created.Revision,
			Generation: gens[k], PreviousGeneration: varplane.GenerationPtr(prev), Actor: "bench", Timestamp: ts}
		if err := lw.WritePublish(&created, &act); err != nil {
			return "", err
		}
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return first, f.Close()
}

func scenarioRestart(ctx context.Context, cfg *config, e *env, rep *Report) {
	for _, n := range cfg.restartSizes {
		if ctx.Err() != nil {
			return
		}
		g := newGroup(fmt.Sprintf("restart.%d", n), "restart",
			fmt.Sprintf("restart: replay a whole log of %d events (1,000 scopes, revision-created + activated pairs, 1 KiB documents), no checkpoint beside it", n),
			"events/s")
		rep.Groups = append(rep.Groups, g)
		g.Notes = append(g.Notes,
			"varplane-lib: file.Open on the log in the harness process (the library embedded, CheckpointEvery -1: no checkpoint read or written); latency columns are the recovery time; every chain link is checked",
			"varplane-serve: exec of varplane serve on the log until its first 200 read (includes process start), its checkpoint removed before each run",
			"the log was just written, so it is read from the page cache")
		path := filepath.Join(cfg.tmp, fmt.Sprintf("restart-%d.jsonl", n))
		t0 := time.Now()
		probe, err := writeLog(path, n, 1000, cfg.docSize)
		if err != nil {
			g.skip("varplane-lib", err.Error())
			continue
		}
		st, _ := os.Stat(path)
		g.Notes = append(g.Notes, fmt.Sprintf("log: %.1f MiB, generated in %.1fs", float64(st.Size())/(1<<20), time.Since(t0).Seconds()))
		sides := []side{{name: "varplane-lib", run: func(ctx context.Context) (Stats, error) {
			runtime.GC()
			c0, t0 := cpuTimes(os.Getpid()), time.Now()
			s, err := file.Open(ctx, path, file.Options{CheckpointEvery: -1})
			d, cpu := time.Since(t0), cpuTimes(os.Getpid())-c0
			if err != nil {
				return Stats{}, err
			}
			if err := s.Close(); err != nil {
				return Stats{}, err
			}
			st := onceStats(n, d)
			if cpu > 0 {
				// CPU seconds are counted in 10 ms ticks: a rough figure that
				// other processes on the machine disturb less.
				st.Extra = map[string]float64{"events_per_cpu_s": float64(n) / cpu}
			}
			return st, nil
		}}}
		if _, err := e.varplaneBin(); err != nil {
			g.skip("varplane-serve", err.Error())
		} else {
			sides = append(sides, side{name: "varplane-serve", run: func(ctx context.Context) (Stats, error) {
				_ = os.Remove(path + ".checkpoint")
				t0 := time.Now()
				vp, err := e.startVarplane(ctx, fmt.Sprintf("restart-%d", n), "file:"+path)
				if err != nil {
					return Stats{}, err
				}
				defer vp.stop()
				if err := vp.waitStatus(ctx, "?key="+string(probe), 200, 120*time.Second); err != nil {
					return Stats{}, err
				}
				return onceStats(n, time.Since(t0)), nil
			}})
		}
		runRounds(ctx, cfg, g, cfg.rounds, sides)
		scenarioCheckpoint(ctx, cfg, e, rep, path, probe, n)
		for _, suffix := range []string{"", ".lock", ".checkpoint"} {
			os.Remove(path + suffix)
		}
	}
	if !cfg.noRSS {
		scenarioRSS(ctx, cfg, e, rep)
	}
}

// scenarioCheckpoint restarts from the log at path with the checkpoint
// written beside it (the log itself is not rewritten): first with every
// revision kept, then after the retention pass with the default policy
// (the log's documents are dated 2026-01-01, older than its 7 days, so 50
// per scope stay, the others' documents left out of the log by the
// compaction that follows the pass).
func scenarioCheckpoint(ctx context.Context, cfg *config, e *env, rep *Report, path string, probe varplane.Scope, n int) {
	for _, mode := range []struct{ name, desc string }{
		{"keep-all", "every revision kept"},
		{"reclaimed", "after the default retention pass (50 revisions a scope) and its compaction"},
	} {
		if ctx.Err() != nil {
			return
		}
		g := newGroup(fmt.Sprintf("restart.checkpoint.%s.%d", mode.name, n), "restart",
			fmt.Sprintf("restart from the checkpoint beside the log of %d events, %s", n, mode.desc), "events/s")
		rep.Groups = append(rep.Groups, g)
		t0 := time.Now()
		res, err := checkpointLog(ctx, path, mode.name == "reclaimed")
		if err != nil {
			g.skip("varplane-lib", err.Error())
			return
		}
		ck, _ := os.Stat(path + ".checkpoint")
		var ckSize int64
		if ck != nil {
			ckSize = ck.Size()
		}
		g.Notes = append(g.Notes,
			fmt.Sprintf("prepared in %.1fs (a full replay, %s, then Close writes the checkpoint): log %.1f MiB → %.1f MiB, %d revision bodies reclaimed, checkpoint %.1f MiB; the events/s column counts the %d events of the log", time.Since(t0).Seconds(),
				map[bool]string{true: "the pass and its compaction", false: "nothing reclaimed"}[mode.name == "reclaimed"],
				float64(res.Before)/(1<<20), float64(res.After)/(1<<20), res.Reclaimed, float64(ckSize)/(1<<20), n),
			"varplane-lib: file.Open until it returns (the checkpoint's scope lines, the digest of the log before it checked over both cores, the lines after it; each scope's revisions are read on first use, and the history and idempotency records before the checkpoint on a goroutine after); cpu_ms is the process's CPU time over the same span; history_ms is the time from the start of Open until a History of one scope returns (it waits for that goroutine)",
			"varplane-serve: exec of varplane serve on the log and its checkpoint until its first 200 read")
		sides := []side{{name: "varplane-lib", run: func(ctx context.Context) (Stats, error) {
			runtime.GC()
			c0, t0 := cpuTimes(os.Getpid()), time.Now()
			s, err := file.Open(ctx, path, file.Options{})
			d, cpu := time.Since(t0), cpuTimes(os.Getpid())-c0
			if err != nil {
				return Stats{}, err
			}
			if _, err := s.History(ctx, probe); err != nil {
				return Stats{}, err
			}
			hist := time.Since(t0)
			if err := s.Close(); err != nil {
				return Stats{}, err
			}
			st := onceStats(n, d)
			st.Extra = map[string]float64{"cpu_ms": cpu * 1000, "history_ms": float64(hist.Microseconds()) / 1000}
			return st, nil
		}}}
		if _, err := e.varplaneBin(); err == nil {
			sides = append(sides, side{name: "varplane-serve", run: func(ctx context.Context) (Stats, error) {
				t0 := time.Now()
				vp, err := e.startVarplane(ctx, fmt.Sprintf("restart-ckpt-%d", n), "file:"+path)
				if err != nil {
					return Stats{}, err
				}
				defer vp.stop()
				if err := vp.waitStatus(ctx, "?key="+string(probe), 200, 120*time.Second); err != nil {
					return Stats{}, err
				}
				return onceStats(n, time.Since(t0)), nil
			}})
		}
		runRounds(ctx, cfg, g, cfg.rounds, sides)
	}
}

// checkpointLog opens the log at path (a full replay when it has no
// checkpoint), runs a retention pass with the default policy and its
// compaction when reclaim is set, and closes it, which writes the
// checkpoint.
func checkpointLog(ctx context.Context, path string, reclaim bool) (file.CompactResult, error) {
	s, err := file.Open(ctx, path, file.Options{})
	if err != nil {
		return file.CompactResult{}, err
	}
	defer s.Close()
	var revs map[varplane.Scope][]varplane.Revision
	if reclaim {
		scopes, err := s.Scopes(ctx)
		if err != nil {
			return file.CompactResult{}, err
		}
		revs = map[varplane.Scope][]varplane.Revision{}
		for _, sc := range scopes {
			st, err := s.State(ctx, sc)
			if err != nil {
				return file.CompactResult{}, err
			}
			hist, err := s.EventHistory(ctx, sc) // the policy needs no documents
			if err != nil {
				return file.CompactResult{}, err
			}
			var head varplane.Revision
			if st.Head != nil {
				head = st.Head.Revision
			}
			revs[sc] = retention.Select(retention.DefaultPolicy(), time.Now(), hist, head, nil)
		}
	}
	res, err := s.Compact(ctx, revs)
	if err != nil {
		return res, err
	}
	return res, s.Close()
}

func onceStats(n int, d time.Duration) Stats {
	return Stats{Ops: n, Seconds: d.Seconds(), Throughput: float64(n) / d.Seconds(), P50: ms(d), P99: ms(d), Max: ms(d)}
}

// scenarioRSS compares the resident memory of varplane serve and of etcd,
// each just restarted on 10^5 scopes/keys of 1 KiB.
func scenarioRSS(ctx context.Context, cfg *config, e *env, rep *Report) {
	n := cfg.rssScopes
	g := newGroup("rss", "restart", fmt.Sprintf("resident memory after a restart with %d scopes (etcd: keys) of 1 KiB, each activated once", n), "MiB RSS", "etcd")
	rep.Groups = append(rep.Groups, g)
	g.Notes = append(g.Notes,
		"the first column is VmRSS of the server process (/proc/PID/status) 1 s after its first served read; latency columns are the time from exec to that read; lower is better for both, so a ratio below 1 favours varplane",
		"etcd holds the same documents as values of 100,000 keys, loaded with Txn batches of 100 puts, then restarted on its data dir")
	var sides []side
	path := filepath.Join(cfg.tmp, "rss.jsonl")
	probe, err := writeLog(path, 2*n, n, cfg.docSize)
	if err != nil {
		g.skip("varplane", err.Error())
	} else if _, err := e.varplaneBin(); err != nil {
		g.skip("varplane", err.Error())
	} else {
		defer os.Remove(path)
		sides = append(sides, side{name: "varplane", run: func(ctx context.Context) (Stats, error) {
			t0 := time.Now()
			vp, err := e.startVarplane(ctx, "rss", "file:"+path)
			if err != nil {
				return Stats{}, err
			}
			defer vp.stop()
			if err := vp.waitStatus(ctx, "?key="+string(probe), 200, 120*time.Second); err != nil {
				return Stats{}, err
			}
			d := time.Since(t0)
			time.Sleep(time.Second)
			return rssStats(vp.p.pid(), d), nil
		}})
	}
	et, err := startEtcd(ctx, cfg, "rss")
	if err == nil {
		defer et.stop()
		err = loadEtcd(ctx, et, n, cfg.docSize)
	}
	if err != nil {
		g.skip("etcd", err.Error())
	} else {
		sides = append(sides, side{name: "etcd", run: func(ctx context.Context) (Stats, error) {
			d, err := et.restart(ctx)
			if err != nil {
				return Stats{}, err
			}
			time.Sleep(time.Second)
			return rssStats(et.p.pid(), d), nil
		}})
	}
	runRounds(ctx, cfg, g, cfg.rssRounds, sides)
}

func rssStats(pid int, ready time.Duration) Stats {
	mib := float64(rssKiB(pid)) / 1024
	return Stats{Ops: 1, Seconds: ready.Seconds(), Throughput: mib, P50: ms(ready), P99: ms(ready), Max: ms(ready)}
}

func loadEtcd(ctx context.Context, et *etcdInst, n, docSize int) error {
	cli, err := et.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	const batch = 100
	for i := 0; i < n; i += batch {
		ops := make([]clientv3.Op, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			key := fmt.Sprintf("/bench/rss/s%d", j)
			ops = append(ops, clientv3.OpPut(key, string(makeDoc(docSize, key, j))))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("load etcd: %w", err)
		}
	}
	return nil
}
