package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdInst is one single-node etcd the harness started on loopback.
type etcdInst struct {
	p        *proc
	endpoint string
	dir      string
	args     []string
	bin      string
	logPath  string
}

// startEtcd runs a fresh single-node etcd on a new data dir under cfg.tmp,
// bound to 127.0.0.1 on free ports, and waits until it serves reads.
func startEtcd(ctx context.Context, cfg *config, name string) (*etcdInst, error) {
	if cfg.etcdBin == "" {
		return nil, errors.New("etcd is not installed")
	}
	dir := filepath.Join(cfg.tmp, "etcd-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	cport, pport := mustFreePort(), mustFreePort()
	curl := fmt.Sprintf("http://127.0.0.1:%d", cport)
	purl := fmt.Sprintf("http://127.0.0.1:%d", pport)
	e := &etcdInst{endpoint: fmt.Sprintf("127.0.0.1:%d", cport), dir: dir, bin: cfg.etcdBin,
		logPath: filepath.Join(cfg.tmp, "etcd-"+name+".log")}
	e.args = []string{
		"--name", "bench",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "bench=" + purl, "--initial-cluster-state", "new",
		"--quota-backend-bytes", fmt.Sprint(8 << 30),
		"--logger", "zap", "--log-level", "error",
	}
	return e, e.start(ctx)
}

func (e *etcdInst) start(ctx context.Context) error {
	p, err := startProc("etcd", e.logPath, e.bin, e.args...)
	if err != nil {
		return err
	}
	e.p = p
	if err := waitTCP(ctx, p, e.endpoint, 20*time.Second); err != nil {
		p.stop()
		return fmt.Errorf("%w (log: %s)", err, lastLines(readFile(e.logPath), 5))
	}
	cli, err := e.client()
	if err != nil {
		p.stop()
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(c, "/bench/ready")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			return fmt.Errorf("etcd not ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart stops etcd and starts it again on the same data dir, returning
// the time from exec to the first served read.
func (e *etcdInst) restart(ctx context.Context) (time.Duration, error) {
	e.p.stop()
	t0 := time.Now()
	err := e.start(ctx)
	return time.Since(t0), err
}

func (e *etcdInst) stop() {
	if e != nil {
		e.p.stop()
	}
}

// client opens one clientv3 client: one gRPC connection to the endpoint.
func (e *etcdInst) client() (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

func (e *etcdInst) clients(n int) ([]*clientv3.Client, error) {
	out := make([]*clientv3.Client, 0, n)
	for i := 0; i < n; i++ {
		c, err := e.client()
		if err != nil {
			closeClients(out)
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func closeClients(cs []*clientv3.Client) {
	for _, c := range cs {
		c.Close()
	}
}

// casLoop is one etcd writer: a Txn that puts val only if the key's
// ModRevision is still the one this writer last saw; on a lost race the Else
// branch reads the key so the next attempt uses its current ModRevision.
type casLoop struct {
	cli *clientv3.Client
	key string
	rev int64
}

// attempt returns true when the put won.
func (c *casLoop) attempt(ctx context.Context, val string) (bool, error) {
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(c.key), "=", c.rev)).
		Then(clientv3.OpPut(c.key, val)).
		Else(clientv3.OpGet(c.key)).
		Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		c.rev = resp.Header.Revision
		return true, nil
	}
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		c.rev = rr.Kvs[0].ModRevision
	} else {
		c.rev = 0
	}
	return false, nil
}
