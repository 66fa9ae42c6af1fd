package client_test

import (
	"encoding/json"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
)

// Over TransportGRPC, a client holds one Watch stream for all its scopes:
// a scope registered later is one more watch on it; the client keeps
// serving through a server restart and converges after; a deactivation
// drops exactly the scopes it cleared.
func TestSDKOverWatch(t *testing.T) {
	p := startPlane(t, planeOptions{})
	p.activate("w.a", `{"n":1}`)
	p.activate("w.b", `{"n":1}`)
	c := startClient(t, p, client.Options{Transport: client.TransportGRPC}, "w.a")
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
	c := startClient(t, p, client.Options{Static: static, Transport: client.TransportGRPC}, scopes...)
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
