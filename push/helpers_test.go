package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/store/memory"
)

func newEngine(t testing.TB) *varplane.Engine {
	t.Helper()
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(func() { e.Close(); _ = st.Close() })
	return e
}

func newHub(t *testing.T, e *varplane.Engine, opts push.Options) *push.Hub {
	t.Helper()
	h := push.New(e, opts)
	t.Cleanup(h.Close)
	return h
}

// activate stores doc in scope and activates it, returning the new generation.
func activate(t *testing.T, e *varplane.Engine, scope varplane.Scope, doc string) varplane.Generation {
	t.Helper()
	g, err := tryActivate(e, scope, doc)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func tryActivate(e *varplane.Engine, scope varplane.Scope, doc string) (varplane.Generation, error) {
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

func deactivate(t *testing.T, e *varplane.Engine, scope varplane.Scope) varplane.DeactivationResult {
	t.Helper()
	ctx := context.Background()
	st, err := e.Status(ctx, scope)
	if err != nil {
		t.Fatalf("status %s: %v", scope, err)
	}
	res, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: st.Generation})
	if err != nil {
		t.Fatalf("deactivate %s: %v", scope, err)
	}
	return res
}

func subscribe(t *testing.T, h *push.Hub, f push.Filter, held map[varplane.Scope]varplane.Generation) *push.Subscription {
	t.Helper()
	s, err := h.Subscribe(context.Background(), f, held)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func next(t *testing.T, s *push.Subscription) push.Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return b
}

func mustEmpty(t *testing.T, s *push.Subscription) {
	t.Helper()
	b, ok, err := s.TryNext(context.Background())
	if err != nil || ok {
		t.Fatalf("TryNext = %s, %v, %v; want nothing pending", describe(b), ok, err)
	}
}

// describe renders a batch as "scope@gen" (head) and "scope@gen!" (no head).
func describe(b push.Batch) string {
	out := ""
	if b.Snapshot {
		out = "snapshot:"
	}
	for i, u := range b.Updates {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s@%d", u.Scope, u.Generation)
		if u.Head == nil {
			out += "!"
		}
	}
	return out
}
