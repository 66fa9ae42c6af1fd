// Package pushtest holds what the tests of the push hub and of its
// transports (the watch route of httpapi) build their fixtures with: an
// engine over a memory store, a hub over it, and commits of scopes.
package pushtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
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

// Tokens is an authorizer over a set of accepted bearer tokens that a test
// revokes from: no token is unauthorized, a token not in the set (or
// revoked) forbidden, and an accepted one allowed everything as the
// identity named by the token, which holds every role. Safe for
// concurrent use.
type Tokens struct {
	mu sync.Mutex
	ok map[string]bool
}

// NewTokens returns Tokens accepting tokens.
func NewTokens(tokens ...string) *Tokens {
	t := &Tokens{ok: map[string]bool{}}
	for _, tk := range tokens {
		t.ok[tk] = true
	}
	return t
}

// Revoke stops accepting token.
func (t *Tokens) Revoke(token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ok, token)
}

// Authorize implements varplane.Authorizer.
func (t *Tokens) Authorize(_ context.Context, a varplane.Access) (varplane.Identity, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case a.Token == "":
		return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
	case !t.ok[a.Token]:
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "the token is not accepted")
	}
	return varplane.Identity{ID: a.Token, Roles: []string{"*"}}, nil
}

// StoreDigest renders everything e's store holds that a request could
// change, one line a scope: its generation and head revision. Attack tests
// compare it before and after to show that nothing stored changed.
func StoreDigest(tb testing.TB, e *varplane.Engine) string {
	tb.Helper()
	ctx := context.Background()
	scopes, err := e.Store().Scopes(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, sc := range scopes {
		st, err := e.Store().State(ctx, sc)
		if err != nil {
			tb.Fatal(err)
		}
		rev := ""
		if st.Head != nil {
			rev = string(st.Head.Revision)
		}
		fmt.Fprintf(&b, "%s@%d:%s\n", sc, st.Generation, rev)
	}
	return b.String()
}
