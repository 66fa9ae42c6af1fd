package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/memory"
)

// realServer is the httpapi route table over an engine on a memory store.
func realServer(t *testing.T) *httptest.Server {
	t.Helper()
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: varplane.AllowAll, DisableOps: true, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); api.Close(); e.Close(); _ = st.Close() })
	return srv
}

// TestErrorsCrossTheWire: the SDK's requests get the server's refusals back
// as the *varplane.Error it sent, details included, and a proxy's page as
// store-unavailable without its text.
func TestErrorsCrossTheWire(t *testing.T) {
	srv := realServer(t)
	c, err := New(srv.URL, Options{RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	send := func(path string, body any) error {
		t.Helper()
		req, err := c.newRequest(context.Background(), http.MethodPost, path, nil, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := send("/admin/revisions", map[string]any{"scope": "a.b", "document": map[string]int{"n": 1}}); err != nil {
		t.Fatal(err)
	}

	t.Run("conflict", func(t *testing.T) {
		err := send("/admin/activate", map[string]any{"scope": "a.b", "revision": "sha256:" + strings.Repeat("0", 64), "expectedGeneration": 3})
		var e *varplane.Error
		if !errors.As(err, &e) || !errors.Is(err, varplane.ErrConflict) {
			t.Fatalf("err = %v, want a revision conflict", err)
		}
		if e.Expected == nil || *e.Expected != 3 || e.Current == nil || *e.Current != 0 {
			t.Fatalf("expected/current = %v/%v, want 3/0", e.Expected, e.Current)
		}
	})
	t.Run("invalid document", func(t *testing.T) {
		err := send("/admin/revisions", map[string]any{"scope": "agentic", "document": map[string]int{"other.x": 1}})
		var e *varplane.Error
		if !errors.As(err, &e) || !errors.Is(err, varplane.ErrInvalid) || len(e.Issues) == 0 {
			t.Fatalf("err = %v (%+v), want revision-invalid with issues", err, e)
		}
		if e.Issues[0].Code != "var.group-scope-shape" {
			t.Fatalf("issues = %+v", e.Issues)
		}
	})
	t.Run("proxy 502", func(t *testing.T) {
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body>nginx: upstream 10.0.0.7 refused</body></html>")
		}))
		defer proxy.Close()
		pc, err := New(proxy.URL, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Stop()
		if err := pc.Register("a.b"); err != nil {
			t.Fatal(err)
		}
		_, err = pc.batch([]varplane.Scope{"a.b"})
		if !errors.Is(err, varplane.ErrUnavailable) {
			t.Fatalf("err = %v, want store-unavailable", err)
		}
		if strings.Contains(err.Error(), "nginx") || strings.Contains(err.Error(), "10.0.0.7") {
			t.Fatalf("the proxy's text reached the error: %v", err)
		}
	})
}

// TestOverLargeEventReconnects: a stream that sends an event larger than
// MaxEventBytes (here one that never ends) is cut at the bound and the
// client reconnects, instead of buffering without end; the next connection
// serves normally.
func TestOverLargeEventReconnects(t *testing.T) {
	const total = 64 << 20 // what the bad server would send
	var conns atomic.Int32
	written := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/vars/watch" { // Fetch's batch reads: nothing served, so only the stream can serve
			wire.WriteJSON(w, http.StatusOK, map[string]any{"items": []any{}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if conns.Add(1) == 1 {
			_, _ = io.WriteString(w, "event: head\ndata: ")
			chunk := []byte(strings.Repeat("x", 32<<10))
			var n int64
			for n < total {
				k, err := w.Write(chunk)
				n += int64(k)
				if err != nil {
					break
				}
			}
			written <- n
			<-r.Context().Done()
			return
		}
		fmt.Fprintf(w, "event: head\nid: a.x@1\ndata: %s\n\n", `{"scope":"a.x","generation":1,"revision":"sha256:ab","values":{"a.x":{"ok":true}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{MaxEventBytes: 64 << 10, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		StreamIdleTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.Register("a.x"); err != nil {
		t.Fatal(err)
	}
	c.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := c.Fetch(ctx, "a.x")
	if err != nil || string(v.Raw) != `{"ok":true}` {
		t.Fatalf("Fetch = %+v, %v; want the value of the second connection", v, err)
	}
	select {
	case n := <-written:
		if n >= total {
			t.Fatalf("the client read all %d bytes of the over-large event", n)
		}
	case <-ctx.Done():
		t.Fatal("the bad stream was never cut")
	}
}

func TestReadEventsBound(t *testing.T) {
	c := newTestClient(t, Options{MaxEventBytes: 100})
	err := c.readEvents(strings.NewReader("event: head\ndata: "+strings.Repeat("x", 200)+"\n\n"), func() {})
	if !errors.Is(err, wire.ErrEventTooLarge) {
		t.Fatalf("err = %v, want wire.ErrEventTooLarge", err)
	}
}
