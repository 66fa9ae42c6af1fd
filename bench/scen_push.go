package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// delivery is one commit as one subscriber saw it.
type delivery struct {
	seq int // index of the commit in the run
	at  time.Time
}

// subscriberSet is the receiving half of one push run: subscribers record
// deliveries locally; latencies are computed after the run against the
// commit start times, so no lock is taken on the receive path.
type subscriberSet struct {
	recv  [][]delivery
	ready sync.WaitGroup
	wg    sync.WaitGroup
	errs  atomic.Int64
	first atomic.Value
	last  []atomic.Int64 // per subscriber: highest seq seen
}

func newSubscriberSet(n int) *subscriberSet {
	s := &subscriberSet{recv: make([][]delivery, n), last: make([]atomic.Int64, n)}
	for i := range s.last {
		s.last[i].Store(-1)
	}
	s.ready.Add(n)
	return s
}

func (s *subscriberSet) fail(err error) {
	s.errs.Add(1)
	s.first.CompareAndSwap(nil, err.Error())
}

// pushRun drives one run: commit(i) is called for i in [0, commits) spaced by
// spacing, startOf[i] set just before it; then it waits for every subscriber
// to see the last commit (or 3 s) and computes commit → delivery latency over
// every delivery.
func pushRun(ctx context.Context, cfg *config, subs *subscriberSet, cancel func(), prepare func(i int) error, commit func(i int) error) (Stats, error) {
	n := len(subs.recv)
	readyCh := make(chan struct{})
	go func() { subs.ready.Wait(); close(readyCh) }()
	t0 := time.Now()
	select {
	case <-readyCh:
	case <-time.After(60 * time.Second):
		cancel()
		subs.wg.Wait()
		return Stats{}, fmt.Errorf("subscribers not ready after 60s (%d errors: %v)", subs.errs.Load(), subs.first.Load())
	case <-ctx.Done():
		cancel()
		subs.wg.Wait()
		return Stats{}, ctx.Err()
	}
	setup := time.Since(t0)
	time.Sleep(300 * time.Millisecond) // let connection setup settle
	commits := cfg.pushCommits
	startOf := make([]time.Time, commits)
	tick := time.Now()
	var cerr error
	var commitLat []time.Duration
	for i := 0; i < commits && ctx.Err() == nil; i++ {
		if err := prepare(i); err != nil {
			cerr = err
			break
		}
		tick = tick.Add(cfg.pushSpacing)
		time.Sleep(time.Until(tick))
		startOf[i] = time.Now()
		if err := commit(i); err != nil {
			cerr = err
			break
		}
		commitLat = append(commitLat, time.Since(startOf[i]))
	}
	// wait for the last commit to reach everyone
	lastSeq := int64(commits - 1)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		all := true
		for i := range subs.last {
			if subs.last[i].Load() < lastSeq {
				all = false
				break
			}
		}
		if all {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	subs.wg.Wait()
	if cerr != nil {
		return Stats{}, fmt.Errorf("commit: %w", cerr)
	}
	var lat []time.Duration
	var firstAt, lastAt time.Time
	for _, ds := range subs.recv {
		for _, d := range ds {
			if d.seq < 0 || d.seq >= commits || startOf[d.seq].IsZero() {
				continue
			}
			lat = append(lat, d.at.Sub(startOf[d.seq]))
			if firstAt.IsZero() || d.at.Before(firstAt) {
				firstAt = d.at
			}
			if d.at.After(lastAt) {
				lastAt = d.at
			}
		}
	}
	st := Stats{Ops: len(lat), Errors: int(subs.errs.Load())}
	if v := subs.first.Load(); v != nil {
		st.FirstError = v.(string)
	}
	st.Seconds = lastAt.Sub(startOf[0]).Seconds()
	if st.Seconds > 0 {
		st.Throughput = float64(len(lat)) / st.Seconds
	}
	summarize(&st, lat)
	expected := float64(n * commits)
	st.Extra = map[string]float64{
		"delivered_fraction": float64(len(lat)) / expected,
		"setup_s":            setup.Seconds(),
	}
	if len(commitLat) > 0 {
		var cs Stats
		summarize(&cs, commitLat)
		st.Extra["commit_p50_ms"] = cs.P50
	}
	return st, nil
}

func scenarioPush(ctx context.Context, cfg *config, e *env, rep *Report) {
	g := newGroup("push", "push",
		fmt.Sprintf("push: %d subscribers on one scope/key, %d commits spaced %v; latency from the start of each commit to each delivery", cfg.pushSubs, cfg.pushCommits, cfg.pushSpacing),
		"deliveries/s", "etcd-watch")
	rep.Groups = append(rep.Groups, g)
	g.Notes = append(g.Notes,
		"varplane-sse: one HTTP/1.1 connection per subscriber (GET {base}/watch?key=); varplane-grpc: Subscribe streams multiplexed 100 per HTTP/2 connection on 10 connections (stock grpc-go client, the gRPC stack clientv3 uses for the etcd side)",
		fmt.Sprintf("etcd-watch: %d watchers on one key multiplexed on %d clientv3 clients (one gRPC connection each)", cfg.pushSubs, cfg.pushConns),
		"a commit is POST activate with expectedGeneration (the revision created beforehand, untimed) or an etcd Txn CAS Put; the subscribers run in the harness process, on the same clock",
		"throughput: deliveries per second from the first commit to the last delivery (bounded by the spacing, so latency is the figure to read)")
	subs, conns := cfg.pushSubs, cfg.pushConns

	var sides []side
	vp, err := e.startVarplane(ctx, "push", "file:"+filepath.Join(cfg.tmp, "push.jsonl"))
	var pu *vpPusher
	if err == nil {
		defer vp.stop()
		pu, err = newVPPusher(ctx, cfg, vp, "bench.push")
	}
	if err != nil {
		g.skip("varplane-sse", err.Error())
		g.skip("varplane-grpc", err.Error())
	} else {
		defer pu.a.close()
		sides = append(sides, side{name: "varplane-sse", run: func(ctx context.Context) (Stats, error) {
			sctx, cancel := context.WithCancel(ctx)
			set := newSubscriberSet(subs)
			seqBase.Store(int64(pu.gen))
			startSSE(sctx, vp.base+"/watch?key=bench.push", set)
			return pu.run(ctx, set, cancel)
		}})
		if vp.rpcAddr != "" {
			sides = append(sides, side{name: "varplane-grpc", run: func(ctx context.Context) (Stats, error) {
				sctx, cancel := context.WithCancel(ctx)
				set := newSubscriberSet(subs)
				seqBase.Store(int64(pu.gen))
				startGRPC(sctx, "http://"+vp.rpcAddr, conns, "bench.push", set)
				return pu.run(ctx, set, cancel)
			}})
			if vp.hasWatch {
				for _, share := range []bool{false, true} {
					name := "varplane-watch"
					if share {
						name += "-shared"
					}
					sides = append(sides, side{name: name, run: func(ctx context.Context) (Stats, error) {
						sctx, cancel := context.WithCancel(ctx)
						set := newSubscriberSet(subs)
						seqBase.Store(int64(pu.gen))
						startWatch(sctx, "http://"+vp.rpcAddr, conns, "bench.push", share, set)
						return pu.run(ctx, set, cancel)
					}})
				}
				g.Notes = append(g.Notes, "varplane-watch: the same subscribers as watches, one gRPC Watch stream per connection (10 streams, 100 watches each), as etcd's watchers share one stream per client; one response per watch per commit",
					"varplane-watch-shared: the same watches created with share_responses: one response per commit per stream naming its 100 watches (watch_ids); each watch counts as a delivery when the response is decoded")
			}
		} else if emb, _, err := startEmbedded(ctx, cfg, "push-grpc"); err != nil {
			g.skip("varplane-grpc", "varplane serve has no --rpc-addr, and the embedded server failed: "+err.Error())
		} else {
			// varplane serve cannot serve gRPC yet: measure the same library
			// (file store, engine, hub, rpc.PushService) embedded instead.
			defer emb.stop()
			gs, err := vpPushGRPCSide(ctx, cfg, emb, "bench.push")
			if err != nil {
				g.skip("varplane-grpc", err.Error())
			} else {
				gs.name = "varplane-grpc"
				sides = append(sides, gs)
				g.Notes = append(g.Notes, "varplane-grpc: varplane serve has no --rpc-addr yet, so this side runs the library embedded in a child process of the harness (file store, engine, push hub and rpc.PushService over h2c, wired as cmd/varplane wires them); its commits go through the same HTTP admin API of that process")
			}
		}
	}

	et, err := startEtcd(ctx, cfg, "push")
	var wcli []*clientv3.Client
	if err == nil {
		defer et.stop()
		wcli, err = et.clients(conns + 1)
	}
	if err != nil {
		g.skip("etcd-watch", err.Error())
	} else {
		defer closeClients(wcli)
		sides = append(sides, etcdWatchSide(cfg, wcli, "/bench/push"))
	}
	runRounds(ctx, cfg, g, cfg.rounds, sides)
	scenarioPushWide(ctx, cfg, e, rep)
}

// Wide fan-out: the push issue's 10,000 watches on 10 connections, on the
// two sides that multiplex watches on one stream per connection.
const (
	wideWatches = 10_000
	wideCommits = 50
)

// scenarioPushWide measures wideWatches watches on cfg.pushConns
// connections: varplane's Watch with shared responses against etcd's
// watchers, fewer commits than the push group (each one is 10,000
// deliveries).
func scenarioPushWide(ctx context.Context, cfg *config, e *env, rep *Report) {
	wc := *cfg
	wc.pushSubs, wc.pushCommits = wideWatches, wideCommits
	if cfg.quick {
		wc.pushCommits = 20
	}
	g := newGroup("push.10k", "push",
		fmt.Sprintf("push: %d watches on one scope/key over %d connections, %d commits spaced %v; latency from the start of each commit to each delivery", wc.pushSubs, wc.pushConns, wc.pushCommits, wc.pushSpacing),
		"deliveries/s", "etcd-watch")
	rep.Groups = append(rep.Groups, g)
	g.Notes = append(g.Notes,
		"varplane-watch-shared: one gRPC Watch stream per connection (1,000 watches each) created with share_responses; etcd-watch: the same watchers on clientv3 clients, one gRPC connection each",
		"the varplane server runs with --max-subscribers 20000 --max-subscribers-per-token 20000 (the defaults, 10,000 and a tenth of it per token, refuse a 10,000-watch load from one anonymous client)")
	var sides []side
	vp, err := e.startVarplane(ctx, "push-wide", "file:"+filepath.Join(cfg.tmp, "push-wide.jsonl"),
		"--max-subscribers", "20000", "--max-subscribers-per-token", "20000", "--max-subscribers-per-addr", "20000", "--max-subscribers-per-connection", "20000")
	var pu *vpPusher
	if err == nil {
		defer vp.stop()
		pu, err = newVPPusher(ctx, &wc, vp, "bench.wide")
	}
	switch {
	case err != nil:
		g.skip("varplane-watch-shared", err.Error())
	case vp.rpcAddr == "" || !vp.hasWatch:
		g.skip("varplane-watch-shared", "varplane serve offers no Watch RPC")
	default:
		defer pu.a.close()
		sides = append(sides, side{name: "varplane-watch-shared", run: func(ctx context.Context) (Stats, error) {
			sctx, cancel := context.WithCancel(ctx)
			set := newSubscriberSet(wc.pushSubs)
			seqBase.Store(int64(pu.gen))
			startWatch(sctx, "http://"+vp.rpcAddr, wc.pushConns, "bench.wide", true, set)
			return pu.run(ctx, set, cancel)
		}})
	}
	et, err := startEtcd(ctx, &wc, "push-wide")
	var wcli []*clientv3.Client
	if err == nil {
		defer et.stop()
		wcli, err = et.clients(wc.pushConns + 1)
	}
	if err != nil {
		g.skip("etcd-watch", err.Error())
	} else {
		defer closeClients(wcli)
		sides = append(sides, etcdWatchSide(&wc, wcli, "/bench/wide"))
	}
	runRounds(ctx, &wc, g, wc.rounds, sides)
}

// etcdWatchSide is etcd's push side: cfg.pushSubs watchers of key on the
// first cfg.pushConns clients of clis, and CAS Puts on key from the last one.
func etcdWatchSide(cfg *config, clis []*clientv3.Client, key string) side {
	writer := &casLoop{cli: clis[cfg.pushConns], key: key}
	round := 0
	return side{name: "etcd-watch", run: func(ctx context.Context) (Stats, error) {
		round++
		sctx, cancel := context.WithCancel(ctx)
		set := newSubscriberSet(cfg.pushSubs)
		startEtcdWatchers(sctx, clis[:cfg.pushConns], key, set)
		pad := string(makeDoc(cfg.docSize-8, key, round))
		return pushRun(ctx, cfg, set, cancel, func(int) error { return nil }, func(i int) error {
			ok, err := writer.attempt(ctx, fmt.Sprintf("%07d|", i)+pad)
			if err == nil && !ok {
				err = fmt.Errorf("etcd push writer lost its CAS")
			}
			return err
		})
	}}
}

// seqBase is the generation just before the first commit of the current
// varplane run: a delivery of generation g is commit g-seqBase-1.
var seqBase atomic.Int64

// startSSE opens one HTTP/1.1 connection per subscriber of set on url and
// records each head event's generation.
func startSSE(ctx context.Context, url string, set *subscriberSet) {
	tr := &http.Transport{MaxIdleConnsPerHost: len(set.recv), DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	hc := &http.Client{Transport: tr}
	for i := range set.recv {
		set.wg.Add(1)
		go func(i int) {
			defer set.wg.Done()
			readyOnce := sync.OnceFunc(set.ready.Done)
			defer readyOnce()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := hc.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					set.fail(err)
				}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				set.fail(fmt.Errorf("watch: HTTP %d", resp.StatusCode))
				return
			}
			readyOnce()
			br := bufio.NewReaderSize(resp.Body, 16<<10)
			var gen int64 = -1
			var isHead bool
			recs := make([]delivery, 0, 256)
			defer func() { set.recv[i] = recs }()
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					if ctx.Err() == nil {
						set.fail(fmt.Errorf("watch stream: %w", err))
					}
					return
				}
				line = bytes.TrimRight(line, "\r\n")
				switch {
				case len(line) == 0:
					if isHead && gen >= 0 {
						seq := int(gen - seqBase.Load() - 1)
						recs = append(recs, delivery{seq: seq, at: time.Now()})
						set.last[i].Store(int64(seq))
					}
					gen, isHead = -1, false
				case bytes.HasPrefix(line, []byte("event:")):
					isHead = string(bytes.TrimSpace(line[6:])) == "head"
				case bytes.HasPrefix(line, []byte("id:")):
					id := bytes.TrimSpace(line[3:])
					if at := bytes.LastIndexByte(id, '@'); at >= 0 {
						gen, _ = strconv.ParseInt(string(id[at+1:]), 10, 64)
					}
				case bytes.HasPrefix(line, []byte("data:")) && gen < 0:
					if j := bytes.Index(line, []byte(`"generation":`)); j >= 0 {
						rest := line[j+len(`"generation":`):]
						k := 0
						for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
							k++
						}
						gen, _ = strconv.ParseInt(string(rest[:k]), 10, 64)
					}
				}
			}
		}(i)
	}
}

