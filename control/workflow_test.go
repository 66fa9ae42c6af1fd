package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/store/memory"
)

func TestPublishWithoutPolicy(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("app.flags", `{"a":1}`)
	c := e.propose("alice", "app.flags", 1, `{"a":2,"b":true}`)
	if c.State != control.StateChecked || c.Author != "alice" || c.Revision == "" || c.Version == 0 {
		t.Fatalf("proposed change = %+v, want checked, by alice, with a revision and a version", c)
	}
	// Proposing stores the candidate as a revision; the head is untouched.
	if st := headOf(t, e, "app.flags"); st.Generation != 1 {
		t.Fatalf("proposing moved the scope to %d", st.Generation)
	}
	st, b, pub := e.act("alice", c.ID, "publish", nil)
	want(t, "publish", st, b, http.StatusOK, "")
	if pub.State != control.StatePublished || pub.Published == nil || pub.Published.Generation != 2 || pub.Published.By != "alice" {
		t.Fatalf("published change = %+v", pub)
	}
	var head control.DocumentHead
	st, b = e.do("GET", "/v1/control/documents/app.flags", "dave", nil, &head)
	want(t, "head", st, b, http.StatusOK, "")
	if head.Generation != 2 || head.PublishedBy != "alice" || head.Change != c.ID || string(head.Document) != `{"a":2,"b":true}` {
		t.Fatalf("head = %+v", head)
	}
	// Every transition is recorded with the identity that made it, in the
	// change and as the actor of its record's events.
	var got control.Change
	e.do("GET", "/v1/control/changes/"+c.ID, "dave", nil, &got)
	var moves []string
	for _, tr := range got.Transitions {
		moves = append(moves, fmt.Sprintf("%s>%s by %s", tr.From, tr.To, tr.By))
	}
	if fmt.Sprint(moves) != "[>proposed by alice proposed>checked by alice checked>publishing by alice publishing>published by alice]" {
		t.Fatalf("transitions = %v", moves)
	}
	hist, err := e.engine.History(context.Background(), varplane.Scope("varplane-control.change."+c.ID))
	if err != nil {
		t.Fatal(err)
	}
	actors := map[string]bool{}
	for _, ev := range hist {
		if ev.Kind == varplane.EventActivated {
			actors[ev.Actor] = true
		}
	}
	if !actors["alice"] || len(actors) != 1 {
		t.Fatalf("record events' actors = %v, want alice only", actors)
	}
}

func TestApprovals(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("pay.limits", `{"max":10}`)
	e.setPolicy("pay", 2, []string{"reviewer"}, false)
	c := e.propose("alice", "pay.limits", 1, `{"max":20}`)

	for _, tc := range []struct {
		token  string
		status int
		code   varplane.Code
	}{
		{"alice", 403, varplane.CodeForbidden}, // the author never approves
		{"dave", 403, varplane.CodeForbidden},  // no reviewer role
		{"", 401, varplane.CodeUnauthorized},
	} {
		st, b, _ := e.act(tc.token, c.ID, "approve", nil)
		want(t, "approve as "+tc.token, st, b, tc.status, tc.code)
	}
	st, b, got := e.act("bob", c.ID, "approve", map[string]any{"note": "lgtm"})
	want(t, "bob approves", st, b, 200, "")
	if got.State != control.StateChecked || len(got.Approvals) != 1 {
		t.Fatalf("after one of two approvals: %s with %d approvals", got.State, len(got.Approvals))
	}
	st, b, _ = e.act("bob", c.ID, "approve", nil)
	want(t, "bob approves twice", st, b, 409, varplane.CodeChangeState)
	st, b, _ = e.act("alice", c.ID, "publish", nil)
	want(t, "publish with one approval", st, b, 409, varplane.CodeChangeState)
	if headOf(t, e, "pay.limits").Generation != 1 {
		t.Fatal("a refused publish moved the head")
	}
	st, b, got = e.act("carol", c.ID, "approve", nil)
	want(t, "carol approves", st, b, 200, "")
	if got.State != control.StateApproved {
		t.Fatalf("after two approvals: %s", got.State)
	}
	st, b, got = e.act("alice", c.ID, "publish", nil)
	want(t, "publish", st, b, 200, "")
	var head control.DocumentHead
	e.do("GET", "/v1/control/documents/pay.limits", "dave", nil, &head)
	if fmt.Sprint(head.ApprovedBy) != "[bob carol]" || head.PublishedBy != "alice" {
		t.Fatalf("head approvedBy %v publishedBy %s", head.ApprovedBy, head.PublishedBy)
	}
}

