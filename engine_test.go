package varplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

type fakeValidator map[string]func(doc json.RawMessage) []varplane.Issue

func (f fakeValidator) Validate(id string, doc json.RawMessage) ([]varplane.Issue, error) {
	fn, ok := f[id]
	if !ok {
		return nil, varplane.ErrUnknownSchema
	}
	return fn(doc), nil
}

// strictIssues refuses every member of doc but "enabled".
func strictIssues(doc json.RawMessage) []varplane.Issue {
	var m map[string]any
	_ = json.Unmarshal(doc, &m)
	var out []varplane.Issue
	for k := range m {
		if k != "enabled" {
			out = append(out, varplane.Issue{Code: "document.unknown-field", Path: "/" + k, Message: "unknown field '" + k + "'"})
		}
	}
	return out
}

func newEngine(t *testing.T) *varplane.Engine {
	t.Helper()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	clock := time.Date(2026, 7, 20, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	e := varplane.NewEngine(s, varplane.Options{
		Validator: fakeValidator{
			"strict/v1": strictIssues,
		},
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(time.Second)
			return clock
		},
	})
	t.Cleanup(e.Close)
	return e
}

func mustCreate(t *testing.T, e *varplane.Engine, scope, doc string) varplane.Revision {
	t.Helper()
	res, err := e.CreateRevision(context.Background(), varplane.CreateRevisionRequest{Scope: varplane.Scope(scope), Document: json.RawMessage(doc)})
	if err != nil {
		t.Fatalf("create %s: %v", scope, err)
	}
	return res.Revision
}

func mustActivate(t *testing.T, e *varplane.Engine, scope string, rev varplane.Revision, expected varplane.Generation) varplane.ActivationResult {
	t.Helper()
	res, err := e.Activate(context.Background(), varplane.ActivateRequest{Scope: varplane.Scope(scope), Revision: rev, ExpectedGeneration: expected})
	if err != nil {
		t.Fatalf("activate %s@%d: %v", scope, expected, err)
	}
	return res
}

