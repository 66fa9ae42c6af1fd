package varplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

func publishReq(scope, doc string, expected varplane.Generation) varplane.PublishRequest {
	return varplane.PublishRequest{Scope: varplane.Scope(scope), Document: json.RawMessage(doc), ExpectedGeneration: expected, Actor: "ana", Reason: "ship"}
}

// TestPublishIsCreateAndActivate checks that a publish answers and stores
// what a create followed by an activation would: the same revision digest,
// generation, head, and events (one revision-created only when new).
func TestPublishIsCreateAndActivate(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	res, err := e.Publish(ctx, publishReq("svc.flags", `{"b": 1, "a": [true]}`, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := mustCreate(t, newEngine(t), "svc.flags", `{"a":[true],"b":1}`)
	if !res.Created || res.Revision != want || res.Generation != 1 || res.Scope != "svc.flags" || res.EffectiveAt.IsZero() {
		t.Errorf("publish = %+v, want created revision %s at generation 1", res, want)
	}
	head, err := e.Head(ctx, "svc.flags")
	if err != nil || head.Revision != want || string(head.Document) != `{"b":1,"a":[true]}` || head.Actor != "ana" || head.Reason != "ship" {
		t.Fatalf("head = %+v, %v", head, err)
	}
	// The same document again: found, activated at the next generation.
	res2, err := e.Publish(ctx, publishReq("svc.flags", `{"a":[true],"b":1}`, 1))
	if err != nil || res2.Created || res2.Revision != want || res2.Generation != 2 {
		t.Errorf("republish = %+v, %v; want not created, generation 2", res2, err)
	}
	// A revision created earlier is found too.
	r3 := mustCreate(t, e, "svc.flags", `{"c":3}`)
	res3, err := e.Publish(ctx, publishReq("svc.flags", `{"c":3}`, 2))
	if err != nil || res3.Created || res3.Revision != r3 || res3.Generation != 3 {
		t.Errorf("publish of a created revision = %+v, %v", res3, err)
	}
	hist, _ := e.History(ctx, "svc.flags")
	var kinds []varplane.EventKind
	for _, ev := range hist {
		kinds = append(kinds, ev.Kind)
	}
	if got := fmt.Sprint(kinds); got != "[revision-created activated activated revision-created activated]" {
		t.Errorf("history = %s", got)
	}
	if b, _ := json.Marshal(res); !json.Valid(b) || !strings.Contains(string(b), `"created":true`) || !strings.Contains(string(b), `"generation":1`) {
		t.Errorf("JSON answer = %s, want the activation's fields and created", b)
	}
}

func TestPublishRefusals(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(e *varplane.Engine)
		req   varplane.PublishRequest
		code  varplane.Code
	}{
		{"invalid scope", nil, publishReq("Bad Scope", `{}`, 0), varplane.CodeBadRequest},
		{"no document", nil, publishReq("s.k", ``, 0), varplane.CodeBadRequest},
		{"not JSON", nil, publishReq("s.k", `{"a":`, 0), varplane.CodeBadRequest},
		{"schema issues", nil, varplane.PublishRequest{Scope: "s.k", Document: json.RawMessage(`{"x":1}`), SchemaID: "strict/v1"}, varplane.CodeRevisionInvalid},
		{"unknown schema", nil, varplane.PublishRequest{Scope: "s.k", Document: json.RawMessage(`{}`), SchemaID: "nope/v1"}, varplane.CodeRevisionInvalid},
		{"group shape", nil, publishReq("grp", `{"other.x":1}`, 0), varplane.CodeRevisionInvalid},
		{"stale generation", func(e *varplane.Engine) { mustActivate(t, e, "s.k", mustCreate(t, e, "s.k", `{"v":0}`), 0) }, publishReq("s.k", `{"v":1}`, 0), varplane.CodeRevisionConflict},
		{"future generation", nil, publishReq("s.k", `{"v":1}`, 4), varplane.CodeRevisionConflict},
		// A publish that has lost its race is refused before validation:
		// no rejection is recorded for it.
		{"stale generation before validation", func(e *varplane.Engine) { mustActivate(t, e, "s.k", mustCreate(t, e, "s.k", `{"v":0}`), 0) },
			varplane.PublishRequest{Scope: "s.k", Document: json.RawMessage(`{"x":1}`), SchemaID: "strict/v1"}, varplane.CodeRevisionConflict},
		// With an idempotency key it goes the whole way: the document's
		// issues are found (and recorded) first.
		{"stale generation with a key", func(e *varplane.Engine) { mustActivate(t, e, "s.k", mustCreate(t, e, "s.k", `{"v":0}`), 0) },
			varplane.PublishRequest{Scope: "s.k", Document: json.RawMessage(`{"x":1}`), SchemaID: "strict/v1", IdempotencyKey: "k"}, varplane.CodeRevisionInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t)
			if tc.setup != nil {
				tc.setup(e)
			}
			before, _ := e.History(ctx, tc.req.Scope)
			was, _ := e.Store().State(ctx, tc.req.Scope)
			_, err := e.Publish(ctx, tc.req)
			if got := varplane.ErrorCode(err); got != tc.code {
				t.Fatalf("err = %v (code %s), want %s", err, got, tc.code)
			}
			after, _ := e.History(ctx, tc.req.Scope)
			grew := len(after) - len(before)
			switch tc.code {
			case varplane.CodeRevisionInvalid:
				// Only the rejection is recorded, as CreateRevision does.
				st, _ := e.Store().State(ctx, tc.req.Scope)
				if grew != 1 || after[len(after)-1].Kind != varplane.EventRejected || st.LastRejected == nil || st.Head != was.Head {
					t.Errorf("after an invalid publish: %d new events, state %+v; want one rejection", grew, st)
				}
			case varplane.CodeRevisionConflict:
				var ve *varplane.Error
				if !errors.As(err, &ve) || ve.Current == nil || ve.Expected == nil || *ve.Expected != tc.req.ExpectedGeneration {
					t.Errorf("conflict %v does not carry the generations", err)
				}
				if grew != 0 {
					t.Errorf("a conflicting publish appended %d events", grew)
				}
			default:
				if grew != 0 {
					t.Errorf("a refused publish appended %d events", grew)
				}
			}
		})
	}
}

