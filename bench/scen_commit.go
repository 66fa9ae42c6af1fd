package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// rawFsyncSide appends a 1 KiB record and fdatasyncs, in one loop: the rate
// at which this disk acknowledges durable appends one at a time. With
// prealloc the records go into space allocated and written with zeros
// ahead, as the file store's log does (fallocate, then zeros a little ahead
// of the commits), which spares each fdatasync growing the file and
// converting unwritten blocks; here the zeros are written before the timed
// loop, so that the figure is the disk's alone.
func rawFsyncSide(cfg *config, name string, prealloc bool) side {
	return side{name: name, run: func(ctx context.Context) (Stats, error) {
		path := filepath.Join(cfg.tmp, name+".log")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return Stats{}, err
		}
		defer os.Remove(path)
		defer f.Close()
		rec := append(makeDoc(cfg.docSize-1, "raw", 0), '\n')
		var off int64
		zf := &zeroedFile{f: f}
		if prealloc {
			if err := zf.ensure(0); err != nil {
				return Stats{}, err
			}
		}
		return closedLoop(ctx, 1, cfg.warm, cfg.commitDur, func(int) (bool, error) {
			if prealloc {
				if err := zf.ensure(off + int64(len(rec))); err != nil {
					return false, err
				}
			}
			if _, err := f.WriteAt(rec, off); err != nil {
				return false, err
			}
			off += int64(len(rec))
			return true, unix.Fdatasync(int(f.Fd()))
		}), nil
	}}
}

