package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/varplane/varplane/internal/procstat"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const readConns = 64

// withCPU runs f and adds the CPU the process pid used meanwhile, as cores
// busy and microseconds per successful operation, and the context switches
// of its threads per successful operation (each a thread that waited and
// was woken: on a virtual machine a cost that CPU time does not show).
func withCPU(pid int, f func() Stats) Stats {
	c0, t0, sw0 := cpuTimes(pid), time.Now(), procstat.ContextSwitches(pid)
	s := f()
	elapsed := time.Since(t0).Seconds()
	cores := (cpuTimes(pid) - c0) / elapsed
	sw1 := procstat.ContextSwitches(pid)
	if s.Extra == nil {
		s.Extra = map[string]float64{}
	}
	s.Extra["server_cores"] = cores
	if s.Throughput > 0 {
		s.Extra["server_cpu_us_per_op"] = cores / s.Throughput * 1e6
		if sw0 >= 0 && sw1 >= sw0 {
			s.Extra["server_ctxsw_per_op"] = float64(sw1-sw0) / (s.Throughput * elapsed)
		}
	}
	return s
}

func scenarioRead(ctx context.Context, cfg *config, e *env, rep *Report) {
	g200 := newGroup("read.200", "read", fmt.Sprintf("cached read, %d keep-alive connections, 1 KiB document, 200 with body", readConns), "req/s", "ceiling", "etcd-serializable")
	g304 := newGroup("read.304", "read", fmt.Sprintf("revalidation with a matching If-None-Match, %d keep-alive connections (304, no body)", readConns), "req/s", "ceiling")
	rep.Groups = append(rep.Groups, g200, g304)
	g200.Notes = append(g200.Notes,
		fmt.Sprintf("load generator: one goroutine per connection, a minimal HTTP/1.1 keep-alive client (same code for varplane and the ceiling); etcd through clientv3, %d goroutines sharing %d clients (one gRPC connection each)", readConns, cfg.etcdReadClients),
		"ceiling: a plain net/http handler in its own process answering the exact bytes, Content-Type and ETag varplane answered",
		"server_cores: CPU of the server process during the run (of 2 cores); server_cpu_us_per_op: that CPU per request; server_ctxsw_per_op: context switches of the server's threads per request (each a thread that waited and was woken)")
	doc := makeDoc(cfg.docSize, "read", 0)

	// varplane
	var vpReq, vpReq304 []byte
	var vp *vpServer
	var body []byte
	var etag, ctype string
	vp, err := e.startVarplane(ctx, "read", "file:"+filepath.Join(cfg.tmp, "read.jsonl"))
	if err == nil {
		a := newAdmin(vp.base)
		_, err = a.commit(ctx, "bench.read", doc, 0)
		a.close()
	}
	if err == nil {
		body, etag, ctype, err = fetchOnce(ctx, vp.base+"?key=bench.read")
	}
	if err != nil {
		logf("read: varplane unavailable: %v", err)
		g200.skip("varplane", err.Error())
		g304.skip("varplane", err.Error())
		body, etag, ctype = []byte(`{"generation":1,"values":`+string(doc)+`}`), `"sha256:bench"`, "application/json"
	} else {
		defer vp.stop()
		u, _ := url.Parse(vp.base)
		vpReq = getRequest(vp.addr, u.Path+"?key=bench.read", "")
		vpReq304 = getRequest(vp.addr, u.Path+"?key=bench.read", etag)
		g200.Notes = append(g200.Notes, fmt.Sprintf("varplane: the real server (varplane serve, file store), response %d bytes, ETag %s", len(body), etag))
	}

	// ceiling
	cp, caddr, err := startCeiling(ctx, cfg, body, etag, ctype)
	if err != nil {
		g200.skip("ceiling", err.Error())
		g304.skip("ceiling", err.Error())
	} else {
		defer cp.stop()
	}

	// etcd
	var ecli []*clientv3.Client
	et, err := startEtcd(ctx, cfg, "read")
	if err == nil {
		defer et.stop()
		ecli, err = et.clients(cfg.etcdReadClients)
	}
	if err == nil {
		defer closeClients(ecli)
		_, err = ecli[0].Put(ctx, "/bench/read", string(doc))
	}
	if err != nil {
		g200.skip("etcd-serializable", err.Error())
		g200.skip("etcd-linearizable", err.Error())
	}

	etcdSide := func(name string, opts ...clientv3.OpOption) side {
		return side{name: name, run: func(ctx context.Context) (Stats, error) {
			return withCPU(et.p.pid(), func() Stats {
				return closedLoop(ctx, readConns, cfg.warm, cfg.readDur, func(w int) (bool, error) {
					resp, err := ecli[w%len(ecli)].Get(ctx, "/bench/read", opts...)
					if err != nil {
						return false, err
					}
					if len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != len(doc) {
						return false, fmt.Errorf("etcd get: unexpected response")
					}
					return true, nil
				})
			}), nil
		}}
	}

	var s200, s304 []side
	if vpReq != nil {
		s200 = append(s200, rawReadSide(cfg, "varplane", vp.p.pid(), vp.addr, vpReq, 200, len(body)))
		s304 = append(s304, rawReadSide(cfg, "varplane", vp.p.pid(), vp.addr, vpReq304, 304, 0))
	}
	if cp != nil {
		s200 = append(s200, rawReadSide(cfg, "ceiling", cp.pid(), caddr, getRequest(caddr, "/vars?key=bench.read", ""), 200, len(body)))
		s304 = append(s304, rawReadSide(cfg, "ceiling", cp.pid(), caddr, getRequest(caddr, "/vars?key=bench.read", etag), 304, 0))
	}
	if ecli != nil {
		s200 = append(s200, etcdSide("etcd-serializable", clientv3.WithSerializable()), etcdSide("etcd-linearizable"))
	}
	runRounds(ctx, cfg, g200, cfg.rounds, s200)
	runRounds(ctx, cfg, g304, cfg.rounds, s304)
}

// fetchOnce GETs u and returns the body, ETag and Content-Type of a 200.
func fetchOnce(ctx context.Context, u string) ([]byte, string, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", "", err
	}
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == "" {
		return nil, "", "", fmt.Errorf("GET %s: %d (ETag %q): %s", u, resp.StatusCode, resp.Header.Get("ETag"), b)
	}
	return b, resp.Header.Get("ETag"), resp.Header.Get("Content-Type"), nil
}

// rawReadSide reads req from addr on readConns keep-alive connections,
// expecting wantStatus with a body of wantLen bytes; pid is the server whose
// CPU is recorded.
func rawReadSide(cfg *config, name string, pid int, addr string, req []byte, wantStatus, wantLen int) side {
	return side{name: name, run: func(ctx context.Context) (Stats, error) {
		conns := make([]*rawConn, readConns)
		for i := range conns {
			c, err := dialRaw(addr)
			if err != nil {
				return Stats{}, err
			}
			conns[i] = c
			defer c.close()
		}
		return withCPU(pid, func() Stats {
			return closedLoop(ctx, readConns, cfg.warm, cfg.readDur, func(w int) (bool, error) {
				st, n, err := conns[w].get(req)
				if err != nil {
					return false, err
				}
				if st != wantStatus || n != wantLen {
					return false, fmt.Errorf("got %d with %d bytes, want %d with %d", st, n, wantStatus, wantLen)
				}
				return true, nil
			})
		}), nil
	}}
}