// TestBypassRefused: a scope under a policy refuses every direct write, at
// the engine (so at every transport) and on the var admin API, and nothing
// is stored; the control records refuse them too.
func TestBypassRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("pay.limits", `{"max":10}`)
	rev := headOf(t, e, "pay.limits").Head.Revision
	e.setPolicy("pay", 1, nil, false)
	ctx := context.Background()
	one := varplane.Generation(1)
	for name, call := range map[string]func() error{
		"activate": func() error {
			_, err := e.engine.Activate(ctx, varplane.ActivateRequest{Scope: "pay.limits", Revision: rev, ExpectedGeneration: 1})
			return err
		},
		"publish": func() error {
			_, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: "pay.limits.eu", Document: json.RawMessage(`{}`)})
			return err
		},
		"rollback": func() error {
			_, err := e.engine.Rollback(ctx, varplane.RollbackRequest{Scope: "pay.limits", ExpectedGeneration: 1, ToGeneration: &one})
			return err
		},
		"deactivate": func() error {
			_, err := e.engine.Deactivate(ctx, varplane.DeactivateRequest{Scope: "pay.limits", ExpectedGeneration: 1})
			return err
		},
		"deactivate a parent": func() error {
			_, err := e.engine.Deactivate(ctx, varplane.DeactivateRequest{Scope: "pay", ExpectedGeneration: 0})
			return err
		},
	} {
		if err := call(); !isCode(err, varplane.CodeChangeRequired) {
			t.Errorf("%s under a policy = %v, want change-required", name, err)
		}
	}
	st, b := e.do("POST", "/v1/admin/publish", "admin", map[string]any{"scope": "pay.limits", "document": map[string]int{"max": 99}, "expectedGeneration": 1}, nil)
	want(t, "var API publish", st, b, 403, varplane.CodeChangeRequired)
	st, b = e.do("POST", "/v1/admin/activate", "admin", map[string]any{"scope": "pay.limits", "revision": rev, "expectedGeneration": 1}, nil)
	want(t, "var API activate", st, b, 403, varplane.CodeChangeRequired)
	if s := headOf(t, e, "pay.limits"); s.Generation != 1 || s.Head.Revision != rev {
		t.Fatalf("a refused write changed the scope: generation %d", s.Generation)
	}
	// The records are the control subsystem's own.
	st, b = e.do("POST", "/v1/admin/publish", "admin", map[string]any{"scope": "varplane-control.policies", "document": map[string]any{"policies": []any{}}, "expectedGeneration": 1}, nil)
	want(t, "var API write of the policies", st, b, 403, varplane.CodeScopeOwned)
	// Lifting a policy needs the policy role.
	st, b = e.do("DELETE", "/v1/control/policies/pay", "bob", nil, nil)
	want(t, "delete policy without the role", st, b, 403, varplane.CodeForbidden)
	st, b = e.do("DELETE", "/v1/control/policies/pay", "admin", nil, nil)
	want(t, "delete policy", st, b, 204, "")
	st, b = e.do("DELETE", "/v1/control/policies/pay", "admin", nil, nil)
	want(t, "delete a missing policy", st, b, 404, varplane.CodeNotFound)
	if _, err := e.engine.Activate(ctx, varplane.ActivateRequest{Scope: "pay.limits", Revision: rev, ExpectedGeneration: 1}); err != nil {
		t.Fatalf("activate once the policy is gone: %v", err)
	}
}

