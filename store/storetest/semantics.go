package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// testUnauthenticatedCascade: a subtree deactivation whose actor nobody
// authenticated (Event.Unauthenticated) marks the cascade entries it writes
// in its descendants' histories the same way, before and after a restart,
// so that no entry passes a claimed actor off as a verified one.
func testUnauthenticatedCascade(t *testing.T, h Harness) {
	s := open(t, h)
	rev := mustCreate(t, s, "claim.a.b", Doc(1))
	mustActivate(t, s, "claim.a.b", rev, 0)
	ev := DeactivatedEvent("claim.a", 0)
	ev.Actor, ev.Unauthenticated = "ana", true
	if err := s.AppendSubtreeDeactivation(t.Context(), ev, 0); err != nil {
		t.Fatal(err)
	}
	check := func(s varplane.Store, when string) {
		t.Helper()
		for _, scope := range []varplane.Scope{"claim.a", "claim.a.b"} {
			hist := mustHistory(t, s, scope)
			last := hist[len(hist)-1]
			if last.Kind != varplane.EventDeactivated || last.Actor != "ana" || !last.Unauthenticated {
				t.Errorf("%s: last event of %s = %s by %q unauthenticated %v, want a deactivation by \"ana\", unauthenticated",
					when, scope, last.Kind, last.Actor, last.Unauthenticated)
			}
		}
	}
	check(s, "after the deactivation")
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after a restart")
	}
}

// testIdempotentRejection: a rejected event carrying an idempotency key
// records the key (its request hash, the event, the scope's generation); a
// second event under the key, rejected or created, is refused with
// ErrDuplicateIdempotencyKey and appends nothing, before and after a
// restart.
func testIdempotentRejection(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := t.Context()
	const scope = varplane.Scope("idem.rejected")
	rej := &varplane.Event{Kind: varplane.EventRejected, Scope: scope, SchemaID: "test/v1", Actor: "ops",
		RejectionReason: "document.unknown-field at /x", IdempotencyKey: "k-rejected", RequestHash: "h-rejected", Timestamp: time.Now().UTC()}
	if err := s.Append(ctx, rej, 0); err != nil {
		t.Fatal(err)
	}
	check := func(s varplane.Store, when string) {
		t.Helper()
		rec, err := s.Idempotency(ctx, "k-rejected")
		if err != nil {
			t.Fatalf("%s: Idempotency: %v", when, err)
		}
		if rec.RequestHash != "h-rejected" || rec.Event.Kind != varplane.EventRejected || rec.Event.RejectionReason != rej.RejectionReason || rec.Generation != 0 {
			t.Errorf("%s: record = hash %q %s %q generation %d, want the rejection", when, rec.RequestHash, rec.Event.Kind, rec.Event.RejectionReason, rec.Generation)
		}
		again := *rej
		again.Seq, again.Hash = 0, ""
		again.RejectionReason = "document.type at /y"
		if err := s.Append(ctx, &again, 0); !errors.Is(err, varplane.ErrDuplicateIdempotencyKey) {
			t.Errorf("%s: a second rejection under the key: %v, want ErrDuplicateIdempotencyKey", when, err)
		}
		cr := CreatedEvent(scope, Doc(1))
		cr.IdempotencyKey, cr.RequestHash = "k-rejected", "h-other"
		if err := s.Append(ctx, cr, 0); !errors.Is(err, varplane.ErrDuplicateIdempotencyKey) {
			t.Errorf("%s: a creation under the key: %v, want ErrDuplicateIdempotencyKey", when, err)
		}
		if got := kinds(mustHistory(t, s, scope)); got != "rejected" {
			t.Errorf("%s: history = %s, want the one rejection", when, got)
		}
		if st := mustState(t, s, scope); st.LastRejected == nil || st.LastRejected.RejectionReason != rej.RejectionReason {
			t.Errorf("%s: last rejection = %+v, want the first", when, st.LastRejected)
		}
	}
	check(s, "after the rejection")
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after a restart")
	}
}