// startGRPC opens conns HTTP/2 (h2c) connections to addr and multiplexes
// the subscribers of set on them as gRPC Subscribe streams for key. The
// client is stock grpc-go, the same gRPC stack clientv3 uses for etcd's
// watchers, so that both sides of the figure pay the same client cost.
func startGRPC(ctx context.Context, addr string, conns int, key string, set *subscriberSet) {
	target := strings.TrimPrefix(addr, "http://")
	ccs := make([]*grpc.ClientConn, conns)
	for c := range ccs {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			set.fail(err)
			return
		}
		ccs[c] = cc
		go func() {
			<-ctx.Done()
			_ = cc.Close()
		}()
	}
	desc := &grpc.StreamDesc{StreamName: "Subscribe", ServerStreams: true}
	for i := range set.recv {
		set.wg.Add(1)
		go func(i int) {
			defer set.wg.Done()
			readyOnce := sync.OnceFunc(set.ready.Done)
			defer readyOnce()
			stream, err := ccs[i%conns].NewStream(ctx, desc, "/varplane.v1.PushService/Subscribe")
			if err == nil {
				err = stream.SendMsg(&v1.SubscribeRequest{Keys: []string{key}})
			}
			if err == nil {
				err = stream.CloseSend()
			}
			if err != nil {
				if ctx.Err() == nil {
					set.fail(err)
				}
				return
			}
			recs := make([]delivery, 0, 256)
			defer func() { set.recv[i] = recs }()
			for {
				msg := new(v1.SnapshotBatch)
				if err := stream.RecvMsg(msg); err != nil {
					if err != io.EOF && ctx.Err() == nil {
						set.fail(err)
					}
					return
				}
				readyOnce()
				if msg.GetSnapshot() {
					continue
				}
				now := time.Now()
				for _, h := range msg.GetHeads() {
					seq := int(int64(h.GetGeneration()) - seqBase.Load() - 1)
					recs = append(recs, delivery{seq: seq, at: now})
					set.last[i].Store(int64(seq))
				}
			}
		}(i)
	}
}

