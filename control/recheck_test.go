package control_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/memory"
)

// TestPublishRechecksPolicy: publish judges a change under the policy in
// force when it publishes, not the one in force when it was approved. A
// policy raised (more approvals, a role, a canary) after the approvals
// refuses the publish and leaves the head alone; a policy lowered lets a
// change with fewer approvals publish. Approvals given after the raise
// count, so the change is not stuck.
func TestPublishRechecksPolicy(t *testing.T) {
	type policy struct {
		approvals int
		roles     []string
		canary    bool
	}
	for _, tc := range []struct {
		name      string
		before    *policy  // the policy when the change is approved (nil: none)
		approvers []string // who approves before the policy changes
		after     policy   // the policy in force at publish
		status    int
		code      varplane.Code
		// more approvers after the refusal, then a publish that succeeds
		more []string
	}{
		{name: "raised to three approvals with a role", before: &policy{approvals: 1}, approvers: []string{"dave"},
			after: policy{approvals: 3, roles: []string{"reviewer"}}, status: 409, code: varplane.CodeChangeState, more: []string{"bob", "carol", "admin"}},
		{name: "raised to two approvals", before: &policy{approvals: 1}, approvers: []string{"bob"},
			after: policy{approvals: 2}, status: 409, code: varplane.CodeChangeState, more: []string{"carol"}},
		{name: "no policy, then one with a role", approvers: []string{"dave"},
			after: policy{approvals: 1, roles: []string{"reviewer"}}, status: 409, code: varplane.CodeChangeState, more: []string{"bob"}},
		{name: "a role added: the approver did not hold it", before: &policy{approvals: 1}, approvers: []string{"dave"},
			after: policy{approvals: 1, roles: []string{"reviewer"}}, status: 409, code: varplane.CodeChangeState, more: []string{"carol"}},
		{name: "a canary required since", before: &policy{approvals: 1}, approvers: []string{"bob"},
			after: policy{approvals: 1, canary: true}, status: 503, code: varplane.CodeStoreUnavailable},
		{name: "lowered from two approvals to one", before: &policy{approvals: 2}, approvers: []string{"bob"},
			after: policy{approvals: 1}, status: 200},
		{name: "unchanged", before: &policy{approvals: 2, roles: []string{"reviewer"}}, approvers: []string{"bob", "carol"},
			after: policy{approvals: 2, roles: []string{"reviewer"}}, status: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.publish("pay.limits", `{"max":10}`)
			if tc.before != nil {
				e.setPolicy("pay", tc.before.approvals, tc.before.roles, tc.before.canary)
			}
			c := e.propose("alice", "pay.limits", 1, `{"max":20}`)
			for _, who := range tc.approvers {
				st, b, _ := e.act(who, c.ID, "approve", nil)
				want(t, who+" approves", st, b, 200, "")
			}
			e.setPolicy("pay", tc.after.approvals, tc.after.roles, tc.after.canary)
			st, b, _ := e.act("alice", c.ID, "publish", nil)
			want(t, "publish under the policy now in force", st, b, tc.status, tc.code)
			wantGen := varplane.Generation(1)
			if tc.status == 200 {
				wantGen = 2
			}
			if got := headOf(t, e, "pay.limits").Generation; got != wantGen {
				t.Fatalf("generation after the publish = %d, want %d", got, wantGen)
			}
			if tc.status == 200 || len(tc.more) == 0 {
				return
			}
			// The refused change is not stuck: the approvals the new
			// policy asks for are taken, and it publishes.
			for _, who := range tc.more {
				st, b, _ := e.act(who, c.ID, "approve", nil)
				want(t, who+" approves after the raise", st, b, 200, "")
			}
			st, b, got := e.act("alice", c.ID, "publish", nil)
			want(t, "publish with the approvals the policy asks for", st, b, 200, "")
			if got.State != control.StatePublished || headOf(t, e, "pay.limits").Generation != 2 {
				t.Fatalf("after the approvals: %s at generation %d", got.State, headOf(t, e, "pay.limits").Generation)
			}
		})
	}
}

// TestPublishCutShortRechecks: a publish claimed under one policy and cut
// short before its activation is judged again when it is finished: the
// policy raised meanwhile refuses it, the change goes back to checked with
// its approvals, and the head never moves.
func TestPublishCutShortRechecks(t *testing.T) {
	st := &failOnce{Store: memory.New(), scope: "pay.limits"}
	e := newEnv(t, envOpts{store: st})
	e.setPolicy("pay", 1, nil, false)
	c := e.propose("alice", "pay.limits", 0, `{"max":1}`)
	s, b, _ := e.act("bob", c.ID, "approve", nil)
	want(t, "approve", s, b, 200, "")
	s, b, _ = e.act("alice", c.ID, "publish", nil)
	// The claim is stored: the answer says the publish is under way,
	// not that nothing changed.
	want(t, "publish with the store away", s, b, 504, varplane.CodeOutcomeUnknown)
	if got, err := e.svc.Get(context.Background(), c.ID); err != nil || got.State != control.StatePublishing {
		t.Fatalf("after the failed publish: %+v %v", got, err)
	}
	e.setPolicy("pay", 2, []string{"reviewer"}, false)
	s, b, _ = e.act("alice", c.ID, "publish", nil)
	want(t, "finishing the publish under the raised policy", s, b, 409, varplane.CodeChangeState)
	got, err := e.svc.Get(context.Background(), c.ID)
	if err != nil || got.State != control.StateChecked || len(got.Approvals) != 1 {
		t.Fatalf("after the refused finish: %+v %v, want checked with its approval", got, err)
	}
	if g := headOf(t, e, "pay.limits").Generation; g != 0 {
		t.Fatalf("the refused finish moved the scope to %d", g)
	}
	s, b, _ = e.act("carol", c.ID, "approve", nil)
	want(t, "carol approves", s, b, 200, "")
	s, b, got2 := e.act("alice", c.ID, "publish", nil)
	want(t, "publish", s, b, http.StatusOK, "")
	if got2.State != control.StatePublished || headOf(t, e, "pay.limits").Generation != 1 {
		t.Fatalf("after two approvals: %s, generation %d", got2.State, headOf(t, e, "pay.limits").Generation)
	}
}
