package varplane_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/varplane/varplane"
)

// Issue 33 item 7: without authentication the client's claimed actor is the
// event's actor, marked unauthenticated (as the reference var server records
// it); with authentication the identity is the actor and the claim stays
// beside it. Every mutation of the engine builds its events the same way, so
// every entrance (the var API, the CLI, the console) records it alike.
func TestActorOfEveryEvent(t *testing.T) {
	type want struct {
		actor, onBehalfOf string
		unauthenticated   bool
	}
	for _, tc := range []struct {
		name              string
		actor, onBehalfOf string
		want              want
	}{
		{"anonymous with a claim", varplane.AnonymousID, "ana", want{"ana", "", true}},
		{"anonymous without a claim", varplane.AnonymousID, "", want{varplane.AnonymousID, "", false}},
		{"authenticated with a claim", "token-ops", "ana", want{"token-ops", "ana", false}},
		{"authenticated without a claim", "token-ops", "", want{"token-ops", "", false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t)
			ctx := context.Background()
			check := func(what string, ev varplane.Event) {
				t.Helper()
				if got := (want{ev.Actor, ev.OnBehalfOf, ev.Unauthenticated}); got != tc.want {
					t.Errorf("%s (%s): actor %+v, want %+v", what, ev.Kind, got, tc.want)
				}
			}
			last := func(scope varplane.Scope) varplane.Event {
				t.Helper()
				h, err := e.History(ctx, scope)
				if err != nil || len(h) == 0 {
					t.Fatalf("history of %s: %d events, %v", scope, len(h), err)
				}
				return h[len(h)-1]
			}
			a, b := tc.actor, tc.onBehalfOf
			c, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "app.k", Document: json.RawMessage(`{"v":1}`), Actor: a, OnBehalfOf: b})
			if err != nil {
				t.Fatal(err)
			}
			check("create", last("app.k"))
			if _, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "app.k", Revision: c.Revision, Actor: a, OnBehalfOf: b}); err != nil {
				t.Fatal(err)
			}
			check("activate", last("app.k"))
			if h, err := e.Head(ctx, "app.k"); err != nil || h.Actor != tc.want.actor {
				t.Errorf("head actor = %v, %v; want %q", h, err, tc.want.actor)
			}
			p, err := e.Publish(ctx, varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(`{"v":2}`), ExpectedGeneration: 1, Actor: a, OnBehalfOf: b})
			if err != nil {
				t.Fatal(err)
			}
			h, _ := e.History(ctx, "app.k")
			check("publish", h[len(h)-2])
			check("publish", h[len(h)-1])
			if _, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: "app.k", ExpectedGeneration: p.Generation, Actor: a, OnBehalfOf: b}); err != nil {
				t.Fatal(err)
			}
			check("rollback", last("app.k"))
			if _, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "app.k", Document: json.RawMessage(`{"x":1}`), SchemaID: "strict/v1", Actor: a, OnBehalfOf: b}); err == nil {
				t.Fatal("an invalid document was accepted")
			}
			check("rejection", last("app.k"))
			if _, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "app", Actor: a, OnBehalfOf: b}); err != nil {
				t.Fatal(err)
			}
			check("deactivate", last("app"))
			check("cascade entry", last("app.k"))
		})
	}
}