func TestConflictAndRebase(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.publish("app.flags", `{"a":1}`)
	a := e.propose("alice", "app.flags", 1, `{"a":2}`)
	b := e.propose("bob", "app.flags", 1, `{"a":3}`)
	st, body, _ := e.act("alice", a.ID, "publish", nil)
	want(t, "publish a", st, body, 200, "")
	st, body, _ = e.act("bob", b.ID, "publish", nil)
	want(t, "publish b on a moved base", st, body, 409, varplane.CodeRevisionConflict)
	if !contains(body, `"currentGeneration":2`) {
		t.Fatalf("conflict body %s does not carry the current generation", body)
	}
	if s := headOf(t, e, "app.flags"); s.Generation != 2 || string(s.Head.Document) != `{"a":2}` {
		t.Fatalf("head after the conflict: %d %s", s.Generation, s.Head.Document)
	}
	got, err := e.svc.Get(context.Background(), b.ID)
	if err != nil || got.State != control.StateConflicted {
		t.Fatalf("b after the conflict: %v %v", got, err)
	}
	st, body, _ = e.act("bob", b.ID, "rebase", map[string]any{"base": 1})
	want(t, "rebase on a stale base", st, body, 409, varplane.CodeRevisionConflict)
	st, body, rb := e.act("bob", b.ID, "rebase", map[string]any{"base": 2})
	want(t, "rebase", st, body, 200, "")
	if rb.State != control.StateChecked || rb.Base != 2 {
		t.Fatalf("rebased: %s on %d", rb.State, rb.Base)
	}
	st, body, _ = e.act("bob", b.ID, "publish", nil)
	want(t, "publish after rebase", st, body, 200, "")
	if s := headOf(t, e, "app.flags"); s.Generation != 3 || string(s.Head.Document) != `{"a":3}` {
		t.Fatalf("head after the rebased publish: %d %s", s.Generation, s.Head.Document)
	}
	// A base ahead of the scope is refused; one behind is conflicted at once.
	st, body = e.do("POST", "/v1/control/changes", "alice", map[string]any{"scope": "app.flags", "base": 9, "document": map[string]int{}}, nil)
	want(t, "base ahead", st, body, 400, varplane.CodeBadRequest)
	if c := e.propose("alice", "app.flags", 1, `{"z":1}`); c.State != control.StateConflicted {
		t.Fatalf("a change on an old base is %s, want conflicted", c.State)
	}
}

func TestRejectWithdraw(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.propose("alice", "app.x", 0, `{"a":1}`)
	st, b, _ := e.act("alice", c.ID, "reject", nil)
	want(t, "author rejects", st, b, 403, varplane.CodeForbidden)
	st, b, got := e.act("bob", c.ID, "reject", map[string]string{"note": "no"})
	want(t, "reject", st, b, 200, "")
	if got.State != control.StateRejected {
		t.Fatalf("state %s", got.State)
	}
	for _, op := range []string{"approve", "publish", "withdraw", "reject"} {
		st, b, _ = e.act("carol", c.ID, op, nil)
		want(t, op+" a rejected change", st, b, 409, varplane.CodeChangeState)
	}
	d := e.propose("alice", "app.x", 0, `{"a":2}`)
	st, b, _ = e.act("bob", d.ID, "withdraw", nil)
	want(t, "withdraw by another", st, b, 403, varplane.CodeForbidden)
	st, b, got = e.act("alice", d.ID, "withdraw", nil)
	want(t, "withdraw", st, b, 200, "")
	if got.State != control.StateWithdrawn {
		t.Fatalf("state %s", got.State)
	}
	if headOf(t, e, "app.x").Generation != 0 {
		t.Fatal("closed changes moved the head")
	}
}