// startWatch starts the subscribers of set as watches on key multiplexed
// over one gRPC Watch stream per connection (conns connections), as etcd's
// watchers share a stream: subscriber i is watch i+1 on connection i%conns.
// With share, the watches ask for shared responses (share_responses): one
// response names every watch it is for (watch_ids).
func startWatch(ctx context.Context, addr string, conns int, key string, share bool, set *subscriberSet) {
	target := strings.TrimPrefix(addr, "http://")
	n := len(set.recv)
	for c := range conns {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			set.fail(err)
			return
		}
		set.wg.Add(1)
		go func() {
			defer set.wg.Done()
			defer cc.Close()
			var mine []int
			for i := c; i < n; i += conns {
				mine = append(mine, i)
			}
			readied := make(map[int]bool, len(mine))
			defer func() {
				for _, i := range mine {
					if !readied[i] {
						set.ready.Done()
					}
				}
			}()
			stream, err := v1.NewPushServiceClient(cc).Watch(ctx)
			for _, i := range mine {
				if err != nil {
					break
				}
				err = stream.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: &v1.WatchCreateRequest{WatchId: int64(i + 1), Keys: []string{key}, ShareResponses: share}}})
			}
			if err != nil {
				if ctx.Err() == nil {
					set.fail(err)
				}
				return
			}
			recs := make(map[int][]delivery, len(mine))
			defer func() {
				for i, r := range recs {
					set.recv[i] = r
				}
			}()
			for {
				m, err := stream.Recv()
				if err != nil {
					if err != io.EOF && ctx.Err() == nil {
						set.fail(err)
					}
					return
				}
				b := m.GetBatch()
				if b == nil {
					continue
				}
				now := time.Now()
				ids := m.GetWatchIds()
				if len(ids) == 0 {
					ids = []int64{m.GetWatchId()}
				}
				for _, id := range ids {
					i := int(id) - 1
					if i < 0 || i >= n {
						continue
					}
					if b.GetSnapshot() {
						if !readied[i] {
							readied[i] = true
							set.ready.Done()
						}
						continue
					}
					for _, h := range b.GetHeads() {
						seq := int(int64(h.GetGeneration()) - seqBase.Load() - 1)
						recs[i] = append(recs[i], delivery{seq: seq, at: now})
						set.last[i].Store(int64(seq))
					}
				}
			}
		}()
	}
}