func TestPublishIdempotency(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	commits := 0
	defer e.OnCommit(func(varplane.Commit) { commits++ })()
	first := publishReq("idem.k", `{"v":1}`, 0)
	first.IdempotencyKey = "pub-1"
	a, err := e.Publish(ctx, first)
	if err != nil || !a.Created {
		t.Fatalf("publish: %+v, %v", a, err)
	}
	again, err := e.Publish(ctx, first)
	if err != nil || again != a {
		t.Errorf("replay = %+v, %v; want the first answer %+v", again, err, a)
	}
	// A found revision under a key answers created false on replay too.
	found := publishReq("idem.k", `{"v":1}`, 1)
	found.IdempotencyKey = "pub-2"
	b, err := e.Publish(ctx, found)
	if err != nil || b.Created || b.Generation != 2 {
		t.Fatalf("publish of the stored revision: %+v, %v", b, err)
	}
	if again, err := e.Publish(ctx, found); err != nil || again != b {
		t.Errorf("replay = %+v, %v; want %+v", again, err, b)
	}
	if commits != 2 {
		t.Errorf("%d commits heard, want 2 (replays commit nothing)", commits)
	}
	// The key with another request, or another operation's key, is refused.
	other := publishReq("idem.k", `{"v":2}`, 2)
	other.IdempotencyKey = "pub-1"
	if _, err := e.Publish(ctx, other); varplane.ErrorCode(err) != varplane.CodeIdempotencyReused {
		t.Errorf("reused key: err = %v, want idempotency-key-reused", err)
	}
	if _, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "idem.k", Revision: a.Revision, ExpectedGeneration: 2, IdempotencyKey: "pub-2"}); varplane.ErrorCode(err) != varplane.CodeIdempotencyReused {
		t.Errorf("a publish key on an activation: err = %v, want idempotency-key-reused", err)
	}
}