func TestChecks(t *testing.T) {
	var seen varplane.Generation
	hook := control.CheckFunc{CheckName: "limits-below-platform", Fn: func(ctx context.Context, in *control.CheckInput) ([]varplane.Issue, error) {
		h, err := in.Head(ctx, "platform.caps")
		if err != nil || h == nil {
			return nil, err
		}
		seen = h.Generation
		var caps, doc map[string]int
		_ = json.Unmarshal(h.Document, &caps)
		_ = json.Unmarshal(in.Document, &doc)
		if doc["max"] > caps["max"] {
			return []varplane.Issue{{Code: "over-cap", Path: "/max", Message: "max is above the platform cap"}}, nil
		}
		return nil, nil
	}}
	e := newEnv(t, envOpts{checks: []control.Check{hook}})
	e.publish("platform.caps", `{"max":100}`)

	// Schema validation fails a change and keeps no candidate.
	var bad control.Change
	st, b := e.do("POST", "/v1/control/changes", "alice", map[string]any{"scope": "app.x", "base": 0, "schemaId": "strict", "document": map[string]int{"bad": 1}}, &bad)
	want(t, "propose invalid", st, b, 201, "")
	if bad.State != control.StateFailed || bad.Revision != "" || bad.Checks[0].Name != control.SchemaCheck || bad.Checks[0].Passed {
		t.Fatalf("invalid change = %+v", bad)
	}
	st, b, _ = e.act("alice", bad.ID, "publish", nil)
	want(t, "publish a failed change", st, b, 409, varplane.CodeChangeState)

	over := e.propose("alice", "app.x", 0, `{"max":200}`)
	if over.State != control.StateFailed || len(over.Checks) != 2 || over.Checks[1].Issues[0].Code != "over-cap" {
		t.Fatalf("change over the cap = %+v", over)
	}
	ok := e.propose("alice", "app.x", 0, `{"max":50}`)
	if ok.State != control.StateChecked || len(ok.Checks[1].Reads) != 1 || ok.Checks[1].Reads[0].Generation != seen {
		t.Fatalf("change under the cap = %+v", ok)
	}
	// The cap moves below the change between its check and its publish:
	// the publish stands and records review-needed.
	e.publish("platform.caps", `{"max":10}`)
	st, b, pub := e.act("alice", ok.ID, "publish", nil)
	want(t, "publish", st, b, 200, "")
	if a := pub.AfterPublish; a == nil || a.Outcome != control.ReviewNeeded || a.Reason != control.NewIssues || fmt.Sprint(a.Moved) != "[platform.caps]" {
		t.Fatalf("after publish = %+v", pub.AfterPublish)
	}
	// A head that moved without changing the verdict is heads-moved.
	c2 := e.propose("alice", "app.y", 0, `{"max":5}`)
	e.publish("platform.caps", `{"max":9}`)
	_, _, pub = e.act("alice", c2.ID, "publish", nil)
	if pub.AfterPublish == nil || pub.AfterPublish.Outcome != control.HeadsMoved {
		t.Fatalf("after publish = %+v", pub.AfterPublish)
	}
	c3 := e.propose("alice", "app.z", 0, `{"max":5}`)
	_, _, pub = e.act("alice", c3.ID, "publish", nil)
	if pub.AfterPublish == nil || pub.AfterPublish.Outcome != control.HeadsUnchanged {
		t.Fatalf("after publish = %+v", pub.AfterPublish)
	}
}

func TestExpiry(t *testing.T) {
	e := newEnv(t, envOpts{expire: time.Hour})
	old := e.propose("alice", "app.x", 0, `{"a":1}`)
	e.clock.Advance(30 * time.Minute)
	fresh := e.propose("alice", "app.x", 0, `{"a":2}`)
	e.clock.Advance(31 * time.Minute)

	var list struct{ Changes []control.Change }
	st, b := e.do("GET", "/v1/control/changes?state=open", "dave", nil, &list)
	want(t, "list open", st, b, 200, "")
	if len(list.Changes) != 1 || list.Changes[0].ID != fresh.ID {
		t.Fatalf("open changes = %+v, want only %s", list.Changes, fresh.ID)
	}
	got, err := e.svc.Get(context.Background(), old.ID)
	if err != nil || got.State != control.StateExpired {
		t.Fatalf("old change: %+v %v", got, err)
	}
	if last := got.Transitions[len(got.Transitions)-1]; last.By != control.ExpiryActor {
		t.Fatalf("expiry recorded by %q", last.By)
	}
	st, b, _ = e.act("bob", old.ID, "approve", nil)
	want(t, "approve an expired change", st, b, 409, varplane.CodeChangeState)
	e.clock.Advance(time.Hour)
	n, err := e.svc.ExpireDue(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("ExpireDue = %d, %v; want 1", n, err)
	}
	// The default is seven days.
	d := newEnv(t, envOpts{})
	c := d.propose("alice", "app.x", 0, `{"a":1}`)
	if c.ExpiresAt.Sub(c.ProposedAt) != 7*24*time.Hour {
		t.Fatalf("default expiry %v", c.ExpiresAt.Sub(c.ProposedAt))
	}
}

