package openfeature_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	of "github.com/open-feature/go-sdk/openfeature"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/client/openfeature"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire/wiretest"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

var quiet = slog.New(slog.DiscardHandler)

// server is a varplane server in process that can go away and come back
// on the same address.
type server struct {
	t      *testing.T
	engine *varplane.Engine
	api    *httpapi.Handler
	addr   string
	mu     sync.Mutex
	srv    *http.Server
}

func startServer(t *testing.T) *server { return startServerWith(t, varplane.AllowAll) }

func startServerWith(t *testing.T, auth varplane.Authorizer) *server {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{Logger: quiet})
	hub := push.New(e, push.Options{Logger: quiet})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: auth, Logger: quiet, Hub: hub})
	s := &server{t: t, engine: e, api: api, addr: "127.0.0.1:0"}
	s.start()
	t.Cleanup(func() { s.stop(); api.Close(); hub.Close(); e.Close(); _ = st.Close() })
	return s
}

func (s *server) start() {
	s.t.Helper()
	ln := wiretest.Listen(s.t, s.addr)
	s.addr = ln.Addr().String()
	srv := &http.Server{Handler: s.api}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (s *server) stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		s.api.CloseStreams()
		_ = srv.Close()
	}
}

func (s *server) url() string { return "http://" + s.addr }