// startEtcdWatchers starts the watchers of set on key, spread over clis;
// each value starts with the commit's sequence number.
func startEtcdWatchers(ctx context.Context, clis []*clientv3.Client, key string, set *subscriberSet) {
	for i := range set.recv {
		set.wg.Add(1)
		go func(i int) {
			defer set.wg.Done()
			readyOnce := sync.OnceFunc(set.ready.Done)
			defer readyOnce()
			wch := clis[i%len(clis)].Watch(ctx, key, clientv3.WithCreatedNotify())
			recs := make([]delivery, 0, 256)
			defer func() { set.recv[i] = recs }()
			for resp := range wch {
				if resp.Created {
					readyOnce()
					continue
				}
				if err := resp.Err(); err != nil {
					if ctx.Err() == nil {
						set.fail(err)
					}
					return
				}
				now := time.Now()
				for _, ev := range resp.Events {
					v := ev.Kv.Value
					if j := bytes.IndexByte(v, '|'); j > 0 {
						seq, _ := strconv.Atoi(string(v[:j]))
						recs = append(recs, delivery{seq: seq, at: now})
						set.last[i].Store(int64(seq))
					}
				}
			}
		}(i)
	}
}

// vpPusher commits to one scope of a varplane server for push runs: each
// commit's revision is created beforehand (untimed), the timed commit is the
// activate with expectedGeneration.
type vpPusher struct {
	cfg   *config
	a     *admin
	scope string
	gen   uint64
	round int
}

