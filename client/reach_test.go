package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/internal/syncbuf"
)

// refuseSecret refuses every access to the scopes under "secret".
var refuseSecret = varplane.AuthorizerFunc(func(_ context.Context, a varplane.Access) (varplane.Identity, error) {
	if strings.HasPrefix(string(a.Scope), "secret") {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "this token may not read %s", a.Scope)
	}
	return varplane.Identity{ID: "t"}, nil
})

// TestFetchRefusedEndsAtOnce: a fetch the server refuses (403) ends with the
// server's error instead of retrying until its context ends; a scope asked
// for in the same batch is still served, and the stream keeps following
// the readable scopes (the refused one left out of it).
func TestFetchRefusedEndsAtOnce(t *testing.T) {
	p := startPlane(t, planeOptions{authz: refuseSecret})
	p.activate("ok.a", `{"n":1}`)
	p.activateDirect("secret.x", `{"n":1}`)
	c := startClient(t, p, client.Options{BatchWindow: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var refused, served error
	wg.Add(2)
	go func() { defer wg.Done(); _, refused = c.Fetch(ctx, "secret.x") }()
	go func() { defer wg.Done(); _, served = c.Fetch(ctx, "ok.a") }()
	wg.Wait()
	if varplane.ErrorCode(refused) != varplane.CodeForbidden || ctx.Err() != nil {
		t.Fatalf("refused fetch = %v (context %v), want forbidden at once", refused, ctx.Err())
	}
	if served != nil {
		t.Fatalf("the readable scope's fetch = %v", served)
	}
	waitFor(t, "the stream established", c.Connected)
	p.activate("ok.a", `{"n":2}`)
	waitFor(t, "ok.a followed to 2", func() bool { return num(c, "ok.a") == 2 })
}

// TestFetchWrongBaseEndsAtOnce: a server without the route (a wrong base
// path answers 404) ends the fetch with not-found.
func TestFetchWrongBaseEndsAtOnce(t *testing.T) {
	p := startPlane(t, planeOptions{})
	c := startClient(t, p, client.Options{Base: "/nothing-here"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Fetch(ctx, "a.b"); varplane.ErrorCode(err) != varplane.CodeNotFound || ctx.Err() != nil {
		t.Fatalf("fetch = %v, want not-found at once", err)
	}
}

// TestFetchUnservedNamesScope: a fetch whose context ends before the
// scope is served says which scope it waited for and why it may have,
// and still wraps the context's error.
func TestFetchUnservedNamesScope(t *testing.T) {
	p := startPlane(t, planeOptions{})
	c := startClient(t, p, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Fetch(ctx, "a.never")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "fetch a.never: not served") || !strings.Contains(err.Error(), "no head") {
		t.Fatalf("fetch of an unserved scope = %v", err)
	}
}

// TestFailoverAndConnectionReports: with two servers, a client whose
// server goes away moves to the other, keeps following and fetching
// there; it logs the loss once (WARN) and the return (INFO), and
// OnConnection hears each change.
func TestFailoverAndConnectionReports(t *testing.T) {
	p1 := startPlane(t, planeOptions{})
	p2 := startPlane(t, planeOptions{})
	for _, p := range []*plane{p1, p2} {
		p.activate("f.a", `{"n":1}`)
		p.activate("f.b", `{"n":5}`)
	}
	var logs syncbuf.Buffer
	var mu sync.Mutex
	var events []bool
	c := startClient(t, p1, client.Options{
		Servers: []string{p2.url()},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		OnConnection: func(ok bool, err error) {
			mu.Lock()
			events = append(events, ok)
			mu.Unlock()
		},
	}, "f.a")
	fetch(t, c, "f.a")
	waitFor(t, "connected to the first server", c.Connected)

	p1.stop()
	waitFor(t, "the stream on the second server", func() bool {
		return c.Connected() && strings.Contains(logs.String(), "trying the next")
	})
	if v := fetch(t, c, "f.b"); !strings.Contains(string(v.Raw), `"n":5`) {
		t.Fatalf("f.b from the second server = %s", v.Raw)
	}
	p2.activate("f.a", `{"n":2}`)
	waitFor(t, "f.a followed on the second server", func() bool { return num(c, "f.a") == 2 })

	mu.Lock()
	got := append([]bool(nil), events...)
	mu.Unlock()
	if len(got) < 3 || !got[0] || got[1] || !got[len(got)-1] {
		t.Fatalf("OnConnection heard %v, want reached, lost, ..., reached", got)
	}
	text := logs.String()
	if strings.Count(text, "varplane server unreachable") < 1 || !strings.Contains(text, "reached again") {
		t.Fatalf("logs lack the loss or the return:\n%s", text)
	}
}