// refusing is a validator that refuses every member of a document but
// "enabled".
type refusing struct{}

func (refusing) Validate(_ string, doc json.RawMessage) ([]varplane.Issue, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, err
	}
	var out []varplane.Issue
	for k := range m {
		if k != "enabled" {
			out = append(out, varplane.Issue{Code: "document.unknown-field", Path: "/" + k, Message: "unknown field"})
		}
	}
	slices.SortFunc(out, func(a, b varplane.Issue) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// testEngineReplaysRejection: through an Engine on the store, a create and
// a publish of an invalid document repeated with the same idempotency key
// answer the first revision-invalid with its issues and append nothing,
// and another request under the key is idempotency-key-reused, before and
// after a restart.
func testEngineReplaysRejection(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := t.Context()
	const scope = varplane.Scope("idem.engine")
	bad := json.RawMessage(`{"enabled":true,"budget":1}`)
	requests := func(e *varplane.Engine) map[string]func(key string, doc json.RawMessage) error {
		return map[string]func(key string, doc json.RawMessage) error{
			"create": func(key string, doc json.RawMessage) error {
				_, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: doc, SchemaID: "strict", IdempotencyKey: key})
				return err
			},
			"publish": func(key string, doc json.RawMessage) error {
				_, err := e.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: doc, SchemaID: "strict", IdempotencyKey: key})
				return err
			},
		}
	}
	wantInvalid := func(what string, err error) {
		t.Helper()
		var e *varplane.Error
		if !errors.As(err, &e) || e.Code != varplane.CodeRevisionInvalid || len(e.Issues) != 1 || e.Issues[0].Path != "/budget" {
			t.Errorf("%s: %v, want revision-invalid naming /budget", what, err)
		}
	}
	e := varplane.NewEngine(s, varplane.Options{Validator: refusing{}})
	for name, do := range requests(e) {
		wantInvalid(name, do("k-"+name, bad))
	}
	e.Close()
	n := len(mustHistory(t, s, scope))
	check := func(s varplane.Store, when string) {
		t.Helper()
		e := varplane.NewEngine(s, varplane.Options{Validator: refusing{}})
		defer e.Close()
		for name, do := range requests(e) {
			wantInvalid(when+": "+name+" replayed", do("k-"+name, bad))
			if err := do("k-"+name, json.RawMessage(`{"enabled":false}`)); !errors.Is(err, varplane.ErrIdempotencyReuse) {
				t.Errorf("%s: %s of another document under the key: %v, want idempotency-key-reused", when, name, err)
			}
		}
		if got := len(mustHistory(t, s, scope)); got != n {
			t.Errorf("%s: history has %d events, want %d", when, got, n)
		}
	}
	check(s, "replayed")
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after a restart")
	}
}