func scenarioCommit(ctx context.Context, cfg *config, e *env, rep *Report) {
	vp, vpErr := e.startVarplane(ctx, "commit", "file:"+filepath.Join(cfg.tmp, "commit.jsonl"))
	if vpErr == nil {
		defer vp.stop()
	}
	et, etErr := startEtcd(ctx, cfg, "commit")
	var ecli []*clientv3.Client
	if etErr == nil {
		defer et.stop()
		ecli, etErr = et.clients(64)
		if etErr == nil {
			defer closeClients(ecli)
		}
	}
	dc, dcAddr, dcErr := startDurableCeiling(ctx, cfg, false)
	if dcErr == nil {
		defer dc.stop()
	}
	dz, dzAddr, dzErr := startDurableCeiling(ctx, cfg, true)
	if dzErr == nil {
		defer dz.stop()
	}
	dt, dtAddr, dtErr := startTCPFloor(ctx, cfg)
	if dtErr == nil {
		defer dt.stop()
	}
	vt, vtErr := startTCPVarplane(ctx, cfg)
	if vtErr == nil {
		defer vt.p.stop()
	}
	for _, writers := range []int{1, 64} {
		peers := []string{"etcd-cas", "raw-fdatasync", "raw-fdatasync-prealloc"}
		if writers == 1 {
			peers = append(peers, "http-fdatasync", "http-fdatasync-prealloc", "tcp-fdatasync-prealloc")
		}
		g := newGroup(fmt.Sprintf("commit.%d", writers), "commit",
			fmt.Sprintf("durable commit, %d concurrent writer(s) on distinct scopes/keys, 1 KiB documents", writers),
			"commits/s", peers...)
		rep.Groups = append(rep.Groups, g)
		g.Notes = append(g.Notes,
			"varplane-publish: one commit = POST admin/publish with expectedGeneration, a new document stored and activated in one request, one write and one fdatasync (the real server, file store, fsync before the answer); one keep-alive connection per writer, through the harness's minimal HTTP/1.1 client (as the reads)",
			"varplane-create+activate: one commit = POST admin/revisions + POST admin/activate with expectedGeneration, on the same server: two requests, two fsync-bound rounds",
			"events_per_fsync: log events made durable per fdatasync during the side's run (the server's varplane_store_fsynced_events_total / varplane_store_fsyncs_total); a publish of a new document is two events",
			"etcd-cas: one commit = Txn(If ModRevision(key) == last seen, Then Put 1 KiB); one clientv3 client per writer",
			"raw-fdatasync: one loop appending 1 KiB + fdatasync to a file in the same temp directory: the disk's rate for one durable append at a time (a store that batches fsyncs across writers can exceed it)",
			"raw-fdatasync-prealloc: the same loop writing into space allocated and written with zeros ahead (before the timed loop), as the file store's log does: each fdatasync overwrites written blocks instead of growing the file or converting allocated ones")
		if writers == 1 {
			g.Notes = append(g.Notes,
				"http-fdatasync (one writer only): the publish request, on the same client, to a plain net/http handler in its own process that appends the body and fdatasyncs it before a fixed answer: the floor of a durable commit over HTTP on this machine, none of varplane's work in it",
				"http-fdatasync-prealloc (one writer only): the same handler writing into space allocated and zeroed ahead, as the file store does: the floor of varplane's way of writing over HTTP; varplane-publish against it is what varplane's own work costs a lone writer",
				"tcp-fdatasync-prealloc (one writer only): the same writes and answer behind a hand-written HTTP/1.1 responder instead of net/http (a measuring instrument: Content-Length bodies only), where the goroutine that reads a request answers it and no other takes part; http-fdatasync-prealloc against it is what net/http's way of serving a request costs a lone writer on this machine",
				"varplane-publish-tcp (one writer only): the same publish, answered by varplane's library (file store, engine, httpapi handler) behind that hand-written loop, requests parsed by net/http's parser but no net/http server: what a lone writer's publish would reach behind a server that wakes no other thread per request (a measurement, not a way varplane is served)",
				"server_cores, server_cpu_us_per_op: CPU of the server process during the side's run, and per commit; server_ctxsw_per_op: context switches of its threads per commit (a thread that waited and was woken; waking one on this virtual machine costs tens of microseconds)")
		}
		var sides []side
		if vpErr != nil {
			g.skip("varplane-publish", vpErr.Error())
			g.skip("varplane-create+activate", vpErr.Error())
		} else {
			sides = append(sides,
				vpPublishSide(cfg, "varplane-publish", vp, writers, fmt.Sprintf("bench.p%d", writers)),
				fsyncBatches(vp, vpCommitSide(cfg, "varplane-create+activate", vp, writers, fmt.Sprintf("bench.c%d", writers))))
		}
		if etErr != nil {
			g.skip("etcd-cas", etErr.Error())
		} else {
			sides = append(sides, etcdCommitSide(cfg, "etcd-cas", et, ecli, writers, fmt.Sprintf("/bench/c%d", writers)))
		}
		sides = append(sides, rawFsyncSide(cfg, "raw-fdatasync", false), rawFsyncSide(cfg, "raw-fdatasync-prealloc", true))
		if writers == 1 {
			if dcErr != nil {
				g.skip("http-fdatasync", dcErr.Error())
			} else {
				sides = append(sides, durableCeilingSide(cfg, "http-fdatasync", dc, dcAddr))
			}
			if dzErr != nil {
				g.skip("http-fdatasync-prealloc", dzErr.Error())
			} else {
				sides = append(sides, durableCeilingSide(cfg, "http-fdatasync-prealloc", dz, dzAddr))
			}
			if dtErr != nil {
				g.skip("tcp-fdatasync-prealloc", dtErr.Error())
			} else {
				sides = append(sides, durableCeilingSide(cfg, "tcp-fdatasync-prealloc", dt, dtAddr))
			}
			if vtErr != nil {
				g.skip("varplane-publish-tcp", vtErr.Error())
			} else {
				sides = append(sides, vpPublishSide(cfg, "varplane-publish-tcp", vt, writers, "bench.t1"))
			}
		}
		runRounds(ctx, cfg, g, cfg.rounds, sides)
	}
}

