package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/wiretest"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	"github.com/varplane/varplane/store/memory"
)

// plane is a real varplane server in process: the httpapi route table with
// the push hub's SSE stream mounted on it, and the RPC server, all over one
// engine on a memory store. stop and start keep the engine (the store of
// record survives) and reuse the address, as a restarted server would.
type plane struct {
	t      testing.TB
	engine *varplane.Engine
	hub    *push.Hub
	api    *httpapi.Handler
	rpc    *rpc.Server
	grpc   *rpc.GRPCServer // the main port's gRPC, as serve wires it

	mu   sync.Mutex
	addr string
	srv  *http.Server
	done chan struct{}

	batchRequests atomic.Int64
	notModified   atomic.Int64

	opts  planeOptions
	guard *wire.HTTP2Guard // with maxConnAge
}

type planeOptions struct {
	hub     push.Options
	stream  httpapi.StreamOptions
	noWatch bool
	store   varplane.Store      // nil: a memory store
	authz   varplane.Authorizer // nil: varplane.AllowAll
	// maxConnAge, when set, ages the plane's connections as serve's
	// --max-connection-age does (GOAWAY, then a close after the grace).
	maxConnAge, maxConnAgeGrace time.Duration
}

func startPlane(t testing.TB, o planeOptions) *plane {
	t.Helper()
	var st varplane.Store = memory.New()
	if o.store != nil {
		st = o.store
	}
	e := varplane.NewEngine(st, varplane.Options{})
	quiet := slog.New(slog.DiscardHandler)
	if o.hub.Logger == nil {
		o.hub.Logger = quiet
	}
	p := &plane{t: t, engine: e, hub: push.New(e, o.hub), addr: "127.0.0.1:0", opts: o}
	var hub *push.Hub
	if !o.noWatch {
		hub = p.hub
	}
	authz := o.authz
	if authz == nil {
		authz = varplane.AllowAll
	}
	p.api = httpapi.NewHandler(e, httpapi.Options{Authorizer: authz, Hub: hub, Stream: o.stream, DisableOps: true, Logger: quiet})
	p.grpc = rpc.NewGRPCServer(p.hub, nil, rpc.GRPCOptions{Logger: quiet})
	p.rpc = rpc.NewServer("127.0.0.1:0", p.hub, nil)
	if err := p.rpc.Open(); err != nil {
		t.Fatal(err)
	}
	p.start()
	t.Cleanup(func() {
		p.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.rpc.Close(ctx)
		_ = p.grpc.Close(ctx)
		p.hub.Close()
		p.api.Close()
		e.Close()
		_ = st.Close()
	})
	return p
}

func (p *plane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/vars/batch" {
		p.batchRequests.Add(1)
	}
	sw := &statusWriter{ResponseWriter: w}
	p.api.ServeHTTP(sw, r)
	if sw.status == http.StatusNotModified {
		p.notModified.Add(1)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }
func (w *statusWriter) Unwrap() http.ResponseWriter {
	return w.ResponseWriter
}

// start listens on the plane's address (a fresh port the first time).
func (p *plane) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	ln := wiretest.Listen(p.t, p.addr)
	p.addr = ln.Addr().String()
	// One port, as varplane serve: gRPC requests (h2c) go to grpc-go.
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	p.srv = &http.Server{Handler: p.grpc.Route(p), ReadHeaderTimeout: 5 * time.Second, Protocols: &protos, HTTP2: p.grpc.HTTP2Config()}
	if p.opts.maxConnAge > 0 {
		if p.guard == nil {
			p.guard = wire.NewHTTP2Guard(wire.HTTP2GuardOptions{MaxConnAge: p.opts.maxConnAge})
		}
		if err := p.guard.Install(p.srv); err != nil {
			p.t.Fatal(err)
		}
		ln = wire.NewListener(ln, wire.ListenerOptions{MaxConnAge: p.opts.maxConnAge, MaxConnAgeGrace: p.opts.maxConnAgeGrace})
	}
	p.done = make(chan struct{})
	srv, done := p.srv, p.done
	go func() { defer close(done); _ = srv.Serve(ln) }()
}

// stop closes the listener and every connection, streams included.
func (p *plane) stop() {
	p.mu.Lock()
	srv, done := p.srv, p.done
	p.srv = nil
	p.mu.Unlock()
	if srv == nil {
		return
	}
	_ = srv.Close()
	<-done
}

func (p *plane) url() string { return "http://" + p.addr }

func (p *plane) post(path string, body any) map[string]any {
	p.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(p.url()+"/vars"+path, "application/json", bytes.NewReader(b))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode >= 300 {
		p.t.Fatalf("POST %s = %d %v", path, resp.StatusCode, out)
	}
	return out
}

func (p *plane) generation(scope varplane.Scope) varplane.Generation {
	p.t.Helper()
	st, err := p.engine.Status(context.Background(), scope)
	if err != nil {
		p.t.Fatal(err)
	}
	return st.Generation
}

// activate creates and activates doc in scope through the HTTP admin.
func (p *plane) activate(scope varplane.Scope, doc string) varplane.Generation {
	p.t.Helper()
	rev := p.post("/admin/revisions", map[string]any{"scope": scope, "document": json.RawMessage(doc)})
	res := p.post("/admin/activate", map[string]any{"scope": scope, "revision": rev["revision"], "expectedGeneration": p.generation(scope)})
	return varplane.Generation(res["generation"].(float64))
}

// activateDirect commits through the engine, for when the HTTP server is down.
func (p *plane) activateDirect(scope varplane.Scope, doc string) {
	p.t.Helper()
	ctx := context.Background()
	rev, err := p.engine.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(doc)})
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.engine.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev.Revision, ExpectedGeneration: p.generation(scope)}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *plane) deactivate(scope varplane.Scope) {
	p.t.Helper()
	p.post("/admin/deactivate", map[string]any{"scope": scope, "expectedGeneration": p.generation(scope)})
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sseConn is a bare SSE reader for fan-out tests: lighter than an SDK client.
type sseConn struct {
	resp *http.Response
	ids  chan string
}

func dialSSE(ctx context.Context, hc *http.Client, url string) (*sseConn, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	c := &sseConn{resp: resp, ids: make(chan string, 1024)}
	go func() {
		defer close(c.ids)
		buf := make([]byte, 32<<10)
		var pending []byte
		for {
			n, err := resp.Body.Read(buf)
			pending = append(pending, buf[:n]...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				line := string(pending[:i])
				pending = pending[i+1:]
				if id, ok := strings.CutPrefix(line, "id: "); ok {
					c.ids <- id
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return c, nil
}

func sseHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 2000,
		TLSClientConfig:     &tls.Config{},
		DisableCompression:  true,
	}}
}

var errTimeout = errors.New("timeout")

// waitID reads ids until want arrives; it fails on an id of the same scope
// whose generation is newer than want or on timeout.
func (c *sseConn) waitID(want string, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case id, ok := <-c.ids:
			if !ok {
				return io.ErrUnexpectedEOF
			}
			if id == want {
				return nil
			}
		case <-t.C:
			return errTimeout
		}
	}
}