// testRollbackTarget: RollbackTarget resolves a rollback's target from the
// store of record as of the expected generation, whatever the store's
// snapshot says: the latest earlier activation of another revision than
// the head as of that generation (any activation when it was a
// deactivation, a cascade entry included), the activation at a given
// generation, not-found when there is none and the scope is at the
// expected generation, a conflict when it is not; also far back in a long
// history (past a page of a store that reads it in pages).
func testRollbackTarget(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := t.Context()
	const scope = varplane.Scope("rb.k")
	a, b, c := mustCreate(t, s, scope, Doc(1)), mustCreate(t, s, scope, Doc(2)), mustCreate(t, s, scope, Doc(3))
	mustActivate(t, s, scope, a, 0)
	mustActivate(t, s, scope, b, 1)
	mustActivate(t, s, scope, b, 2) // the same revision again
	mustActivate(t, s, scope, c, 3)
	mustDeactivate(t, s, scope, 4)
	mustActivate(t, s, scope, a, 5)
	gen := func(g varplane.Generation) *varplane.Generation { return &g }
	for _, tc := range []struct {
		name     string
		scope    varplane.Scope
		expected varplane.Generation
		to       *varplane.Generation
		want     varplane.Revision
		err      *varplane.Error // its code, and for a conflict the current generation
	}{
		{"head c: the revision before it", scope, 4, nil, b, nil},
		{"head b activated twice: the one before both", scope, 3, nil, a, nil},
		{"head b once", scope, 2, nil, a, nil},
		{"as of a deactivation: the last activation", scope, 5, nil, c, nil},
		{"head a again: the latest other revision", scope, 6, nil, c, nil},
		{"the first head has nothing before it, and the scope moved on", scope, 1, nil, "", varplane.ConflictError(scope, 1, 6)},
		{"to a generation", scope, 6, gen(2), b, nil},
		{"to a generation, expected behind", scope, 3, gen(4), c, nil},
		{"to a deactivation", scope, 6, gen(5), "", &varplane.Error{Code: varplane.CodeNotFound}},
		{"to a generation never reached", scope, 6, gen(9), "", &varplane.Error{Code: varplane.CodeNotFound}},
		{"to a generation never reached, expected ahead", scope, 7, gen(9), "", varplane.ConflictError(scope, 7, 6)},
		{"a scope never written", "rb.never", 0, nil, "", &varplane.Error{Code: varplane.CodeNotFound}},
		{"a scope never written, expected ahead", "rb.never", 3, nil, "", varplane.ConflictError("rb.never", 3, 0)},
	} {
		got, err := s.RollbackTarget(ctx, tc.scope, tc.expected, tc.to)
		switch {
		case tc.err == nil && (err != nil || got != tc.want):
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
		case tc.err != nil && varplane.ErrorCode(err) != tc.err.Code:
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.err.Code)
		case tc.err != nil && tc.err.Current != nil:
			var e *varplane.Error
			if !errors.As(err, &e) || e.Current == nil || *e.Current != *tc.err.Current {
				t.Errorf("%s: %v, want a conflict at generation %d", tc.name, err, *tc.err.Current)
			}
		}
	}

	// A descendant cleared by its parent's deactivation: the cascade entry
	// is the head as of its generation.
	d1, d2 := mustCreate(t, s, "rb.p.d", Doc(4)), mustCreate(t, s, "rb.p.d", Doc(5))
	mustActivate(t, s, "rb.p.d", d1, 0)
	mustActivate(t, s, "rb.p.d", d2, 1)
	mustDeactivate(t, s, "rb.p", 0)
	if got, err := s.RollbackTarget(ctx, "rb.p.d", 3, nil); err != nil || got != d2 {
		t.Errorf("after a cascade: %s, %v; want %s", got, err, d2)
	}

	// Far back: one revision, then a hundred activations of another.
	x, y := mustCreate(t, s, "rb.long", Doc(6)), mustCreate(t, s, "rb.long", Doc(7))
	mustActivate(t, s, "rb.long", x, 0)
	for g := varplane.Generation(1); g <= 100; g++ {
		mustActivate(t, s, "rb.long", y, g)
	}
	if got, err := s.RollbackTarget(ctx, "rb.long", 101, nil); err != nil || got != x {
		t.Errorf("a hundred activations back: %s, %v; want %s", got, err, x)
	}
	if got, err := s.RollbackTarget(ctx, "rb.long", 101, gen(1)); err != nil || got != x {
		t.Errorf("to generation 1 of 101: %s, %v; want %s", got, err, x)
	}
}

// testWriteReady: every store tells whether it accepts writes
// (varplane.WriteReadiness): an open store does, a closed one does not.
// (What makes a store refuse writes is each store's own: its tests.)
func testWriteReady(t *testing.T, h Harness) {
	s := open(t, h)
	r, ok := s.(varplane.WriteReadiness)
	if !ok {
		t.Fatalf("the %s store does not implement varplane.WriteReadiness", s.Name())
	}
	if err := r.WriteReady(t.Context()); err != nil {
		t.Errorf("an open store: WriteReady = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteReady(t.Context()); err == nil {
		t.Error("a closed store is ready for writes")
	}
}