func scenarioContended(ctx context.Context, cfg *config, e *env, rep *Report) {
	const writers = 64
	g := newGroup("contended", "contended",
		"contended commit: 64 writers racing on one scope/key; throughput counts successful commits", "commits/s", "etcd-cas")
	rep.Groups = append(rep.Groups, g)
	g.Notes = append(g.Notes,
		"varplane: a writer creates its revision once, then retries activate with the currentGeneration from each 409 until it wins; latency is create → winning activate",
		"varplane-publish: a writer retries POST admin/publish of its document with the currentGeneration from each 409 until it wins (a lost publish stores nothing); latency is first attempt → winning publish",
		"etcd-cas: Txn(If ModRevision == seen, Then Put, Else Get) retried with the ModRevision from the Else branch until it wins",
		"conflict_rate: lost attempts / all attempts")
	var sides []side

	vp, err := e.startVarplane(ctx, "contended", "file:"+filepath.Join(cfg.tmp, "contended.jsonl"))
	var vs side
	if err == nil {
		defer vp.stop()
		vs, err = vpContendedSide(ctx, cfg, vp)
	}
	if err != nil {
		g.skip("varplane", err.Error())
		g.skip("varplane-publish", err.Error())
	} else {
		sides = append(sides, vs, vpContendedPublishSide(cfg, vp))
	}

	et, err := startEtcd(ctx, cfg, "contended")
	var ecli []*clientv3.Client
	if err == nil {
		defer et.stop()
		ecli, err = et.clients(writers)
	}
	if err != nil {
		g.skip("etcd-cas", err.Error())
	} else {
		defer closeClients(ecli)
		loops := make([]*casLoop, writers)
		for i := range loops {
			loops[i] = &casLoop{cli: ecli[i], key: "/bench/hot"}
		}
		counter := make([]int, writers)
		sides = append(sides, side{name: "etcd-cas", run: func(ctx context.Context) (Stats, error) {
			var conflicts, wins atomic.Int64
			s := withCPU(et.p.pid(), func() Stats {
				return closedLoop(ctx, writers, cfg.warm, cfg.commitDur, func(w int) (bool, error) {
					counter[w]++
					val := string(makeDoc(cfg.docSize, fmt.Sprint("hot", w), counter[w]))
					for ctx.Err() == nil {
						ok, err := loops[w].attempt(ctx, val)
						if err != nil {
							return false, err
						}
						if ok {
							wins.Add(1)
							return true, nil
						}
						conflicts.Add(1)
					}
					return false, ctx.Err()
				})
			})
			s.Extra["conflict_rate"] = rate(conflicts.Load(), wins.Load())
			return s, nil
		}})
	}
	runRounds(ctx, cfg, g, cfg.rounds, sides)
}

func rate(lost, won int64) float64 {
	if lost+won == 0 {
		return 0
	}
	return float64(lost) / float64(lost+won)
}

// vpCommitSide commits on writers keep-alive connections, each writer on its
// own scope prefix.wN: create + activate with the generation it last saw.
func vpCommitSide(cfg *config, name string, vp *vpServer, writers int, prefix string) side {
	admins := make([]*admin, writers)
	gens := make([]uint64, writers)
	counter := make([]int, writers)
	for i := range admins {
		admins[i] = newAdmin(vp.base)
	}
	return side{name: name, run: func(ctx context.Context) (Stats, error) {
		return withCPU(vp.p.pid(), func() Stats {
			return closedLoop(ctx, writers, cfg.warm, cfg.commitDur, func(w int) (bool, error) {
				counter[w]++
				scope := fmt.Sprintf("%s.w%d", prefix, w)
				gen, err := admins[w].commit(ctx, scope, makeDoc(cfg.docSize, scope, counter[w]), gens[w])
				if err != nil {
					return false, err
				}
				gens[w] = gen
				return true, nil
			})
		}), nil
	}}
}

// etcdCommitSide is the etcd peer of vpCommitSide: a Txn CAS on ModRevision
// per commit, each writer on its own key prefix/wN.
func etcdCommitSide(cfg *config, name string, et *etcdInst, ecli []*clientv3.Client, writers int, prefix string) side {
	loops := make([]*casLoop, writers)
	for i := range loops {
		loops[i] = &casLoop{cli: ecli[i%len(ecli)], key: fmt.Sprintf("%s/w%d", prefix, i)}
	}
	counter := make([]int, writers)
	return side{name: name, run: func(ctx context.Context) (Stats, error) {
		return withCPU(et.p.pid(), func() Stats {
			return closedLoop(ctx, writers, cfg.warm, cfg.commitDur, func(w int) (bool, error) {
				counter[w]++
				return loops[w].attempt(ctx, string(makeDoc(cfg.docSize, loops[w].key, counter[w])))
			})
		}), nil
	}}
}