func TestCreateRevisionIsContentAddressed(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	a, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "a.b", Document: json.RawMessage(`{"y":1, "x":[true,null]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Created || !strings.HasPrefix(string(a.Revision), "sha256:") || len(a.Revision) != 71 {
		t.Fatalf("first create = %+v", a)
	}
	b, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "a.b", Document: json.RawMessage(`{"x":[true,null],"y":1.0}`)})
	if err != nil {
		t.Fatal(err)
	}
	if b.Created || b.Revision != a.Revision {
		t.Fatalf("equal document: got %+v, want created=false revision %s", b, a.Revision)
	}
	if _, err := varplane.ParseRevision(string(a.Revision)); err != nil {
		t.Fatal(err)
	}
}

func TestCreateRevisionRejects(t *testing.T) {
	tests := []struct {
		name, scope, doc, schemaID string
		wantCode, wantPath         string
	}{
		{"unknown field", "a.b", `{"enabled":true,"budgets2":"hunter2"}`, "strict/v1", "document.unknown-field", "/budgets2"},
		{"unknown schema", "a.b", `{}`, "nope/v9", varplane.IssueUnknownSchema, ""},
		{"integer beyond 2^53", "a.b", `{"n":[1,9007199254740993]}`, "", varplane.IssueNumberPrecision, "/n/1"},
		{"sixteen digits among short integers", "a.b", `{"a":[1,22],"n":1000000000000000000}`, "", varplane.IssueNumberPrecision, "/n"},
		{"an exponent among short integers", "a.b", `{"a":1,"n":1e16}`, "", varplane.IssueNumberPrecision, "/n"},
		{"group not an object", "grp", `[1]`, "", varplane.IssueGroupShape, ""},
		{"group key without prefix", "grp", `{"grp.ok":1,"other":2}`, "", varplane.IssueGroupShape, "/other"},
		{"duplicate key", "a.b", `{"k":1,"k":2}`, "", varplane.IssueSyntax, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t)
			ctx := context.Background()
			_, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: varplane.Scope(tt.scope), Document: json.RawMessage(tt.doc), SchemaID: tt.schemaID})
			var verr *varplane.Error
			if !errors.As(err, &verr) || verr.Code != varplane.CodeRevisionInvalid {
				t.Fatalf("err = %v, want revision-invalid", err)
			}
			if len(verr.Issues) == 0 || verr.Issues[0].Code != tt.wantCode || verr.Issues[0].Path != tt.wantPath {
				t.Fatalf("issues = %+v, want first %s at %q", verr.Issues, tt.wantCode, tt.wantPath)
			}
			st, err := e.Status(ctx, varplane.Scope(tt.scope))
			if err != nil {
				t.Fatal(err)
			}
			if st.LastRejected == nil || !strings.Contains(st.LastRejected.RejectionReason, tt.wantCode) {
				t.Fatalf("lastRejected = %+v, want reason naming %s", st.LastRejected, tt.wantCode)
			}
			if strings.Contains(st.LastRejected.RejectionReason, "hunter2") {
				t.Fatalf("rejection reason leaks a value: %q", st.LastRejected.RejectionReason)
			}
			hist, _ := e.History(ctx, varplane.Scope(tt.scope))
			for _, ev := range hist {
				if ev.Kind == varplane.EventRevisionCreated {
					t.Fatalf("invalid document was stored: %+v", ev)
				}
			}
		})
	}
}

func TestValidateRecordsNothing(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	res, err := e.Validate(ctx, varplane.ValidateRequest{Scope: "grp", Document: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Valid || len(res.Issues) != 1 || res.Issues[0].Code != varplane.IssueGroupShape {
		t.Fatalf("validate = %+v", res)
	}
	ok, err := e.Validate(ctx, varplane.ValidateRequest{Document: json.RawMessage(`{"x":1}`)})
	if err != nil || !ok.Valid || ok.Issues == nil {
		t.Fatalf("validate without scope = %+v, %v; want valid with empty issues", ok, err)
	}
	st, _ := e.Status(ctx, "grp")
	if st.LastRejected != nil {
		t.Fatalf("validate recorded a rejection: %+v", st.LastRejected)
	}
}

func TestActivateConflictAndNotFound(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	rev := mustCreate(t, e, "a.b", `{"v":1}`)
	if got := mustActivate(t, e, "a.b", rev, 0); got.Generation != 1 || got.Revision != rev {
		t.Fatalf("activate = %+v", got)
	}
	_, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "a.b", Revision: rev, ExpectedGeneration: 0})
	var verr *varplane.Error
	if !errors.As(err, &verr) || !errors.Is(err, varplane.ErrConflict) || *verr.Current != 1 || *verr.Expected != 0 {
		t.Fatalf("stale activate: %v", err)
	}
	other := varplane.Revision("sha256:" + strings.Repeat("0", 64))
	if _, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "a.b", Revision: other, ExpectedGeneration: 1}); !errors.Is(err, varplane.ErrNotFound) {
		t.Fatalf("unknown revision: %v", err)
	}
	// A revision of another scope is not a revision of this one.
	foreign := mustCreate(t, e, "a.c", `{"v":2}`)
	if _, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "a.b", Revision: foreign, ExpectedGeneration: 1}); !errors.Is(err, varplane.ErrNotFound) {
		t.Fatalf("foreign revision: %v", err)
	}
	h, err := e.Head(ctx, "a.b")
	if err != nil || h.Generation != 1 || string(h.ReadBody()) == "" || h.ETag() != `"`+string(rev)+`"` {
		t.Fatalf("head = %+v, %v", h, err)
	}
}

func TestConcurrentActivationsOneWinner(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	rev := mustCreate(t, e, "race.x", `{"v":1}`)
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.Activate(ctx, varplane.ActivateRequest{Scope: "race.x", Revision: rev, ExpectedGeneration: 0})
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		var verr *varplane.Error
		switch {
		case err == nil:
			wins++
		case errors.As(err, &verr) && verr.Code == varplane.CodeRevisionConflict && *verr.Current == 1:
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d activations won, want exactly 1", wins)
	}
}

func TestDeactivateSubtreeIsATombstone(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	var commits []varplane.Commit
	unsub := e.OnCommit(func(c varplane.Commit) { commits = append(commits, c) })
	defer unsub()

	g := mustCreate(t, e, "grp", `{"grp.k":1}`)
	k := mustCreate(t, e, "grp.k", `{"v":1}`)
	kk := mustCreate(t, e, "grp.k.deep", `{"v":2}`)
	mustActivate(t, e, "grp", g, 0)
	mustActivate(t, e, "grp.k", k, 0)
	mustActivate(t, e, "grp.k", k, 1) // grp.k now at 2
	mustActivate(t, e, "grp.k.deep", kk, 0)
	mustCreate(t, e, "grp.idle", `{}`) // never activated: untouched

	res, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "grp", ExpectedGeneration: 1, Actor: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Generation != 2 || res.Active || len(res.Cascade) != 2 {
		t.Fatalf("deactivate = %+v", res)
	}
	for scope, want := range map[varplane.Scope]varplane.Generation{"grp": 2, "grp.k": 3, "grp.k.deep": 2, "grp.idle": 0} {
		st, err := e.Status(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		if st.Active || st.Generation != want {
			t.Errorf("%s: status %+v, want inactive at %d", scope, st, want)
		}
	}
	last := commits[len(commits)-1]
	if last.Kind != varplane.EventDeactivated || last.Scope != "grp" || len(last.Changes) != 3 {
		t.Fatalf("deactivation commit = %+v, want one naming 3 scopes", last)
	}
	hist, _ := e.History(ctx, "grp.k")
	if ev := hist[len(hist)-1]; ev.Kind != varplane.EventDeactivated || ev.Reason != varplane.CascadeReason("grp") || ev.Generation != 3 {
		t.Fatalf("descendant history ends with %+v", ev)
	}
	// Re-activating the parent does not revive descendants; activating a
	// descendant later makes it live.
	mustActivate(t, e, "grp", g, 2)
	if _, err := e.Head(ctx, "grp.k"); !errors.Is(err, varplane.ErrNoHead) {
		t.Fatalf("descendant revived: %v", err)
	}
	mustActivate(t, e, "grp.k", k, 3)
	if h, err := e.Head(ctx, "grp.k"); err != nil || h.Generation != 4 {
		t.Fatalf("descendant after re-activation: %+v %v", h, err)
	}
	// A scope with no head can be deactivated and takes the next generation.
	if res, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "never.seen", ExpectedGeneration: 0}); err != nil || res.Generation != 1 {
		t.Fatalf("deactivate headless = %+v, %v", res, err)
	}
}

func TestRollback(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	r1 := mustCreate(t, e, "a.b", `{"v":1}`)
	r2 := mustCreate(t, e, "a.b", `{"v":2}`)
	mustActivate(t, e, "a.b", r1, 0)
	mustActivate(t, e, "a.b", r2, 1)

	res, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: "a.b", ExpectedGeneration: 2})
	if err != nil || res.Revision != r1 || res.Generation != 3 {
		t.Fatalf("rollback to previous = %+v, %v", res, err)
	}
	hist, _ := e.History(ctx, "a.b")
	if ev := hist[len(hist)-1]; ev.Kind != varplane.EventActivated || ev.Reason != "rollback to "+string(r1) {
		t.Fatalf("rollback event = %+v", ev)
	}
	two := varplane.Generation(2)
	if res, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: "a.b", ExpectedGeneration: 3, ToGeneration: &two, Reason: "back"}); err != nil || res.Revision != r2 || res.Generation != 4 {
		t.Fatalf("rollback to generation = %+v, %v", res, err)
	}
	if res, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: "a.b", ExpectedGeneration: 4, ToRevision: r1}); err != nil || res.Revision != r1 {
		t.Fatalf("rollback to revision = %+v, %v", res, err)
	}
	nine := varplane.Generation(9)
	for name, req := range map[string]varplane.RollbackRequest{
		"unknown generation": {Scope: "a.b", ExpectedGeneration: 5, ToGeneration: &nine},
		"unknown revision":   {Scope: "a.b", ExpectedGeneration: 5, ToRevision: varplane.Revision("sha256:" + strings.Repeat("1", 64))},
		"nothing earlier":    {Scope: "solo.x", ExpectedGeneration: 0},
	} {
		if _, err := e.Rollback(ctx, req); !errors.Is(err, varplane.ErrNotFound) {
			t.Errorf("%s: %v, want not-found", name, err)
		}
	}
	if _, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: "a.b", ExpectedGeneration: 1}); !errors.Is(err, varplane.ErrConflict) {
		t.Fatalf("stale rollback: %v", err)
	}
}

func TestIdempotency(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	rev := mustCreate(t, e, "a.b", `{"v":1}`)
	req := varplane.ActivateRequest{Scope: "a.b", Revision: rev, ExpectedGeneration: 0, IdempotencyKey: "k1"}
	first, err := e.Activate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.Activate(ctx, req)
	if err != nil || again != first {
		t.Fatalf("replay = %+v, %v; want %+v", again, err, first)
	}
	hist, _ := e.History(ctx, "a.b")
	activations := 0
	for _, ev := range hist {
		if ev.Kind == varplane.EventActivated {
			activations++
		}
	}
	if activations != 1 {
		t.Fatalf("replay appended: %d activations", activations)
	}
	req.ExpectedGeneration = 1
	if _, err := e.Activate(ctx, req); !errors.Is(err, varplane.ErrIdempotencyReuse) {
		t.Fatalf("reused key with another request: %v", err)
	}
	c1, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "a.c", Document: json.RawMessage(`{"v":3}`), IdempotencyKey: "k2"})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "a.c", Document: json.RawMessage(`{"v":3}`), IdempotencyKey: "k2"})
	if err != nil || c2 != c1 {
		t.Fatalf("create replay = %+v, %v; want %+v", c2, err, c1)
	}
}

func TestOnCommitAndUnsubscribe(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	var got []varplane.Commit
	unsub := e.OnCommit(func(c varplane.Commit) { got = append(got, c) })
	e.OnCommit(func(varplane.Commit) { panic("listener bug") }) // must not break the commit
	r1 := mustCreate(t, e, "a.b", `{"v":1}`)
	r2 := mustCreate(t, e, "a.b", `{"v":2}`)
	mustActivate(t, e, "a.b", r1, 0)
	mustActivate(t, e, "a.b", r2, 1)
	if _, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: "a.b", ExpectedGeneration: 2}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d commits, want 3 (creates do not notify)", len(got))
	}
	c := got[2]
	if c.Kind != varplane.EventActivated || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != r1 || c.Changes[0].Generation != 3 {
		t.Fatalf("rollback commit = %+v", c)
	}
	unsub()
	unsub() // idempotent
	mustActivate(t, e, "a.b", r2, 3)
	if len(got) != 3 {
		t.Fatalf("listener called after unsubscribe")
	}
}

func TestReplayUnsupportedOnMemory(t *testing.T) {
	e := newEngine(t)
	if _, err := e.Replay(context.Background(), "a.b", 1); !errors.Is(err, varplane.ErrUnsupported) {
		t.Fatalf("replay on memory: %v", err)
	}
}

func TestBadScopes(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	for _, s := range []string{"", ".", "a..b", "a.", ".a", "a b", "a\x00", "\xff", strings.Repeat("x", varplane.MaxScopeBytes+1)} {
		if _, err := e.Status(ctx, varplane.Scope(s)); !errors.Is(err, varplane.ErrBadRequest) {
			t.Errorf("scope %q: %v, want bad-request", s, err)
		}
	}
}
