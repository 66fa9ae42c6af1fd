package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/client/grpcwatch"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// The SDK over Watch, with the server on a Redis of the test's own that
// stops mid-stream: the SDK keeps serving its last document through the
// outage and through a restart of the server while Redis is still down,
// reconnects, and once Redis is back converges on the newest head another
// replica committed, every generation it applied newer than the last. A
// scope registered during the outage, whose watch the server cannot start
// then, is followed once Redis is back.
func TestSDKOverWatchThroughRedisOutage(t *testing.T) {
	r := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	quiet := slog.New(slog.DiscardHandler)
	open := func() *redis.Store {
		st, err := redis.Open(context.Background(), r.URL("sdkw"), redis.Options{Logger: quiet,
			RevalidateInterval: 100 * time.Millisecond, CommandTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	served := open()
	p := startPlane(t, planeOptions{store: served})
	other := varplane.NewEngine(open(), varplane.Options{}) // another replica, on the same Redis
	t.Cleanup(other.Close)
	p.activate("r.a", `{"n":1}`)

	var mu sync.Mutex
	var applied []varplane.Generation
	c := startClient(t, p, client.Options{Stream: grpcwatch.Stream{}}, "r.a")
	c.OnChange(func(sc varplane.Scope, _, v client.Value) {
		if sc != "r.a" {
			return
		}
		mu.Lock()
		applied = append(applied, v.Generation)
		mu.Unlock()
	})
	fetch(t, c, "r.a")
	waitFor(t, "connected", c.Connected)

	r.Stop()
	ctx := context.Background()
	if _, err := other.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "r.a", Document: json.RawMessage(`{"n":9}`)}); err == nil {
		t.Fatal("a write succeeded with Redis stopped")
	}
	time.Sleep(200 * time.Millisecond)
	if got := num(c, "r.a"); got != 1 {
		t.Fatalf("during the outage r.a = %d, want the last document (1)", got)
	}
	// The server restarts while Redis is still down.
	p.stop()
	waitFor(t, "the SDK sees the server go", func() bool { return !c.Connected() })
	p.start()
	waitFor(t, "the SDK back on the server", c.Connected)
	if got := num(c, "r.a"); got != 1 {
		t.Fatalf("after reconnecting with Redis down r.a = %d, want 1", got)
	}

	// A scope registered during the outage: the server cannot read it, so
	// its watch is refused for now; the SDK asks again.
	if err := c.Register("r.b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)

	subs := served.Stats().Subscriptions
	r.Start()
	// r.b has no head anywhere yet. Its first commit goes in as soon as the
	// other replica can write, before the serving replica has resubscribed,
	// so the serving replica may never see its invalidation: it remembers
	// r.b as absent (the watch read it once Redis was back), and its
	// resubscription pass reads it again and delivers the head.
	activateOn(t, other, "r.b", 7)
	if served.Stats().Subscriptions > subs {
		t.Log("the serving replica resubscribed before the commit: the invalidation path was taken, not the pass")
	}
	waitFor(t, "r.b, registered during the outage, served once Redis is back", func() bool { return num(c, "r.b") == 7 })
	var last varplane.Generation
	for n := 2; n <= 3; n++ {
		last = activateOn(t, other, "r.a", n)
	}
	waitFor(t, "r.a converges on the newest head", func() bool { return num(c, "r.a") == 3 })
	if v, _ := c.Value("r.a"); v.Generation != last {
		t.Fatalf("r.a at generation %d, want %d", v.Generation, last)
	}
	// OnChange runs after the value is applied, so the callback for the
	// newest head may still be on its way when Value shows it.
	waitFor(t, "the OnChange call of the newest head", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(applied) > 0 && applied[len(applied)-1] == last
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(applied); i++ {
		if applied[i] <= applied[i-1] {
			t.Fatalf("generations applied out of order: %v", applied)
		}
	}
}

// activateOn commits {"n":n} to scope through e, retrying while its store
// is still reconnecting.
func activateOn(t *testing.T, e *varplane.Engine, scope varplane.Scope, n int) varplane.Generation {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := e.Status(ctx, scope)
		var rev varplane.Revision
		if err == nil {
			var cr varplane.CreateRevisionResult
			cr, err = e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
			rev = cr.Revision
		}
		if err == nil {
			var res varplane.ActivationResult
			if res, err = e.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev, ExpectedGeneration: st.Generation}); err == nil {
				return res.Generation
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit %d to %s: %v", n, scope, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
