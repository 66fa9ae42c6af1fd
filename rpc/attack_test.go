package rpc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/rpc"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
	"github.com/varplane/varplane/store/memory"
)

// mainPort is the Connect handler mounted as on the main port: an
// http.Server (HTTP/1.1) with the wire layer's server limits, or the
// timeouts given, and an authorizer that wants a token.
type mainPort struct {
	engine *varplane.Engine
	hub    *push.Hub
	url    string
	authed atomic.Int64 // authorizer calls
}

func startMainPort(t *testing.T, popts push.Options, timeout time.Duration) *mainPort {
	t.Helper()
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	popts.Logger = slog.New(slog.DiscardHandler)
	h := push.New(e, popts)
	m := &mainPort{engine: e, hub: h}
	auth := varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
		m.authed.Add(1)
		if a.Token == "" {
			return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
		}
		return varplane.Identity{ID: "id-" + a.Token}, nil
	})
	path, handler := rpc.NewHandlerWith(h, auth, rpc.HandlerOptions{Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ReadHeaderTimeout = wire.ServerReadHeaderTimeout
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = wire.ServerReadTimeout, wire.ServerWriteTimeout
	if timeout > 0 {
		srv.Config.ReadTimeout, srv.Config.WriteTimeout = timeout, timeout
	}
	srv.Config.IdleTimeout = wire.ServerIdleTimeout
	srv.Config.MaxHeaderBytes = wire.ServerMaxHeaderBytes
	srv.Start()
	t.Cleanup(func() { srv.Close(); h.Close(); e.Close(); _ = st.Close() })
	m.url = srv.URL
	return m
}

// digest renders what the store holds: each scope's generation.
func (m *mainPort) digest(t *testing.T) string {
	t.Helper()
	return scopeGenerations(t, m.engine)
}

// gzipBomb returns concatenated gzip members inflating to members×16 MiB
// of zeros (a gzip reader reads every member): about 16 KiB compressed per
// member.
func gzipBomb(t *testing.T, members int) []byte {
	t.Helper()
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range 16 {
		_, _ = zw.Write(zeros)
	}
	_ = zw.Close()
	return bytes.Repeat(one.Bytes(), members)
}

// connectCall sends one raw Connect-protocol Subscribe with the message
// envelope (compressed when gz) and no token, and returns the error code
// the stream ended with.
func connectCall(t *testing.T, base string, payload []byte, gz bool) (string, string) {
	t.Helper()
	env := make([]byte, 5, 5+len(payload))
	if gz {
		env[0] = 1
	}
	binary.BigEndian.PutUint32(env[1:], uint32(len(payload)))
	env = append(env, payload...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+varplanev1connect.PushServiceName+"/Subscribe", bytes.NewReader(env))
	req.Header.Set("Content-Type", "application/connect+proto")
	req.Header.Set("Connect-Protocol-Version", "1")
	if gz {
		req.Header.Set("Connect-Content-Encoding", "gzip")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "http " + strconv.Itoa(resp.StatusCode), string(body)
	}
	// The stream's last envelope ends it: flag 2, JSON {"error":{...}}.
	for len(body) >= 5 {
		n := int(binary.BigEndian.Uint32(body[1:5]))
		if len(body) < 5+n {
			break
		}
		if body[0]&2 != 0 {
			var end struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(body[5:5+n], &end); err != nil {
				t.Fatalf("end of stream %q: %v", body[5:5+n], err)
			}
			return end.Error.Code, end.Error.Message
		}
		body = body[5+n:]
	}
	t.Fatalf("the stream ended without a status")
	return "", ""
}

// memory samples the heap while fn runs and returns the growth of the
// peak heap and of the process RSS over what they were before.
//
// The collector runs at GOGC=20 meanwhile: at the default the peak may
// be twice the live heap in garbage, so the same run measured 33 or 65
// MiB depending on when the collector happened to start; the bounds are
// about what the server holds, not about the pacer.
func memoryDuring(t *testing.T, fn func()) (heapGrowth, rssGrowth int64) {
	t.Helper()
	defer debug.SetGCPercent(debug.SetGCPercent(20))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, rss0 := ms.HeapAlloc, rss()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var s runtime.MemStats
		for {
			runtime.ReadMemStats(&s)
			if s.HeapAlloc > peak.Load() {
				peak.Store(s.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	<-sampled
	return int64(peak.Load()) - int64(base), rss() - rss0
}

// rss is the process's resident set in bytes (0 where /proc is missing).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

const memoryBound = 64 << 20

// Requests without a token that are built to cost memory: each is answered
// with an error, before the authorizer is asked, within a bounded heap and
// RSS; nothing is subscribed and nothing stored changes.
func TestConnectRequestBombs(t *testing.T) {
	m := startMainPort(t, push.Options{}, 0)
	rpc.ActivateForTest(t, m.engine, "a.x", `{"v":1}`)
	before := m.digest(t)
	small, _ := proto.Marshal(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	smallGz := func() []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(small)
		_ = zw.Close()
		return b.Bytes()
	}()
	tests := []struct {
		name    string
		payload []byte
		gz      bool
		want    string
	}{
		// 512 KiB of gzip inflating to 512 MiB: refused by its size, never inflated.
		{"500 KB gzip bomb", gzipBomb(t, 32), true, "resource_exhausted"},
		// 48 KiB of gzip inflating to 48 MiB: under the body limit, inflated
		// only up to MaxRequestBytes.
		{"gzip bomb under the body limit", gzipBomb(t, 3), true, "resource_exhausted"},
		{"oversized plain request", bytes.Repeat([]byte{0x0a, 0x80, 0x80, 0x20}, 128<<10), false, "resource_exhausted"},
		{"request of exactly the limit plus one", make([]byte, rpc.MaxRequestBytes+1), false, "resource_exhausted"},
		// A well-formed request still reaches the authorizer, which wants a token.
		{"small request without a token", small, false, "unauthenticated"},
		{"small compressed request without a token", smallGz, true, "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			authed := m.authed.Load()
			var code, msg string
			heap, rssGrowth := memoryDuring(t, func() { code, msg = connectCall(t, m.url, tt.payload, tt.gz) })
			t.Logf("%d-byte request: %s %q; heap +%d KiB, RSS +%d KiB", len(tt.payload), code, msg, heap>>10, rssGrowth>>10)
			if code != tt.want {
				t.Errorf("code %s (%s), want %s", code, msg, tt.want)
			}
			if heap > memoryBound || rssGrowth > memoryBound {
				t.Errorf("heap grew %d MiB, RSS %d MiB: want under %d MiB", heap>>20, rssGrowth>>20, memoryBound>>20)
			}
			if tt.want == "resource_exhausted" && m.authed.Load() != authed {
				t.Errorf("the authorizer was asked about a request refused for its size")
			}
		})
	}
	if n := m.hub.Stats().Subscribers; n != 0 {
		t.Errorf("%d subscribers", n)
	}
	if after := m.digest(t); after != before {
		t.Errorf("store changed: %s, was %s", after, before)
	}
}

// One token holds its cap over Connect (main port) and over gRPC (the RPC
// listener); another token still subscribes; a stream that ends frees its
// slot.
func TestPerTokenCapOverRPC(t *testing.T) {
	popts := push.Options{MaxSubscribers: 100, MaxSubscribersPerToken: 2}
	m := startMainPort(t, popts, 0)
	auth := varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
		return varplane.Identity{ID: "id-" + a.Token}, nil
	})
	f := start(t, popts, auth)
	for _, tr := range []struct {
		name   string
		hub    *push.Hub
		client varplanev1connect.PushServiceClient
	}{
		{"connect on the main port", m.hub, varplanev1connect.NewPushServiceClient(http.DefaultClient, m.url)},
		{"grpc on the rpc listener", f.hub, f.client},
	} {
		t.Run(tr.name, func(t *testing.T) {
			open := func(token string) (*connect.ServerStreamForClient[v1.SnapshotBatch], context.CancelFunc, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r := connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"a.x"}})
				r.Header().Set("Authorization", "Bearer "+token)
				s, err := tr.client.Subscribe(ctx, r)
				if err == nil && !s.Receive() {
					err = s.Err()
				}
				if err != nil {
					cancel()
					return nil, nil, err
				}
				t.Cleanup(func() { cancel(); _ = s.Close() })
				return s, cancel, nil
			}
			_, first, err := open("greedy")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := open("greedy"); err != nil {
				t.Fatal(err)
			}
			_, _, err = open("greedy")
			var cerr *connect.Error
			if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnavailable || cerr.Meta().Get(rpc.CodeHeader) != "too-many-subscribers" {
				t.Fatalf("third stream of one token: %v, want Unavailable too-many-subscribers", err)
			}
			if _, _, err := open("modest"); err != nil {
				t.Fatalf("another token: %v", err)
			}
			first() // the client leaves
			deadline := time.Now().Add(5 * time.Second)
			for tr.hub.Stats().Subscribers != 2 {
				if time.Now().After(deadline) {
					t.Fatalf("%d subscribers, want 2 after a stream ended", tr.hub.Stats().Subscribers)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if _, _, err := open("greedy"); err != nil {
				t.Fatalf("after a stream ended: %v", err)
			}
			if st := tr.hub.Stats(); st.RefusedPerToken != 1 {
				t.Errorf("RefusedPerToken = %d, want 1", st.RefusedPerToken)
			}
		})
	}
}