// durableCeilingSide posts the publish body of one writer to the durable
// ceiling (durableCeilingMain) on the harness's minimal client.
func durableCeilingSide(cfg *config, name string, dc *proc, addr string) side {
	a := newAdmin("http://" + addr + "/vars")
	n := 0
	return side{name: name, run: func(ctx context.Context) (Stats, error) {
		return withCPU(dc.pid(), func() Stats {
			return closedLoop(ctx, 1, cfg.warm, cfg.commitDur, func(int) (bool, error) {
				n++
				doc := makeDoc(cfg.docSize, "bench.ceiling", n)
				body := make([]byte, 0, len(doc)+80)
				body = append(body, `{"scope":"bench.ceiling","expectedGeneration":`...)
				body = strconv.AppendInt(body, int64(n-1), 10)
				body = append(append(append(body, `,"document":`...), doc...), '}')
				if err := a.post(ctx, "/admin/publish", body, nil); err != nil {
					return false, err
				}
				return true, nil
			})
		}), nil
	}}
}

// vpContendedSide activates bench.hot once, then races 64 writers on it:
// each creates its revision, then retries activate with the generation from
// each 409 until it wins.
func vpContendedSide(ctx context.Context, cfg *config, vp *vpServer) (side, error) {
	const writers = 64
	a := newAdmin(vp.base)
	_, err := a.commit(ctx, "bench.hot", makeDoc(cfg.docSize, "hot", -1), 0)
	a.close()
	if err != nil {
		return side{}, err
	}
	admins := make([]*admin, writers)
	for i := range admins {
		admins[i] = newAdmin(vp.base)
	}
	gens := make([]uint64, writers)
	for i := range gens {
		gens[i] = 1
	}
	counter := make([]int, writers)
	return side{name: "varplane", run: func(ctx context.Context) (Stats, error) {
		var conflicts, wins atomic.Int64
		s := withCPU(vp.p.pid(), func() Stats {
			return closedLoop(ctx, writers, cfg.warm, cfg.commitDur, func(w int) (bool, error) {
				counter[w]++
				rev, err := admins[w].create(ctx, "bench.hot", makeDoc(cfg.docSize, fmt.Sprint("hot", w), counter[w]))
				if err != nil {
					return false, err
				}
				for ctx.Err() == nil {
					gen, conflict, err := admins[w].activate(ctx, "bench.hot", rev, gens[w])
					if err != nil {
						return false, err
					}
					gens[w] = gen
					if !conflict {
						wins.Add(1)
						return true, nil
					}
					conflicts.Add(1)
				}
				return false, ctx.Err()
			})
		})
		s.Extra["conflict_rate"] = rate(conflicts.Load(), wins.Load())
		return s, nil
	}}, nil
}

// publish stores doc (or finds it stored) and activates it at expected+1 in
// one request, POST admin/publish. On a conflict it returns conflict=true
// and the current generation.
func (a *admin) publish(ctx context.Context, scope string, doc []byte, expected uint64) (gen uint64, conflict bool, err error) {
	body := make([]byte, 0, len(doc)+len(scope)+64)
	body = append(body, `{"scope":"`...)
	body = append(body, scope...)
	body = append(body, `","expectedGeneration":`...)
	body = strconv.AppendUint(body, expected, 10)
	body = append(body, `,"document":`...)
	body = append(body, doc...)
	body = append(body, '}')
	var out struct {
		Generation uint64 `json:"generation"`
	}
	err = a.post(ctx, "/admin/publish", body, &out)
	if ae, ok := err.(*apiError); ok && ae.Status == http.StatusConflict {
		if ae.CurrentGeneration != nil {
			return *ae.CurrentGeneration, true, nil
		}
		return 0, true, fmt.Errorf("409 without currentGeneration")
	}
	if err != nil {
		return 0, false, fmt.Errorf("publish %s: %w", scope, err)
	}
	return out.Generation, false, nil
}