// TestConcurrentPublishesOneWinner races publishers of distinct documents
// on one expected generation: one wins, the others get a conflict at the
// winner's generation, and no loser's revision is stored.
func TestConcurrentPublishesOneWinner(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.Publish(ctx, publishReq("race.k", fmt.Sprintf(`{"i":%d}`, i), 0))
		}()
	}
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, varplane.ErrConflict):
		default:
			t.Errorf("publisher %d: %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d publishers won, want 1", wins)
	}
	if hist, _ := e.History(ctx, "race.k"); len(hist) != 2 {
		t.Errorf("history has %d events, want the winner's two (no loser's revision)", len(hist))
	}
}

// checkedSpy is a memory store that takes checked publishes, recording
// whether the engine handed it a CheckedDocument that holds the document.
type checkedSpy struct {
	*memory.Store
	checked, plain int
}

func (s *checkedSpy) AppendPublishChecked(ctx context.Context, created, activated *varplane.Event, expected varplane.Generation, doc varplane.CheckedDocument) (bool, error) {
	if doc.Holds(created.Document) {
		s.checked++
	} else {
		s.plain++
	}
	return s.AppendPublish(ctx, created, activated, expected)
}

// checkedPublish returns a publish of the compact document doc inside a
// body that CheckBody vouched for under lim.
func checkedPublish(t *testing.T, lim varplane.Limits, scope, doc string) varplane.PublishRequest {
	t.Helper()
	body := []byte(`{"scope":"` + scope + `","document":` + doc + `}`)
	cb, err := lim.CheckBody(body, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := body[len(body)-1-len(doc) : len(body)-1]
	req := publishReq(scope, "", 0)
	req.Document, req.Checked = d, cb.Document(d)
	if !req.Checked.Holds(d) {
		t.Fatalf("CheckBody does not vouch for %s", doc)
	}
	return req
}

// TestPublishCheckedDocument checks that a document a CheckedBody vouched
// for is published as an unchecked one would be and reaches a
// CheckedPublisher as checked, and that the engine does not take the word
// of a CheckedDocument that holds other bytes or was checked under looser
// limits than its own.
func TestPublishCheckedDocument(t *testing.T) {
	ctx := context.Background()
	lim := varplane.Limits{MaxDepth: 2}
	spy := &checkedSpy{Store: memory.New()}
	t.Cleanup(func() { _ = spy.Close() })
	e := varplane.NewEngine(spy, varplane.Options{Limits: lim})

	res, err := e.Publish(ctx, checkedPublish(t, lim, "svc.a", `{"b":[1,2],"a":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := newEngine(t).Publish(ctx, publishReq("svc.a", `{"b":[1,2],"a":"x"}`, 0))
	if err != nil || res.Revision != plain.Revision || !res.Created || res.Generation != 1 {
		t.Fatalf("checked publish = %+v, unchecked = %+v, %v", res, plain, err)
	}
	if head, err := e.Head(ctx, "svc.a"); err != nil || string(head.Document) != `{"b":[1,2],"a":"x"}` {
		t.Fatalf("head = %+v, %v", head, err)
	}
	if spy.checked != 1 || spy.plain != 0 {
		t.Fatalf("store saw %d checked and %d plain publishes, want 1 and 0", spy.checked, spy.plain)
	}

	// A CheckedDocument that holds other bytes vouches for nothing: the
	// engine checks the document it is given, and refuses it.
	other := checkedPublish(t, lim, "svc.b", `{"ok":true}`)
	other.Document = json.RawMessage(`{"ok":tru}`)
	if _, err := e.Publish(ctx, other); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Fatalf("publish of invalid JSON with another document's check = %v, want bad-request", err)
	}
	// Checked under looser limits than the engine's: checked again, and
	// refused at the engine's depth limit.
	deep := checkedPublish(t, varplane.Limits{MaxDepth: 8}, "svc.c", `{"a":{"b":{"c":1}}}`)
	if _, err := e.Publish(ctx, deep); varplane.ErrorCode(err) != varplane.CodeLimitExceeded {
		t.Fatalf("publish past the engine's depth, checked under a looser limit = %v, want limit-exceeded", err)
	}
	if spy.checked != 1 || spy.plain != 0 {
		t.Fatalf("store saw %d checked and %d plain publishes after the refusals, want 1 and 0", spy.checked, spy.plain)
	}
	if st, _ := e.Store().State(ctx, "svc.b"); st != nil && st.Generation != 0 {
		t.Fatalf("a refused publish left %+v", st)
	}
}
