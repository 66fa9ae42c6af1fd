package varplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// switchable refuses every member but "enabled" while strict holds, and
// accepts everything otherwise: a schema that changed between a request
// and its retry.
type switchable struct{ strict atomic.Bool }

func (v *switchable) Validate(id string, doc json.RawMessage) ([]varplane.Issue, error) {
	if id != "strict/v1" {
		return nil, varplane.ErrUnknownSchema
	}
	if !v.strict.Load() {
		return nil, nil
	}
	return strictIssues(doc), nil
}

// submit is one keyed request that carries a document: a create or a
// publish (the two entrances that validate).
type submit func(ctx context.Context, e *varplane.Engine, key, doc string) error

var submits = map[string]submit{
	"create": func(ctx context.Context, e *varplane.Engine, key, doc string) error {
		_, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "app.k", Document: json.RawMessage(doc), SchemaID: "strict/v1", IdempotencyKey: key})
		return err
	},
	"publish": func(ctx context.Context, e *varplane.Engine, key, doc string) error {
		_, err := e.Publish(ctx, varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(doc), SchemaID: "strict/v1", IdempotencyKey: key})
		return err
	},
}

func issuesOf(t *testing.T, err error) []varplane.Issue {
	t.Helper()
	var e *varplane.Error
	if !errors.As(err, &e) || e.Code != varplane.CodeRevisionInvalid || len(e.Issues) == 0 {
		t.Fatalf("err = %v, want revision-invalid with issues", err)
	}
	return e.Issues
}

// Issue 33 item 6: a replayed rejected request (same key, same request)
// answers the original 422 with its issues and appends nothing, also when
// the validator would now accept it; the key is bound to the rejected
// request, so reusing it for another request is idempotency-key-reused and
// appends nothing either. A document that has no canonical form (a number
// canonical JSON would change) is recognised by its bytes.
func TestReplayedRejection(t *testing.T) {
	for name, do := range submits {
		for _, tc := range []struct {
			what, doc string
			issue     varplane.Issue
		}{
			{"schema issue", `{"enabled":true,"budgets2":1}`, varplane.Issue{Code: "document.unknown-field", Path: "/budgets2"}},
			{"number issue", `{"enabled":true,"n":9007199254740993}`, varplane.Issue{Code: varplane.IssueNumberPrecision, Path: "/n"}},
		} {
			t.Run(name+"/"+tc.what, func(t *testing.T) {
				ctx := context.Background()
				s := memory.New()
				t.Cleanup(func() { _ = s.Close() })
				v := &switchable{}
				v.strict.Store(true)
				e := varplane.NewEngine(s, varplane.Options{Validator: v})
				t.Cleanup(e.Close)
				first := issuesOf(t, do(ctx, e, "k1", tc.doc))
				if first[0].Code != tc.issue.Code || first[0].Path != tc.issue.Path {
					t.Fatalf("issues %+v, want %s at %s first", first, tc.issue.Code, tc.issue.Path)
				}
				hist := func() []varplane.Event {
					h, err := e.History(ctx, "app.k")
					if err != nil {
						t.Fatal(err)
					}
					return h
				}
				before := hist()
				if len(before) != 1 || before[0].Kind != varplane.EventRejected || before[0].IdempotencyKey != "k1" {
					t.Fatalf("history after the rejection: %+v, want one rejected event carrying the key", before)
				}
				// The same request, with the document spelled with other
				// white space: the original answer, nothing appended.
				again := issuesOf(t, do(ctx, e, "k1", " "+tc.doc+"\n"))
				if !reflect.DeepEqual(again, first) {
					t.Errorf("replay answered %+v, want the original %+v", again, first)
				}
				// The schema changed meanwhile: still the original refusal,
				// by its recorded codes and paths.
				v.strict.Store(false)
				later := issuesOf(t, do(ctx, e, "k1", tc.doc))
				if tc.issue.Code == "document.unknown-field" {
					if len(later) != 1 || later[0].Code != tc.issue.Code || later[0].Path != tc.issue.Path {
						t.Errorf("replay after the schema changed answered %+v, want %s at %s", later, tc.issue.Code, tc.issue.Path)
					}
				}
				// Another request under the key.
				if err := do(ctx, e, "k1", `{"enabled":true}`); !errors.Is(err, varplane.ErrIdempotencyReuse) {
					t.Errorf("a valid document under the rejected request's key: %v, want idempotency-key-reused", err)
				}
				if got := hist(); len(got) != 1 {
					t.Errorf("history grew to %d events: %+v", len(got), got)
				}
				// A fresh key still works.
				if err := do(ctx, e, "k2", `{"enabled":true}`); err != nil {
					t.Errorf("a valid document under a new key: %v", err)
				}
			})
		}
	}
}

// A keyed activation the store refuses (an unknown revision) records
// nothing, so its replay is refused the same way and appends nothing.
func TestReplayedRefusedActivation(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	rev := mustCreate(t, e, "app.k", `{"v":1}`)
	unknown := varplane.Revision("sha256:" + strings.Repeat("1", 64))
	req := varplane.ActivateRequest{Scope: "app.k", Revision: unknown, IdempotencyKey: "k1"}
	for range 2 {
		if _, err := e.Activate(ctx, req); !errors.Is(err, varplane.ErrNotFound) {
			t.Fatalf("activate of an unknown revision: %v, want not-found", err)
		}
	}
	if h, _ := e.History(ctx, "app.k"); len(h) != 1 {
		t.Fatalf("history = %+v, want the creation only", h)
	}
	req.Revision = rev
	if _, err := e.Activate(ctx, req); err != nil {
		t.Fatalf("the key of a refused (unrecorded) activation: %v", err)
	}
}
