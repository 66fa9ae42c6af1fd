package rpc

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

// StartTestServer opens a Server on a free loopback port over an engine on
// a memory store, all closed when t ends; tune, when set, changes the
// server's options first. Exported for the external tests.
func StartTestServer(t testing.TB, popts push.Options, auth varplane.Authorizer, tune func(*Server)) (*varplane.Engine, *push.Hub, *Server) {
	t.Helper()
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{Limits: varplane.Limits{MaxBodyBytes: 32 << 20, MaxStringBytes: 32 << 20}})
	popts.Logger = slog.New(slog.DiscardHandler)
	h := push.New(e, popts)
	srv := NewServer("127.0.0.1:0", h, auth)
	srv.GRPC.Logger = popts.Logger
	srv.Listener.Logger = popts.Logger
	if tune != nil {
		tune(srv)
	}
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		h.Close()
		e.Close()
		_ = st.Close()
	})
	return e, h, srv
}

// ActivateForTest stores doc as a revision of scope and activates it,
// returning the new generation. Exported for the external tests.
func ActivateForTest(t testing.TB, e *varplane.Engine, scope varplane.Scope, doc string) varplane.Generation {
	t.Helper()
	ctx := context.Background()
	rev, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(doc)})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := e.Status(ctx, scope)
	res, err := e.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev.Revision, ExpectedGeneration: st.Generation})
	if err != nil {
		t.Fatal(err)
	}
	return res.Generation
}