// A Connect stream on a server with short read and write timeouts outlives
// them: the stream lifts them once its request is read.
func TestConnectStreamOutlivesServerTimeouts(t *testing.T) {
	m := startMainPort(t, push.Options{}, 200*time.Millisecond)
	c := varplanev1connect.NewPushServiceClient(http.DefaultClient, m.url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"a.x"}})
	r.Header().Set("Authorization", "Bearer t")
	s, err := c.Subscribe(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	time.Sleep(600 * time.Millisecond) // three times the server's timeouts
	rpc.ActivateForTest(t, m.engine, "a.x", `{"v":2}`)
	if !s.Receive() {
		t.Fatalf("the stream ended: %v", s.Err())
	}
	if h := s.Msg().GetHeads(); len(h) != 1 || h[0].GetGeneration() != 1 {
		t.Errorf("batch = %v", s.Msg())
	}
}

// CodeOf is the one table from varplane codes to Connect codes: every code
// declared in errors.go has an entry other than Internal (internal aside).
func TestCodeOfCoversEveryCode(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "../errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []varplane.Code
	ast.Inspect(file, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil || fmt.Sprint(vs.Type) != "Code" {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				codes = append(codes, varplane.Code(s))
			}
		}
		return true
	})
	if len(codes) < 19 {
		t.Fatalf("found %d codes in errors.go: the parse is off", len(codes))
	}
	for _, c := range codes {
		got := rpc.CodeOf(c)
		if (got == connect.CodeInternal) != (c == varplane.CodeInternal) {
			t.Errorf("CodeOf(%q) = %v", c, got)
		}
	}
	if got := rpc.CodeOf("no-such-code"); got != connect.CodeInternal {
		t.Errorf("unknown code = %v, want Internal", got)
	}
	if got := rpc.CodeOf(varplane.ErrorCode(push.ErrHubClosed)); got != connect.CodeUnavailable {
		t.Errorf("hub closed = %v, want Unavailable", got)
	}
}
