package push_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/push/pushtest"
)

// The fixtures of package pushtest, under the names these tests use.
var (
	newEngine   = pushtest.Engine
	newHub      = pushtest.Hub
	activate    = pushtest.Activate
	tryActivate = pushtest.TryActivate
	deactivate  = pushtest.Deactivate
)

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
