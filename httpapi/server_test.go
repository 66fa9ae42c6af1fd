package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane/httpapi"
)

func openServer(t *testing.T, h http.Handler, configure func(*httpapi.Server)) *httpapi.Server {
	t.Helper()
	s := httpapi.NewServer("127.0.0.1:0", h)
	s.Logger = quiet
	if configure != nil {
		configure(s)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestServerServesThePlane(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	s := openServer(t, p.h, nil)
	if s.URL() == "" || !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL = %q", s.URL())
	}
	resp, err := http.Get(s.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz = %d", resp.StatusCode)
	}
	if err := s.Open(); err == nil {
		t.Error("second Open succeeded")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestServerDefaults(t *testing.T) {
	s := httpapi.NewServer(":0", http.NotFoundHandler())
	if s.ReadHeaderTimeout != 5*time.Second || s.ReadTimeout != 30*time.Second || s.WriteTimeout != 30*time.Second ||
		s.IdleTimeout != 120*time.Second || s.MaxHeaderBytes <= 0 {
		t.Errorf("defaults = %+v", s)
	}
	if s.URL() != "" {
		t.Errorf("URL before Open = %q", s.URL())
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("Close before Open: %v", err)
	}
}

func TestServerOpenReportsListenErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := httpapi.NewServer(ln.Addr().String(), http.NotFoundHandler())
	if err := s.Open(); err == nil {
		_ = s.Close(context.Background())
		t.Fatal("Open on a taken port succeeded")
	}
}

func TestServerCloseDrainsInFlightRequests(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var shutdownHooks atomic.Int32
	s := openServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "done")
	}), func(s *httpapi.Server) { s.RegisterOnShutdown(func() { shutdownHooks.Add(1) }) })

	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get(s.URL() + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()

	// Wait until the listener refuses new connections: shutdown has begun.
	addr := strings.TrimPrefix(s.URL(), "http://")
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		_ = c.Close()
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the in-flight request finished", err)
	default:
	}
	close(release)
	if r := <-got; r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request = %q, %v; want done", r.body, r.err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if shutdownHooks.Load() == 0 {
		// Hooks run in their own goroutine; give the scheduler a moment.
		time.Sleep(50 * time.Millisecond)
		if shutdownHooks.Load() == 0 {
			t.Error("shutdown hook did not run")
		}
	}
}

func TestServerCloseCutsStuckStreamsAtTheDeadline(t *testing.T) {
	started := make(chan struct{})
	cut := make(chan struct{})
	s := openServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		close(started)
		<-r.Context().Done()
		close(cut)
	}), nil)
	go func() {
		resp, err := http.Get(s.URL() + "/stream")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want deadline exceeded", err)
	}
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatal("stream was not cut")
	}
}

func TestWatchRouteOutlivesWriteTimeout(t *testing.T) {
	p, _ := newPlaneHub(t, httpapi.Options{})
	s := openServer(t, p.h, func(s *httpapi.Server) { s.WriteTimeout, s.ReadTimeout = 150*time.Millisecond, 150*time.Millisecond })
	resp, err := http.Get(s.URL() + "/vars/watch?key=a.b")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ids := make(chan string, 4)
	go func() {
		defer close(ids)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
				ids <- id
			}
		}
	}()
	next := func() string {
		select {
		case id := <-ids:
			return id
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5s")
			return ""
		}
	}
	if id := next(); id != "a.b@0" {
		t.Fatalf("first event %s, want a.b@0", id)
	}
	time.Sleep(400 * time.Millisecond) // beyond the server's WriteTimeout
	p.activate("a.b", p.create("a.b", `1`), 0)
	if id := next(); id != "a.b@1" {
		t.Errorf("event after the write timeout %s, want a.b@1", id)
	}
}
