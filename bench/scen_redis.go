package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// redisReadSide is rawReadSide that also records the Redis server's CPU per
// request (INFO cpu before and after): a read served from the store's
// in-memory snapshot costs Redis nothing.
func redisReadSide(s side, rc *respConn) side {
	inner := s.run
	s.run = func(ctx context.Context) (Stats, error) {
		c0, err := rc.cpuSeconds()
		if err != nil {
			return Stats{}, err
		}
		st, err := inner(ctx)
		if err != nil {
			return st, err
		}
		c1, err := rc.cpuSeconds()
		if err != nil {
			return st, err
		}
		if st.Extra == nil {
			st.Extra = map[string]float64{}
		}
		if st.Ops > 0 {
			st.Extra["redis_cpu_us_per_op"] = (c1 - c0) * 1e6 / float64(st.Ops)
		}
		return st, nil
	}
	return s
}

func scenarioRedis(ctx context.Context, cfg *config, e *env, rep *Report) {
	gRead := newGroup("redis.read", "redis", fmt.Sprintf("reads on the Redis store, %d keep-alive connections (200 with a 1 KiB document; 304 revalidations of 1 KiB and 4 MiB documents)", readConns), "req/s", "ceiling-200", "ceiling-304")
	gCommit := newGroup("redis.commit.64", "redis", "durable commit on the Redis store, 64 writers on distinct scopes, 1 KiB documents", "commits/s", "etcd-cas", "varplane-file")
	gRep := newGroup("redis.replica", "redis", fmt.Sprintf("commit on replica A → delivery on replica B (%d SSE subscribers on B, %d commits spaced %v)", redisSubs, cfg.pushCommits, cfg.pushSpacing), "deliveries/s", "A→A")
	rep.Groups = append(rep.Groups, gRead, gCommit, gRep)
	skipAll := func(why string) {
		for _, s := range []string{"varplane-redis-200", "varplane-redis-304", "varplane-redis-304-4MiB"} {
			gRead.skip(s, why)
		}
		gCommit.skip("varplane-redis", why)
		gCommit.skip("varplane-redis-publish", why)
		gRep.skip("A→B", why)
	}
	u, err := url.Parse(cfg.redisAddr)
	if err != nil || u.Host == "" {
		skipAll(fmt.Sprintf("bad Redis URL %q", cfg.redisAddr))
		return
	}
	rc, err := dialRESP(u.Host)
	if err == nil {
		_, err = rc.do("PING")
	}
	if err != nil {
		skipAll(fmt.Sprintf("Redis at %s unreachable: %v", u.Host, err))
		return
	}
	defer rc.close()
	prefix := fmt.Sprintf("varplane-bench-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	defer func() {
		n, err := rc.deletePrefix(prefix)
		logf("redis: deleted %d keys under %s: %v", n, prefix, err)
		rep.Notes = append(rep.Notes, fmt.Sprintf("redis: used the key prefix %s on %s and deleted its %d keys afterwards", prefix, u.Host, n))
	}()
	q := u.Query()
	q.Set("prefix", prefix)
	u.RawQuery = q.Encode()
	if u.Path == "" {
		u.Path = "/0"
	}
	storeURL := u.String()
	note := "the Redis store as varplane serve --store redis://…?prefix=<unique>; two servers (replicas A and B) share it"
	gRead.Notes = append(gRead.Notes, note,
		"redis_cpu_us_per_op: Redis server CPU (INFO cpu, user+sys) during the run per request; the shared Redis may also serve other clients meanwhile",
		"ceiling-200/-304: the net/http ceiling serving the bytes and ETag replica A answered for the 1 KiB document")
	gCommit.Notes = append(gCommit.Notes, note,
		"durability differs: a Redis commit is acknowledged once Redis has applied it (fsync per Redis's own appendfsync setting), a file-store or etcd commit after fdatasync")

	var extra []string
	if _, err := e.varplaneBin(); err != nil {
		skipAll(err.Error())
		return
	}
	if e.hasFlag("max-body-bytes") {
		extra = append(extra, "--max-body-bytes", fmt.Sprint(16<<20))
	}
	a, err := e.startVarplane(ctx, "redis-a", storeURL, extra...)
	if err != nil {
		skipAll(err.Error())
		return
	}
	defer a.stop()
	b, err := e.startVarplane(ctx, "redis-b", storeURL, extra...)
	if err != nil {
		skipAll(err.Error())
		return
	}
	defer b.stop()

	// reads
	ad := newAdmin(a.base)
	defer ad.close()
	doc := makeDoc(cfg.docSize, "redis.read", 0)
	big := makeDoc(4<<20, "redis.big", 0)
	_, err = ad.commit(ctx, "bench.redis.read", doc, 0)
	if err == nil {
		_, err = ad.commit(ctx, "bench.redis.big", big, 0)
	}
	var body []byte
	var etag, ctype, etagBig string
	if err == nil {
		body, etag, ctype, err = fetchOnce(ctx, a.base+"?key=bench.redis.read")
	}
	if err == nil {
		_, etagBig, _, err = fetchOnce(ctx, a.base+"?key=bench.redis.big")
	}
	if err != nil {
		for _, s := range []string{"varplane-redis-200", "varplane-redis-304", "varplane-redis-304-4MiB"} {
			gRead.skip(s, err.Error())
		}
	} else {
		path := strings.TrimSuffix(mustPath(a.base), "/")
		sides := []side{
			redisReadSide(rawReadSide(cfg, "varplane-redis-200", a.p.pid(), a.addr, getRequest(a.addr, path+"?key=bench.redis.read", ""), 200, len(body)), rc),
			redisReadSide(rawReadSide(cfg, "varplane-redis-304", a.p.pid(), a.addr, getRequest(a.addr, path+"?key=bench.redis.read", etag), 304, 0), rc),
			redisReadSide(rawReadSide(cfg, "varplane-redis-304-4MiB", a.p.pid(), a.addr, getRequest(a.addr, path+"?key=bench.redis.big", etagBig), 304, 0), rc),
		}
		if cp, caddr, err := startCeiling(ctx, cfg, body, etag, ctype); err != nil {
			gRead.skip("ceiling-200", err.Error())
			gRead.skip("ceiling-304", err.Error())
		} else {
			defer cp.stop()
			sides = append(sides,
				rawReadSide(cfg, "ceiling-200", cp.pid(), caddr, getRequest(caddr, "/vars?key=bench.redis.read", ""), 200, len(body)),
				rawReadSide(cfg, "ceiling-304", cp.pid(), caddr, getRequest(caddr, "/vars?key=bench.redis.read", etag), 304, 0))
		}
		runRounds(ctx, cfg, gRead, cfg.rounds, sides)
	}

	// commits
	var csides []side
	csides = append(csides, vpCommitSide(cfg, "varplane-redis", a, 64, "bench.rc64"), vpPublishSide(cfg, "varplane-redis-publish", a, 64, "bench.rp64"))
	if fs, err := e.startVarplane(ctx, "redis-file-peer", "file:"+filepath.Join(cfg.tmp, "redis-peer.jsonl")); err != nil {
		gCommit.skip("varplane-file", err.Error())
	} else {
		defer fs.stop()
		csides = append(csides, vpCommitSide(cfg, "varplane-file", fs, 64, "bench.fc64"))
	}
	et, err := startEtcd(ctx, cfg, "redis-peer")
	var ecli []*clientv3.Client
	if err == nil {
		defer et.stop()
		ecli, err = et.clients(64)
	}
	if err != nil {
		gCommit.skip("etcd-cas", err.Error())
	} else {
		defer closeClients(ecli)
		csides = append(csides, etcdCommitSide(cfg, "etcd-cas", et, ecli, 64, "/bench/rc64"))
	}
	runRounds(ctx, cfg, gCommit, cfg.rounds, csides)

	// replica A → B
	pu, err := newVPPusher(ctx, cfg, a, "bench.redis.push")
	if err != nil {
		gRep.skip("A→B", err.Error())
		gRep.skip("A→A", err.Error())
		return
	}
	defer pu.a.close()
	gRep.Notes = append(gRep.Notes, "A→A: the same commits delivered to subscribers on replica A itself (the peer); A→B adds Redis pub/sub and replica B's refresh")
	repSide := func(name string, sub *vpServer) side {
		return side{name: name, run: func(ctx context.Context) (Stats, error) {
			sctx, cancel := context.WithCancel(ctx)
			set := newSubscriberSet(redisSubs)
			seqBase.Store(int64(pu.gen))
			startSSE(sctx, sub.base+"/watch?key=bench.redis.push", set)
			return pu.run(ctx, set, cancel)
		}}
	}
	runRounds(ctx, cfg, gRep, cfg.rounds, []side{repSide("A→B", b), repSide("A→A", a)})
}

// redisSubs is the number of SSE subscribers of the replica scenario.
const redisSubs = 100

func mustPath(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return "/vars"
	}
	return u.Path
}
