package client_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/client/grpcwatch"
)

// Over the gRPC transport (grpcwatch), a client holds one Watch stream for all its scopes:
// a scope registered later is one more watch on it; the client keeps
// serving through a server restart and converges after; a deactivation
// drops exactly the scopes it cleared.
func TestSDKOverWatch(t *testing.T) {
	p := startPlane(t, planeOptions{})
	p.activate("w.a", `{"n":1}`)
	p.activate("w.b", `{"n":1}`)
	c := startClient(t, p, client.Options{Stream: grpcwatch.Stream{}}, "w.a")
	fetch(t, c, "w.a")
	waitFor(t, "connected", c.Connected)
	if err := c.Register("w.b"); err != nil {
		t.Fatal(err)
	}
	fetch(t, c, "w.b")
	waitFor(t, "one stream with two watches", func() bool {
		st := p.grpc.Stats()
		return st.Streams == 1 && st.Watches == 2
	})
	p.activate("w.b", `{"n":2}`)
	waitFor(t, "w.b=2 over the watch", func() bool { return num(c, "w.b") == 2 })

	// A restart: the client serves what it holds, then converges.
	p.stop()
	waitFor(t, "the outage seen", func() bool { return !c.Connected() })
	p.activateDirect("w.a", `{"n":3}`)
	if got := num(c, "w.a"); got != 1 {
		t.Errorf("during the outage w.a = %d, want the last value 1", got)
	}
	p.start()
	waitFor(t, "w.a=3 after the restart", func() bool { return num(c, "w.a") == 3 })
	waitFor(t, "reconnected", c.Connected)
}

func TestSDKOverWatchDropsExactlyTheDeactivatedScopes(t *testing.T) {
	p := startPlane(t, planeOptions{})
	p.activate("g", `{"g.n":1}`)
	p.activate("g.a", `{"n":1}`)
	p.activate("g.b", `{"n":1}`)
	p.activate("h.c", `{"n":1}`)
	static := map[varplane.Scope]json.RawMessage{"g.a": json.RawMessage(`{"n":-7}`)}
	scopes := []varplane.Scope{"g", "g.a", "g.b", "h.c"}
	c := startClient(t, p, client.Options{Static: static, Stream: grpcwatch.Stream{}}, scopes...)
	for _, sc := range scopes {
		fetch(t, c, sc)
	}
	waitFor(t, "connected", c.Connected)
	waitFor(t, "four watches", func() bool { return p.grpc.Stats().Watches == 4 })
	p.deactivate("g")
	waitFor(t, "g dropped", func() bool { _, ok := c.Value("g"); return !ok })
	waitFor(t, "g.b dropped", func() bool { _, ok := c.Value("g.b"); return !ok })
	waitFor(t, "g.a falls back to static", func() bool { v, _ := c.Value("g.a"); return v.Tier == client.TierStatic })
	if v, _ := c.Value("h.c"); v.Tier != client.TierRuntime || num(c, "h.c") != 1 {
		t.Errorf("h.c = %+v, want its untouched runtime value", v)
	}
}

// A server that ages its connections (--max-connection-age) sends each
// GOAWAY and closes it after the grace: the SDK's Watch moves to a new
// connection each time and, with commits going on throughout, ends on the
// last one, every generation it applied newer than the one before.
func TestSDKOverWatchAcrossMaxConnectionAge(t *testing.T) {
	p := startPlane(t, planeOptions{maxConnAge: 200 * time.Millisecond, maxConnAgeGrace: 200 * time.Millisecond})
	p.activate("age.x", `{"n":0}`)
	var mu sync.Mutex
	var applied []varplane.Generation
	c := startClient(t, p, client.Options{Stream: grpcwatch.Stream{}}, "age.x")
	c.OnChange(func(_ varplane.Scope, _, v client.Value) {
		mu.Lock()
		applied = append(applied, v.Generation)
		mu.Unlock()
	})
	fetch(t, c, "age.x")
	waitFor(t, "connected", c.Connected)
	const commits = 40
	for n := 1; n <= commits; n++ {
		p.activateDirect("age.x", fmt.Sprintf(`{"n":%d}`, n))
		time.Sleep(40 * time.Millisecond)
	}
	waitFor(t, "the last commit", func() bool { return num(c, "age.x") == commits })
	if n := p.guard.Stats().AgedGoAways; n < 3 {
		t.Fatalf("%d connections aged during %d commits, want several", n, commits)
	}
	last := p.generation("age.x")
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(applied); i++ {
		if applied[i] <= applied[i-1] {
			t.Fatalf("generations applied out of order: %v", applied)
		}
	}
	if applied[len(applied)-1] != last {
		t.Fatalf("applied %v, want the last at %d", applied, last)
	}
}
