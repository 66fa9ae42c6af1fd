// Package pushtest holds what the tests of the push hub and of its
// transports (the watch route of httpapi) build their fixtures with: an
// engine over a memory store, a hub over it, and commits of scopes.
package pushtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

// Engine returns an engine over a new memory store, closed when tb ends.
func Engine(tb testing.TB) *varplane.Engine {
	tb.Helper()
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	tb.Cleanup(func() { e.Close(); _ = st.Close() })
	return e
}

// Hub returns a hub over e, closed when tb ends.
func Hub(tb testing.TB, e *varplane.Engine, opts push.Options) *push.Hub {
	tb.Helper()
	h := push.New(e, opts)
	tb.Cleanup(h.Close)
	return h
}

// Activate stores doc in scope and activates it, returning the new
// generation.
func Activate(tb testing.TB, e *varplane.Engine, scope varplane.Scope, doc string) varplane.Generation {
	tb.Helper()
	g, err := TryActivate(e, scope, doc)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// TryActivate is Activate returning its error (for goroutines).
func TryActivate(e *varplane.Engine, scope varplane.Scope, doc string) (varplane.Generation, error) {
	ctx := context.Background()
	rev, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(doc)})
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", scope, err)
	}
	st, err := e.Status(ctx, scope)
	if err != nil {
		return 0, fmt.Errorf("status %s: %w", scope, err)
	}
	res, err := e.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev.Revision, ExpectedGeneration: st.Generation})
	if err != nil {
		return 0, fmt.Errorf("activate %s: %w", scope, err)
	}
	return res.Generation, nil
}

// Deactivate deactivates scope (and its active descendants) at its current
// generation.
func Deactivate(tb testing.TB, e *varplane.Engine, scope varplane.Scope) varplane.DeactivationResult {
	tb.Helper()
	ctx := context.Background()
	st, err := e.Status(ctx, scope)
	if err != nil {
		tb.Fatalf("status %s: %v", scope, err)
	}
	res, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: st.Generation})
	if err != nil {
		tb.Fatalf("deactivate %s: %v", scope, err)
	}
	return res
}