// vpPublishSide is vpCommitSide with one request per commit: each writer
// publishes a new document on its own scope prefix.wN with the generation
// it last saw.
func vpPublishSide(cfg *config, name string, vp *vpServer, writers int, prefix string) side {
	admins := make([]*admin, writers)
	gens := make([]uint64, writers)
	counter := make([]int, writers)
	for i := range admins {
		admins[i] = newAdmin(vp.base)
	}
	return fsyncBatches(vp, side{name: name, run: func(ctx context.Context) (Stats, error) {
		return withCPU(vp.p.pid(), func() Stats {
			return closedLoop(ctx, writers, cfg.warm, cfg.commitDur, func(w int) (bool, error) {
				counter[w]++
				scope := fmt.Sprintf("%s.w%d", prefix, w)
				gen, conflict, err := admins[w].publish(ctx, scope, makeDoc(cfg.docSize, scope, counter[w]), gens[w])
				if err == nil && conflict {
					err = fmt.Errorf("unexpected conflict on %s: current %d, expected %d", scope, gen, gens[w])
				}
				if err != nil {
					return false, err
				}
				gens[w] = gen
				return true, nil
			})
		}), nil
	}})
}

// vpContendedPublishSide races 64 writers publishing on bench.hotp: each
// retries its publish with the generation from each 409 until it wins.
func vpContendedPublishSide(cfg *config, vp *vpServer) side {
	const writers = 64
	admins := make([]*admin, writers)
	for i := range admins {
		admins[i] = newAdmin(vp.base)
	}
	gens := make([]uint64, writers)
	counter := make([]int, writers)
	return side{name: "varplane-publish", run: func(ctx context.Context) (Stats, error) {
		var conflicts, wins atomic.Int64
		s := withCPU(vp.p.pid(), func() Stats {
			return closedLoop(ctx, writers, cfg.warm, cfg.commitDur, func(w int) (bool, error) {
				counter[w]++
				doc := makeDoc(cfg.docSize, fmt.Sprint("hotp", w), counter[w])
				for ctx.Err() == nil {
					gen, conflict, err := admins[w].publish(ctx, "bench.hotp", doc, gens[w])
					if err != nil {
						return false, err
					}
					gens[w] = gen
					if !conflict {
						wins.Add(1)
						return true, nil
					}
					conflicts.Add(1)
				}
				return false, ctx.Err()
			})
		})
		s.Extra["conflict_rate"] = rate(conflicts.Load(), wins.Load())
		return s, nil
	}}
}

// fsyncBatches adds events_per_fsync to a side's figures: the log events the
// server's store made durable per fdatasync while the side ran, from its
// /metrics counters before and after. A server without them (another store)
// reports nothing.
func fsyncBatches(vp *vpServer, s side) side {
	inner := s.run
	s.run = func(ctx context.Context) (Stats, error) {
		f0, e0, err0 := fsyncCounters(ctx, vp)
		st, err := inner(ctx)
		if err != nil || err0 != nil {
			return st, err
		}
		f1, e1, err1 := fsyncCounters(ctx, vp)
		if err1 == nil && f1 > f0 {
			if st.Extra == nil {
				st.Extra = map[string]float64{}
			}
			st.Extra["events_per_fsync"] = (e1 - e0) / (f1 - f0)
		}
		return st, nil
	}
	return s
}

// fsyncCounters reads varplane_store_fsyncs_total and
// varplane_store_fsynced_events_total from the server's /metrics.
func fsyncCounters(ctx context.Context, vp *vpServer) (fsyncs, events float64, err error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+vp.addr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "varplane_store_fsyncs_total":
			dst = &fsyncs
		case "varplane_store_fsynced_events_total":
			dst = &events
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(strings.TrimSpace(val), 64); err != nil {
			return 0, 0, err
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("the server's /metrics has no fsync counters")
	}
	return fsyncs, events, nil
}