func TestListFilters(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.propose("alice", "app.x", 0, `{"a":1}`)
	e.clock.Advance(time.Second)
	b := e.propose("alice", "app.y", 0, `{"a":1}`)
	e.clock.Advance(time.Second)
	s := e.propose("admin", "secret", 0, `{"secret.a":1}`)
	e.act("alice", b.ID, "withdraw", nil)
	for _, tc := range []struct {
		query string
		want  string
	}{
		{"", fmt.Sprint([]string{b.ID, a.ID})}, // newest first; secret is not shown to alice
		{"?scope=app.x", fmt.Sprint([]string{a.ID})},
		{"?state=open", fmt.Sprint([]string{a.ID})},
		{"?state=withdrawn", fmt.Sprint([]string{b.ID})},
	} {
		var list struct{ Changes []control.Change }
		st, body := e.do("GET", "/v1/control/changes"+tc.query, "alice", nil, &list)
		want(t, tc.query, st, body, 200, "")
		var ids []string
		for _, c := range list.Changes {
			ids = append(ids, c.ID)
		}
		if fmt.Sprint(ids) != tc.want {
			t.Errorf("changes%s = %v, want %s", tc.query, ids, tc.want)
		}
	}
	st, body := e.do("GET", "/v1/control/changes?state=nope", "alice", nil, nil)
	want(t, "bad state", st, body, 400, varplane.CodeBadRequest)
	st, body = e.do("GET", "/v1/control/changes/"+s.ID, "alice", nil, nil)
	want(t, "a change of a scope alice may not audit", st, body, 403, varplane.CodeForbidden)
	st, body = e.do("GET", "/v1/control/changes/ch-0000000000000000", "alice", nil, nil)
	want(t, "no such change", st, body, 404, varplane.CodeNotFound)
}

func TestRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.propose("alice", "app.x", 0, `{"a":1}`)
	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		code         varplane.Code
	}{
		{"DELETE", "/v1/control/changes", nil, 405, varplane.CodeMethodNotAllowed},
		{"PUT", "/v1/control/documents/app.x/revisions", nil, 405, varplane.CodeMethodNotAllowed},
		{"GET", "/v1/control/nothing", nil, 404, varplane.CodeNotFound},
		{"POST", "/v1/control/changes/" + c.ID + ":explode", map[string]any{}, 404, varplane.CodeNotFound},
		{"POST", "/v1/control/changes/" + c.ID + ":rebase", map[string]any{}, 400, varplane.CodeBadRequest},
		{"POST", "/v1/control/changes", map[string]any{"scope": "app.x", "base": 0}, 400, varplane.CodeBadRequest},
		{"POST", "/v1/control/changes", map[string]any{"scope": "app.x", "base": 0, "document": 1, "extra": 1}, 400, varplane.CodeBadRequest},
		{"POST", "/v1/control/changes", map[string]any{"scope": "varplane-control.x", "base": 0, "document": 1}, 403, varplane.CodeScopeOwned},
		{"GET", "/v1/control/documents/app.x", nil, 404, varplane.CodeNoHead},
		{"GET", "/v1/control/documents/app.x/revisions/x", nil, 400, varplane.CodeBadRequest},
		{"GET", "/v1/control/documents/app.x/diff", nil, 400, varplane.CodeBadRequest},
		{"PUT", "/v1/control/policies/app", map[string]any{"approvals": 0}, 400, varplane.CodeBadRequest},
		{"PUT", "/v1/control/policies/varplane-control", map[string]any{"approvals": 1}, 400, varplane.CodeBadRequest},
	} {
		st, b := e.do(tc.method, tc.path, "admin", tc.body, nil)
		want(t, tc.method+" "+tc.path, st, b, tc.status, tc.code)
	}
	// The list routes authenticate first, even when there is nothing to list.
	for _, p := range []string{"/v1/control/policies", "/v1/control/changes"} {
		st, b := e.do("GET", p, "", nil, nil)
		want(t, p+" without a token", st, b, 401, varplane.CodeUnauthorized)
	}
	// A body of another type is 415.
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/control/changes", nil)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Authorization", "Bearer admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Fatalf("text/plain body: %d, want 415", resp.StatusCode)
	}
	var pols struct{ Policies []control.Policy }
	e.setPolicy("app", 1, []string{"reviewer"}, false)
	st, b := e.do("GET", "/v1/control/policies", "dave", nil, &pols)
	want(t, "policies", st, b, 200, "")
	if len(pols.Policies) != 1 || pols.Policies[0].Scope != "app" || pols.Policies[0].Approvals != 1 {
		t.Fatalf("policies = %+v", pols.Policies)
	}
}

