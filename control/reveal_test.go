package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// TestRoutesRevealOnlyWhatCallerAudits: a token that may mutate but not
// audit a scope never reads a past body of it: rollback-as-change is
// refused (403, no change recorded), and a transition answers the change
// without its document. An auditor still gets both.
func TestRoutesRevealOnlyWhatCallerAudits(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("app.flags", `{"secret-ish":"old"}`)
	e.publish("app.flags", `{"secret-ish":"new"}`)

	for _, tc := range []struct {
		token  string
		status int
		code   varplane.Code
	}{
		{"mallory", 403, varplane.CodeForbidden},
		{"reader", 403, varplane.CodeForbidden},
		{"alice", 201, ""},
	} {
		var c control.Change
		st, b := e.do("POST", "/v1/control/documents/app.flags:rollback", tc.token, map[string]any{"revision": 1}, &c)
		want(t, "rollback as "+tc.token, st, b, tc.status, tc.code)
		if tc.status != 201 {
			if contains(b, "old") {
				t.Fatalf("a refused rollback showed the past body: %s", b)
			}
			list, err := e.svc.List(context.Background(), control.ListRequest{Scope: "app.flags"})
			if err != nil || len(list) != 0 {
				t.Fatalf("a refused rollback recorded a change: %d %v", len(list), err)
			}
			continue
		}
		if string(c.Document) != `{"secret-ish":"old"}` {
			t.Fatalf("the auditor's rollback change holds %s", c.Document)
		}
		// mallory may approve it, but the answer does not carry the
		// document she may not audit; bob's (an auditor's) does.
		var got control.Change
		st, b = e.do("POST", "/v1/control/changes/"+c.ID+":approve", "mallory", map[string]any{}, &got)
		want(t, "mallory approves", st, b, 200, "")
		if got.Document != nil || contains(b, "old") || got.State != control.StateApproved {
			t.Fatalf("a transition answered a non-auditor with the document: %s", b)
		}
		st, b = e.do("POST", "/v1/control/changes/"+c.ID+":publish", "alice", map[string]any{}, &got)
		want(t, "alice publishes", st, b, 200, "")
		if string(got.Document) != `{"secret-ish":"old"}` {
			t.Fatalf("the auditor's publish answer holds %s", got.Document)
		}
	}
}

// TestHeadApproversFromRecord: the head names a change, and shows its
// approvers, only when the change's record says it published that
// generation and revision of that scope; a reason "change <id>" given by
// any other writer names nothing.
func TestHeadApproversFromRecord(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.setPolicy("pay", 2, []string{"reviewer"}, false)
	c := e.propose("alice", "pay.limits", 0, `{"max":1}`)
	for _, who := range []string{"bob", "carol"} {
		st, b, _ := e.act(who, c.ID, "approve", nil)
		want(t, who+" approves", st, b, 200, "")
	}
	st, b, _ := e.act("alice", c.ID, "publish", nil)
	want(t, "publish", st, b, 200, "")
	open := e.propose("alice", "pay.other", 0, `{"max":2}`) // an open change: never published
	st, b, _ = e.act("bob", open.ID, "approve", nil)
	want(t, "bob approves the open change", st, b, 200, "")

	ctx := context.Background()
	for _, tc := range []struct {
		name, scope, reason string
		wantChange          string
		wantApprovers       string
	}{
		{"the change's own head", "pay.limits", "", c.ID, "[bob carol]"},
		{"another scope claims the published change", "app.forged", "change " + c.ID, "", "[]"},
		{"another scope claims an open change", "app.open", "change " + open.ID, "", "[]"},
		{"a claim of a change never recorded", "app.none", "change ch-0123456789abcdef", "", "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.reason != "" {
				if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: varplane.Scope(tc.scope), Document: json.RawMessage(`{"max":3}`), Actor: "mallory", Reason: tc.reason}); err != nil {
					t.Fatal(err)
				}
			}
			var head control.DocumentHead
			st, b := e.do("GET", "/v1/control/documents/"+tc.scope, "dave", nil, &head)
			want(t, "head", st, b, http.StatusOK, "")
			if head.Change != tc.wantChange || fmt.Sprint(head.ApprovedBy) != tc.wantApprovers {
				t.Fatalf("head names change %q approved by %v, want %q by %s", head.Change, head.ApprovedBy, tc.wantChange, tc.wantApprovers)
			}
		})
	}
	// The same revision re-activated later by a direct write (the policy
	// lifted) is not the change's publish either.
	st2, b2 := e.do("DELETE", "/v1/control/policies/pay", "admin", nil, nil)
	want(t, "delete policy", st2, b2, http.StatusNoContent, "")
	if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: "pay.limits", Document: json.RawMessage(`{"max":1}`), ExpectedGeneration: 1, Actor: "mallory", Reason: "change " + c.ID}); err != nil {
		t.Fatal(err)
	}
	var head control.DocumentHead
	e.do("GET", "/v1/control/documents/pay.limits", "dave", nil, &head)
	if head.Change != "" || len(head.ApprovedBy) != 0 || head.Generation != 2 {
		t.Fatalf("a direct re-publish of the change's revision: head %+v", head)
	}
}
