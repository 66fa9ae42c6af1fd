package redis

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/redis/redistest"
	"github.com/varplane/varplane/store/storetest"
)

// Issue 33 item 8: a publish whose script reached Redis, which was paused
// before it could answer, answers outcome-unknown, not store-unavailable:
// once Redis resumes the commit is there, and the publish repeated with its
// idempotency key answers its result.
func TestPausedMidCommitIsOutcomeUnknown(t *testing.T) {
	srv := redistest.StartServer(t)
	px := storetest.StartProxy(t, srv.Addr)
	s := openStore(t, "redis://"+px.Addr()+"/0?prefix=vpt", Options{CommandTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	e := varplane.NewEngine(s, varplane.Options{})
	defer e.Close()
	pub := func(e *varplane.Engine, doc string, expected varplane.Generation, key string) (varplane.PublishResult, error) {
		return e.Publish(ctx, varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(doc), ExpectedGeneration: expected, IdempotencyKey: key})
	}
	if _, err := pub(e, `{"v":1}`, 0, "k0"); err != nil { // loads the script: the next one is an EVALSHA
		t.Fatal(err)
	}
	var paused atomic.Bool // set by the proxy's goroutine
	px.Arm([]byte("$7\r\nEVALSHA\r\n"), func() { srv.Pause(); paused.Store(true) })
	defer func() {
		if paused.Load() {
			srv.Resume()
		}
	}()
	_, err := pub(e, `{"v":2}`, 1, "k1")
	if !paused.Load() {
		t.Fatalf("the publish never sent its script (err %v)", err)
	}
	if !errors.Is(err, varplane.ErrOutcomeUnknown) || errors.Is(err, varplane.ErrUnavailable) {
		t.Fatalf("publish paused mid-commit: %v, want outcome-unknown", err)
	}
	srv.Resume()
	paused.Store(false)
	direct := openStore(t, srv.URL("vpt"), Options{})
	eventually(t, 5*time.Second, "the paused commit to land", func() bool {
		h, err := direct.History(ctx, "app.k")
		return err == nil && len(h) == 4
	})
	d := varplane.NewEngine(direct, varplane.Options{})
	defer d.Close()
	res, err := pub(d, `{"v":2}`, 1, "k1")
	if err != nil || res.Generation != 2 || !res.Created {
		t.Fatalf("the publish repeated with its key: %+v, %v; want its first result, generation 2", res, err)
	}
}

// The errors after which a commit script certainly did not run are told
// from those after which it may have: real errors of a real server.
func TestScriptNotRun(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	must := func(cmd rueidis.Completed) {
		t.Helper()
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	must(c.B().Set().Key("str").Value("x").Build())
	wrongType := c.Do(ctx, c.B().Rpush().Key("str").Element("y").Build()).Error()
	timeout, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-timeout.Done()
	deadline := c.Do(timeout, c.B().Get().Key("str").Build()).Error()
	dead := freeAddr(t)
	_, dialErr := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{dead}, DisableCache: true})
	must(c.B().Arbitrary("CONFIG", "SET").Args("maxmemory", "1").Build())
	oom := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error()
	must(c.B().Arbitrary("CONFIG", "SET").Args("maxmemory", "0").Build())
	host, port, _ := net.SplitHostPort(dead)
	must(c.B().Arbitrary("REPLICAOF").Args(host, port).Build())
	readonly := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error()
	must(c.B().Arbitrary("REPLICAOF").Args("NO", "ONE").Build())
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused connection", dialErr, true},
		{"out of memory", oom, true},
		{"read-only replica", readonly, true},
		{"wrong type (met after writes)", wrongType, false},
		{"deadline", deadline, false},
		{"closed connection", net.ErrClosed, false},
	} {
		if tc.err == nil {
			t.Fatalf("%s: the server answered without an error", tc.name)
		}
		if got := scriptNotRun(tc.err); got != tc.want {
			t.Errorf("%s (%v): scriptNotRun = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// WriteReady follows what the server accepts: ready, not while it is out
// of memory or a read-only replica (when a write is refused, changing
// nothing: store-unavailable), ready again after, not while it is down; a
// ReadOnly store never is.
func TestWriteReady(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	s := openStore(t, srv.URL("vpt"), Options{CommandTimeout: time.Second})
	c := rawClient(t, "redis://"+srv.Addr+"/0")
	must := func(cmd rueidis.Completed) {
		t.Helper()
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	ready := func(when string, want bool) {
		t.Helper()
		err := varplane.WriteReady(ctx, s)
		if (err == nil) != want || (err != nil && !errors.Is(err, varplane.ErrUnavailable)) {
			t.Errorf("%s: WriteReady = %v, want ready %v", when, err, want)
		}
	}
	write := func(when string, i int) {
		t.Helper()
		if err := s.Append(ctx, storetest.CreatedEvent("app.k", storetest.Doc(i)), 0); !errors.Is(err, varplane.ErrUnavailable) {
			t.Errorf("%s: a write = %v, want store-unavailable", when, err)
		}
	}
	ready("running", true)
	must(c.B().Arbitrary("CONFIG", "SET").Args("maxmemory", "1").Build())
	ready("out of memory", false)
	write("out of memory", 1)
	must(c.B().Arbitrary("CONFIG", "SET").Args("maxmemory", "0").Build())
	ready("memory back", true)
	host, port, _ := net.SplitHostPort(freeAddr(t))
	must(c.B().Arbitrary("REPLICAOF").Args(host, port).Build())
	ready("a read-only replica", false)
	write("a read-only replica", 2)
	must(c.B().Arbitrary("REPLICAOF").Args("NO", "ONE").Build())
	ready("a primary again", true)
	ro := openStore(t, srv.URL("vpt"), Options{ReadOnly: true})
	if err := ro.WriteReady(ctx); varplane.ErrorCode(err) != varplane.CodeStoreUnsupported {
		t.Errorf("a ReadOnly store: WriteReady = %v, want store-unsupported", err)
	}
	srv.Stop()
	ready("down", false)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