// failOnce fails the first activation of scope with store-unavailable, as
// a store that went away in the middle of a publish.
type failOnce struct {
	varplane.Store
	scope  varplane.Scope
	failed atomic.Bool
}

func (f *failOnce) Append(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	if ev.Kind == varplane.EventActivated && ev.Scope == f.scope && !f.failed.Swap(true) {
		return varplane.Unavailable(fmt.Errorf("injected"))
	}
	return f.Store.Append(ctx, ev, expected)
}

// TestPublishCutShort: a publish whose activation fails leaves the change
// claimed (publishing), which its answer says (504 outcome-unknown, not a
// 503 that promises nothing changed): nobody can reject or withdraw it
// meanwhile, and the next publish finishes it.
func TestPublishCutShort(t *testing.T) {
	st := &failOnce{Store: memory.New(), scope: "app.flags"}
	e := newEnv(t, envOpts{store: st})
	c := e.propose("alice", "app.flags", 0, `{"a":1}`)
	s, b, _ := e.act("alice", c.ID, "publish", nil)
	// The claim is stored: the answer says the publish is under way,
	// not that nothing changed.
	want(t, "publish with the store away", s, b, 504, varplane.CodeOutcomeUnknown)
	got, err := e.svc.Get(context.Background(), c.ID)
	if err != nil || got.State != control.StatePublishing {
		t.Fatalf("after the failed publish: %+v %v", got, err)
	}
	s, b, _ = e.act("bob", c.ID, "reject", nil)
	want(t, "reject while publishing", s, b, 409, varplane.CodeChangeState)
	s, b, _ = e.act("alice", c.ID, "withdraw", nil)
	want(t, "withdraw while publishing", s, b, 409, varplane.CodeChangeState)
	e.clock.Advance(8 * 24 * time.Hour)
	if n, err := e.svc.ExpireDue(context.Background()); err != nil || n != 0 {
		t.Fatalf("ExpireDue of a publishing change = %d, %v", n, err)
	}
	s, b, got2 := e.act("bob", c.ID, "publish", nil)
	want(t, "publish again", s, b, 200, "")
	if got2.State != control.StatePublished || headOf(t, e, "app.flags").Generation != 1 {
		t.Fatalf("after the second publish: %s, generation %d", got2.State, headOf(t, e, "app.flags").Generation)
	}
}

// TestDetectionTimedOut: a comparison after publish that does not finish
// in time is recorded as review-needed with the reason detection-timed-out
// (told apart from a head that moved), and the publish stands.
func TestDetectionTimedOut(t *testing.T) {
	var calls atomic.Int32
	hook := control.CheckFunc{CheckName: "slow", Fn: func(ctx context.Context, in *control.CheckInput) ([]varplane.Issue, error) {
		if _, err := in.Head(ctx, "platform.caps"); err != nil {
			return nil, err
		}
		if calls.Add(1) > 1 { // the re-run after publish outlasts the bound
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, nil
	}}
	e := newEnv(t, envOpts{checks: []control.Check{hook}, detect: 20 * time.Millisecond})
	e.publish("platform.caps", `{"max":1}`)
	c := e.propose("alice", "app.x", 0, `{"max":1}`)
	e.publish("platform.caps", `{"max":2}`)
	s, b, pub := e.act("alice", c.ID, "publish", nil)
	want(t, "publish", s, b, 200, "")
	if a := pub.AfterPublish; a == nil || a.Outcome != control.ReviewNeeded || a.Reason != control.DetectionTimedOut {
		t.Fatalf("after publish = %+v", pub.AfterPublish)
	}
	if headOf(t, e, "app.x").Generation != 1 {
		t.Fatal("the publish did not stand")
	}
}

// TestGuardFailsClosed: a policies record that cannot be read refuses
// every direct write rather than letting it around a policy.
func TestGuardFailsClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: "varplane-control.policies", Document: json.RawMessage(`{"policies":5}`), Owner: control.OwnerName}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: "any.scope", Document: json.RawMessage(`{}`)}); !isCode(err, varplane.CodeChangeRequired) {
		t.Fatalf("a write with unreadable policies = %v, want change-required", err)
	}
}

