package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
)

// TestLostAnswerOfAWrite: a write whose request reached the server and whose
// answer never came may have committed, so the SDK says outcome-unknown; a
// write that never reached a server (nothing listens) is a plain transport
// failure, and a read that loses its answer is too (it changed nothing).
func TestLostAnswerOfAWrite(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the whole request arrives
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close() // and the answer is lost
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	a, err := client.NewAdmin(srv.URL, client.AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Publish(ctx, varplane.PublishRequest{Scope: "a.b", Document: []byte(`{"x":1}`), ExpectedGeneration: 0})
	if !errors.Is(err, varplane.ErrOutcomeUnknown) {
		t.Errorf("publish whose answer was lost: %v, want outcome-unknown", err)
	}
	if _, err := a.Status(ctx, "a.b"); err == nil || errors.Is(err, varplane.ErrOutcomeUnknown) {
		t.Errorf("read whose answer was lost: %v, want a transport failure", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	down, err := client.NewAdmin("http://"+addr, client.AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = down.Publish(ctx, varplane.PublishRequest{Scope: "a.b", Document: []byte(`{"x":1}`), ExpectedGeneration: 0})
	if err == nil || errors.Is(err, varplane.ErrOutcomeUnknown) {
		t.Errorf("publish to a closed port: %v, want a transport failure (nothing was sent)", err)
	}
}