func newVPPusher(ctx context.Context, cfg *config, vp *vpServer, scope string) (*vpPusher, error) {
	a := newAdmin(vp.base)
	gen, err := a.commit(ctx, scope, makeDoc(cfg.docSize, scope, -1), 0)
	if err != nil {
		a.close()
		return nil, err
	}
	return &vpPusher{cfg: cfg, a: a, scope: scope, gen: gen}, nil
}

// run must be called with seqBase set to p.gen before the subscribers start.
func (p *vpPusher) run(ctx context.Context, set *subscriberSet, cancel func()) (Stats, error) {
	p.round++
	revs := make([]string, p.cfg.pushCommits)
	return pushRun(ctx, p.cfg, set, cancel,
		func(i int) (err error) {
			revs[i], err = p.a.create(ctx, p.scope, makeDoc(p.cfg.docSize, fmt.Sprint(p.scope, p.round), i))
			return err
		},
		func(i int) error {
			g2, conflict, err := p.a.activate(ctx, p.scope, revs[i], p.gen)
			if err == nil && conflict {
				err = fmt.Errorf("conflict at %d", p.gen)
			}
			p.gen = g2
			return err
		})
}

// vpPushSSESide is the SSE push run as one side (for profiling).
func vpPushSSESide(ctx context.Context, cfg *config, vp *vpServer, scope string) (side, error) {
	pu, err := newVPPusher(ctx, cfg, vp, scope)
	if err != nil {
		return side{}, err
	}
	return side{name: "push-sse", run: func(ctx context.Context) (Stats, error) {
		sctx, cancel := context.WithCancel(ctx)
		set := newSubscriberSet(cfg.pushSubs)
		seqBase.Store(int64(pu.gen))
		startSSE(sctx, vp.base+"/watch?key="+scope, set)
		return pu.run(ctx, set, cancel)
	}}, nil
}

// vpPushGRPCSide is the gRPC push run as one side: cfg.pushSubs Subscribe
// streams multiplexed on cfg.pushConns HTTP/2 connections to vp.rpcAddr.
func vpPushGRPCSide(ctx context.Context, cfg *config, vp *vpServer, scope string) (side, error) {
	if vp.rpcAddr == "" {
		return side{}, fmt.Errorf("no gRPC address")
	}
	pu, err := newVPPusher(ctx, cfg, vp, scope)
	if err != nil {
		return side{}, err
	}
	return side{name: "push-grpc", run: func(ctx context.Context) (Stats, error) {
		sctx, cancel := context.WithCancel(ctx)
		set := newSubscriberSet(cfg.pushSubs)
		seqBase.Store(int64(pu.gen))
		startGRPC(sctx, "http://"+vp.rpcAddr, cfg.pushConns, scope, set)
		return pu.run(ctx, set, cancel)
	}}, nil
}