// TestCrossOriginWriteRefused: a write from a page of another origin is
// refused before it is read; a read is not.
func TestCrossOriginWriteRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.propose("alice", "app.x", 0, `{"a":1}`)
	for _, tc := range []struct {
		method string
		status int
	}{{"POST", 403}, {"GET", 200}} {
		path := "/v1/control/changes/" + c.ID
		if tc.method == "POST" {
			path += ":withdraw"
		}
		req, _ := http.NewRequest(tc.method, e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("cross-site %s: %d, want %d", tc.method, resp.StatusCode, tc.status)
		}
	}
	if got, _ := e.svc.Get(context.Background(), c.ID); got.State != control.StateChecked {
		t.Fatalf("a refused cross-origin write changed the change: %s", got.State)
	}
}

func TestPrepare(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	for range 2 {
		if err := e.svc.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := headOf(t, e, "varplane-control.policies"); st.Generation != 1 || string(st.Head.Document) != `{"policies":[]}` {
		t.Fatalf("policies record after Prepare twice: %d %v", st.Generation, st.Head)
	}
	e.setPolicy("app", 1, nil, false)
	if err := e.svc.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if pols, err := e.svc.Policies(ctx); err != nil || len(pols) != 1 {
		t.Fatalf("Prepare over a policy: %v %v", pols, err)
	}
}

// TestListEachHoldsOneCandidate: ListEach hands the changes newest first
// with their candidates, each read just before fn sees it and dropped once
// fn returns, so that a streamed list holds one at a time; List keeps them
// all; the list route answers the same changes, candidates included.
func TestListEachHoldsOneCandidate(t *testing.T) {
	e := newEnv(t, envOpts{})
	var ids []string
	for i := range 3 {
		ids = append(ids, e.propose("alice", varplane.Scope(fmt.Sprintf("app.l%d", i)), 0, fmt.Sprintf(`{"i":%d}`, i)).ID)
		e.clock.Advance(time.Second)
	}
	slices.Reverse(ids)
	var seen []*control.Change
	err := e.svc.ListEach(context.Background(), control.ListRequest{}, func(c *control.Change) error {
		if c.Document == nil {
			t.Errorf("%s has no candidate when fn sees it", c.ID)
		}
		for _, p := range seen {
			if p.Document != nil {
				t.Errorf("%s still holds its candidate while %s is handed", p.ID, c.ID)
			}
		}
		seen = append(seen, c)
		return nil
	})
	if err != nil || len(seen) != 3 {
		t.Fatalf("ListEach: %d changes, %v", len(seen), err)
	}
	for i, c := range seen {
		if c.ID != ids[i] {
			t.Errorf("change %d is %s, want %s (newest first)", i, c.ID, ids[i])
		}
	}
	list, err := e.svc.List(context.Background(), control.ListRequest{})
	if err != nil || len(list) != 3 {
		t.Fatalf("List: %d, %v", len(list), err)
	}
	for _, c := range list {
		if c.Document == nil {
			t.Errorf("List dropped the candidate of %s", c.ID)
		}
	}
	var routed struct{ Changes []control.Change }
	st, body := e.do("GET", "/v1/control/changes", "alice", nil, &routed)
	want(t, "list", st, body, 200, "")
	if len(routed.Changes) != 3 || routed.Changes[2].ID != ids[2] || string(routed.Changes[2].Document) != `{"i":0}` {
		t.Errorf("the route answered %s", body)
	}
}
