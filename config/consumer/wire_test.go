package consumer_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/config/consumer"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/memory"
)

// TestHTTPFetchErrors: a refusal of the service, or of anything answering
// through the one error writer, comes back as the *varplane.Error it sent,
// details included; a proxy's page comes back as store-unavailable without
// its text.
func TestHTTPFetchErrors(t *testing.T) {
	st := memory.New()
	eng := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(func() { eng.Close(); _ = st.Close() })
	dep, err := config.NewDeployment(nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := config.NewService(eng, dep)
	if err != nil {
		t.Fatal(err)
	}
	grants, err := access.ParseTokens(strings.NewReader("writer id=writer roles=" + config.RoleCreate + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := access.Scoped(grants)
	if err != nil {
		t.Fatal(err)
	}
	real := httptest.NewServer(httpapi.NewHandler(svc.Engine(), httpapi.Options{Authorizer: auth, Values: svc, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(real.Close)

	exp, cur := varplane.Generation(2), varplane.Generation(5)
	cases := []struct {
		name    string
		url     string
		token   string
		handler http.HandlerFunc
		is      error
		check   func(t *testing.T, e *varplane.Error)
	}{
		{name: "the service refuses a token without the get role", url: real.URL, token: "writer", is: varplane.ErrForbidden},
		{name: "the service refuses an unknown token", url: real.URL, token: "nobody", is: varplane.ErrForbidden},
		{name: "conflict keeps its generations", handler: func(w http.ResponseWriter, r *http.Request) {
			wire.WriteError(w, r, nil, varplane.ConflictError("a.b", exp, cur))
		}, is: varplane.ErrConflict, check: func(t *testing.T, e *varplane.Error) {
			if e.Expected == nil || *e.Expected != exp || e.Current == nil || *e.Current != cur {
				t.Errorf("expected/current = %v/%v, want 2/5", e.Expected, e.Current)
			}
		}},
		{name: "invalid configuration keeps its issues", handler: func(w http.ResponseWriter, r *http.Request) {
			wire.WriteError(w, r, nil, &varplane.Error{Code: varplane.CodeInvalidConfiguration, Message: "does not fit",
				Issues: []varplane.Issue{{Code: "schema.type", Path: "/n", Message: "want a number"}}})
		}, is: &varplane.Error{Code: varplane.CodeInvalidConfiguration}, check: func(t *testing.T, e *varplane.Error) {
			if len(e.Issues) != 1 || e.Issues[0].Path != "/n" {
				t.Errorf("issues = %+v", e.Issues)
			}
		}},
		{name: "proxy 502", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>upstream values-7.internal refused</html>")
		}, is: varplane.ErrUnavailable, check: func(t *testing.T, e *varplane.Error) {
			if strings.Contains(e.Error(), "values-7") || strings.Contains(e.Error(), "html") {
				t.Errorf("the proxy's text reached the error: %v", e)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := c.url
			if c.handler != nil {
				srv := httptest.NewServer(c.handler)
				defer srv.Close()
				u = srv.URL
			}
			h := &consumer.HTTP{BaseURL: u, Token: c.token}
			_, err := h.Fetch(context.Background(), []config.Pair{{Component: "a.one", Epoch: strings.Repeat("0", 64)}})
			var e *varplane.Error
			if !errors.As(err, &e) || !errors.Is(err, c.is) {
				t.Fatalf("err = %v, want %v as a *varplane.Error", err, c.is)
			}
			if c.check != nil {
				c.check(t, e)
			}
		})
	}
}

// TestHTTPStreamBoundsEvents: an event over MaxEventBytes breaks the stream;
// the subscriber reconnects, resyncs, and the next stream's events arrive.
func TestHTTPStreamBoundsEvents(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		b := wire.AppendEvent(nil, "ready", "", []byte("{}"))
		b = wire.AppendComment(b, "heartbeat")
		if conns.Add(1) == 1 {
			b = wire.AppendEvent(b, "created", "", []byte(`{"component":"a.one","epoch":"e","configuration":{"v":"`+strings.Repeat("x", 4096)+`"},"created":1}`))
		} else {
			b = wire.AppendEvent(b, "created", "", []byte(`{"component":"a.one","epoch":"e","configuration":{"v":2},"created":2}`))
		}
		_, _ = w.Write(b)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	h := &consumer.HTTP{BaseURL: srv.URL, MaxEventBytes: 1024, ReconnectBase: time.Millisecond, ReconnectMax: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	got := make(chan config.CreatedEvent, 4)
	var resyncs atomic.Int32
	cancel, err := h.Subscribe(context.Background(), func(ev config.CreatedEvent) { got <- ev }, func() { resyncs.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	select {
	case ev := <-got:
		if ev.Created != 2 {
			t.Fatalf("first event delivered has created %d, want 2 (the over-large one is dropped)", ev.Created)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the over-large one")
	}
	if resyncs.Load() != 1 || conns.Load() != 2 {
		t.Fatalf("resyncs = %d, connections = %d; want 1 and 2", resyncs.Load(), conns.Load())
	}
}

// TestHTTPStreamRefused: a refused stream is the service's error.
func TestHTTPStreamRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, r, nil, varplane.Errorf(varplane.CodeForbidden, "no"))
	}))
	defer srv.Close()
	h := &consumer.HTTP{BaseURL: srv.URL}
	if _, err := h.Subscribe(context.Background(), func(config.CreatedEvent) {}, nil); !errors.Is(err, varplane.ErrForbidden) {
		t.Fatalf("Subscribe = %v, want forbidden", err)
	}
}