func (s *server) publish(scope, doc string) {
	s.t.Helper()
	sc := varplane.Scope(scope)
	st, err := s.engine.Status(context.Background(), sc)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.engine.Publish(context.Background(), varplane.PublishRequest{Scope: sc, Document: json.RawMessage(doc), ExpectedGeneration: st.Generation}); err != nil {
		s.t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// useProvider sets a provider over s as the provider of the test's own
// domain of the official Go SDK, and returns it with a client of that
// domain; it is shut down at cleanup.
func useProvider(t *testing.T, s *server, copts client.Options, opts openfeature.Options) (*openfeature.Provider, *of.Client) {
	t.Helper()
	p, err := openfeature.New(s.url(), copts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := of.SetNamedProviderAndWait(t.Name(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Shutdown)
	return p, of.NewClient(t.Name())
}

// The provider, driven through the official Go SDK: boolean, string,
// number and object flags read from the live snapshot, a change after a
// publish (and its event naming the flag), the protocol's errors, and
// STALE then READY when the server goes away and comes back.
func TestProviderThroughGoSDK(t *testing.T) {
	s := startServer(t)
	s.publish("agentic.lanes.vinci", `{"enabled":true,"name":"vinci","ratio":0.25,"max":12,"limits":{"rps":5},"big":9007199254740991}`)

	_, c := useProvider(t, s, client.Options{Logger: quiet, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, StreamIdleTimeout: time.Second},
		openfeature.Options{Scopes: []varplane.Scope{"agentic.lanes.vinci"}, FetchTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	ec := of.NewEvaluationContext("user-1", nil)

	var evMu sync.Mutex
	var events []of.EventDetails
	var states []of.EventType
	onChange := func(d of.EventDetails) { evMu.Lock(); events = append(events, d); evMu.Unlock() }
	onStale := func(of.EventDetails) { evMu.Lock(); states = append(states, of.ProviderStale); evMu.Unlock() }
	onReady := func(of.EventDetails) { evMu.Lock(); states = append(states, of.ProviderReady); evMu.Unlock() }
	c.AddHandler(of.ProviderConfigChange, &onChange)
	c.AddHandler(of.ProviderStale, &onStale)
	c.AddHandler(of.ProviderReady, &onReady)

	b, err := c.BooleanValueDetails(ctx, "agentic.lanes.vinci#/enabled", false, ec)
	if err != nil || !b.Value || b.Reason != of.StaticReason || b.Variant == "" || b.FlagMetadata["generation"] != int64(1) {
		t.Fatalf("boolean: %+v %v", b, err)
	}
	if s, err := c.StringValue(ctx, "agentic.lanes.vinci#/name", "", ec); err != nil || s != "vinci" {
		t.Errorf("string: %q %v", s, err)
	}
	if f, err := c.FloatValue(ctx, "agentic.lanes.vinci#/ratio", 0, ec); err != nil || f != 0.25 {
		t.Errorf("float: %v %v", f, err)
	}
	if n, err := c.IntValue(ctx, "agentic.lanes.vinci#/max", 0, ec); err != nil || n != 12 {
		t.Errorf("int: %v %v", n, err)
	}
	if n, err := c.IntValue(ctx, "agentic.lanes.vinci#/big", 0, ec); err != nil || n != 9007199254740991 {
		t.Errorf("int beyond 2^53-1's neighbours: %v %v", n, err)
	}
	if o, err := c.ObjectValue(ctx, "agentic.lanes.vinci#/limits", nil, ec); err != nil || o.(map[string]any)["rps"] != float64(5) {
		t.Errorf("object: %v %v", o, err)
	}
	if o, err := c.ObjectValue(ctx, "agentic.lanes.vinci", nil, ec); err != nil || o.(map[string]any)["name"] != "vinci" {
		t.Errorf("whole document: %v %v", o, err)
	}

	// The protocol's errors: the default value and the code.
	errCases := []struct {
		name string
		eval func() (of.ErrorCode, error)
		code of.ErrorCode
	}{
		{"type mismatch", func() (of.ErrorCode, error) {
			d, err := c.BooleanValueDetails(ctx, "agentic.lanes.vinci#/name", false, ec)
			return d.ErrorCode, err
		}, of.TypeMismatchCode},
		{"fraction as int", func() (of.ErrorCode, error) {
			d, err := c.IntValueDetails(ctx, "agentic.lanes.vinci#/ratio", 7, ec)
			if d.Value != 7 {
				t.Errorf("fraction as int: value %d, want the default", d.Value)
			}
			return d.ErrorCode, err
		}, of.TypeMismatchCode},
		{"no such member", func() (of.ErrorCode, error) {
			d, err := c.StringValueDetails(ctx, "agentic.lanes.vinci#/nothing", "def", ec)
			return d.ErrorCode, err
		}, of.FlagNotFoundCode},
		{"no such scope", func() (of.ErrorCode, error) {
			d, err := c.StringValueDetails(ctx, "no.such.scope#/x", "def", ec)
			return d.ErrorCode, err
		}, of.FlagNotFoundCode},
		{"malformed key", func() (of.ErrorCode, error) {
			d, err := c.StringValueDetails(ctx, "agentic.lanes.vinci#x", "def", ec)
			return d.ErrorCode, err
		}, of.FlagNotFoundCode},
	}
	for _, tc := range errCases {
		code, err := tc.eval()
		if err == nil || code != tc.code {
			t.Errorf("%s: code %s err %v, want %s", tc.name, code, err, tc.code)
		}
	}

	// A publish changes the value, and the change event names the flag.
	s.publish("agentic.lanes.vinci", `{"enabled":false,"name":"da vinci"}`)
	waitFor(t, "the published value", func() bool {
		v, _ := c.BooleanValue(ctx, "agentic.lanes.vinci#/enabled", true, ec)
		return !v
	})
	waitFor(t, "the change event", func() bool {
		evMu.Lock()
		defer evMu.Unlock()
		for _, e := range events {
			if slices.Contains(e.FlagChanges, "agentic.lanes.vinci#/enabled") && slices.Contains(e.FlagChanges, "agentic.lanes.vinci") {
				return true
			}
		}
		return false
	})

	// The server goes away: STALE, the held values still served; back: READY.
	s.stop()
	waitFor(t, "PROVIDER_STALE", func() bool { evMu.Lock(); defer evMu.Unlock(); return slices.Contains(states, of.ProviderStale) })
	if c.State() != of.StaleState {
		t.Errorf("state while away: %s", c.State())
	}
	if v, err := c.StringValue(ctx, "agentic.lanes.vinci#/name", "", ec); err != nil || v != "da vinci" {
		t.Errorf("while away: %q %v", v, err)
	}
	if d, err := c.StringValueDetails(ctx, "never.held#/x", "def", ec); err == nil || d.ErrorCode != of.GeneralCode {
		t.Errorf("a scope never held while away: %+v %v", d, err)
	}
	s.start()
	waitFor(t, "READY again", func() bool { return c.State() == of.ReadyState })
}

// Init fails when the server cannot be reached: the provider is in ERROR.
func TestProviderInitFailsWithoutServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p, err := openfeature.New("http://"+addr, client.Options{Logger: quiet, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		openfeature.Options{Scopes: []varplane.Scope{"a.b"}, InitTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	domain := t.Name()
	err = of.SetNamedProviderAndWait(domain, p)
	t.Cleanup(p.Shutdown)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && err.Error() == "" {
		t.Fatalf("SetProviderAndWait: %v", err)
	}
	if st := of.NewClient(domain).State(); st != of.ErrorState {
		t.Errorf("state %s, want ERROR", st)
	}
}

// A scope first met in an evaluation is fetched once: a later evaluation
// of it, while it still has no value, answers at once (this test would
// hang on the hour-long FetchTimeout otherwise), the client follows it and
// serves it once published, and at most MaxScopes such scopes are taken.
func TestProviderScopesMetInEvaluations(t *testing.T) {
	s := startServer(t)
	s.publish("app.known", `{"on":true}`)
	p, c := useProvider(t, s, client.Options{Logger: quiet},
		openfeature.Options{Scopes: []varplane.Scope{"app.known"}, FetchTimeout: time.Hour, MaxScopes: 2})
	ec := of.NewEvaluationContext("u", nil)

	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if d, _ := c.BooleanValueDetails(short, "app.later#/on", false, ec); d.ErrorCode != of.FlagNotFoundCode {
		t.Fatalf("first evaluation of a scope without a head: %+v", d)
	}
	if d, _ := c.BooleanValueDetails(context.Background(), "app.later#/on", false, ec); d.ErrorCode != of.FlagNotFoundCode {
		t.Fatalf("second evaluation: %+v", d)
	}
	s.publish("app.later", `{"on":true}`)
	waitFor(t, "the scope published later", func() bool {
		v, _ := c.BooleanValue(context.Background(), "app.later#/on", false, ec)
		return v
	})
	// A second scope met in an evaluation is taken; a third is not.
	s.publish("app.second", `{"on":true}`)
	if v, err := c.BooleanValue(context.Background(), "app.second#/on", false, ec); err != nil || !v {
		t.Fatalf("second scope: %v %v", v, err)
	}
	d, _ := c.BooleanValueDetails(context.Background(), "app.third#/on", false, ec)
	if d.ErrorCode != of.GeneralCode || !strings.Contains(d.ErrorMessage, "MaxScopes") {
		t.Fatalf("past MaxScopes: %+v", d)
	}
	if _, ok := p.Client().Value("app.third"); ok {
		t.Error("the scope past MaxScopes was registered")
	}
}

// The server's read authorization holds through the provider: a flag of a
// scope the token may not read is GENERAL, and its default value.
func TestProviderTokenRefused(t *testing.T) {
	auth, err := access.Scoped([]access.Grant{{Token: "reader", Kinds: []varplane.Kind{varplane.KindRead}, Prefixes: []string{"app."}}})
	if err != nil {
		t.Fatal(err)
	}
	s := startServerWith(t, auth)
	s.publish("app.mine", `{"on":true}`)
	s.publish("other.theirs", `{"on":true}`)
	_, c := useProvider(t, s, client.Options{Logger: quiet, Token: "reader"}, openfeature.Options{Scopes: []varplane.Scope{"app.mine"}})
	ec := of.NewEvaluationContext("u", nil)
	if v, err := c.BooleanValue(context.Background(), "app.mine#/on", false, ec); err != nil || !v {
		t.Fatalf("readable: %v %v", v, err)
	}
	for i := 0; i < 2; i++ { // the first asks the server, the second remembers
		d, err := c.BooleanValueDetails(context.Background(), "other.theirs#/on", false, ec)
		if err == nil || d.Value || d.ErrorCode != of.GeneralCode || !strings.Contains(d.ErrorMessage, "may not read") {
			t.Fatalf("evaluation %d of a scope the token may not read: %+v %v", i, d, err)
		}
	}
}
