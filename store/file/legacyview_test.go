package file_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// legacyView is what a store answers for every scope of a log: the state,
// the history, each revision named in it, and each idempotency key. The
// legacy fixtures' views (testdata/legacy/*.view.json) were written by the
// reader of the format the fixture is in; a converted log must answer the
// same, seq and hash apart.
type legacyView struct {
	Scopes []scopeView         `json:"scopes"`
	Idem   map[string]idemView `json:"idem"`
}

type scopeView struct {
	Scope      varplane.Scope               `json:"scope"`
	Generation varplane.Generation          `json:"generation"`
	Head       json.RawMessage              `json:"head,omitempty"`
	Rejected   json.RawMessage              `json:"rejected,omitempty"`
	History    []json.RawMessage            `json:"history"`
	Revisions  map[varplane.Revision]string `json:"revisions"`
}

type idemView struct {
	RequestHash string              `json:"requestHash"`
	Generation  varplane.Generation `json:"generation"`
	Event       json.RawMessage     `json:"event"`
}

// unlinked is ev without its chain link, as a log written before chains
// holds it.
func unlinked(ev varplane.Event) json.RawMessage {
	ev.Seq, ev.Hash = 0, ""
	return eventjson.Event(&ev)
}

func viewOf(t testing.TB, s varplane.Store) legacyView {
	t.Helper()
	ctx := context.Background()
	scopes, err := s.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := legacyView{Idem: map[string]idemView{}}
	for _, sc := range scopes {
		st, err := s.State(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		sv := scopeView{Scope: sc, Generation: st.Generation, Revisions: map[varplane.Revision]string{}}
		if h := st.Head; h != nil {
			sv.Head, _ = json.Marshal(map[string]any{"generation": h.Generation, "revision": h.Revision, "document": h.Document,
				"schemaId": h.SchemaID, "effectiveAt": h.EffectiveAt, "actor": h.Actor, "reason": h.Reason})
		}
		if st.LastRejected != nil {
			sv.Rejected = unlinked(*st.LastRejected)
		}
		hist, err := s.History(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range hist {
			sv.History = append(sv.History, unlinked(ev))
			if ev.Revision != "" {
				rec, err := s.Revision(ctx, sc, ev.Revision)
				switch {
				case err == nil:
					sv.Revisions[ev.Revision] = string(rec.Document)
				case errors.Is(err, varplane.ErrReclaimed):
					sv.Revisions[ev.Revision] = "reclaimed"
				case errors.Is(err, varplane.ErrNotFound):
					sv.Revisions[ev.Revision] = "not-found"
				default:
					t.Fatalf("%s %s: %v", sc, ev.Revision, err)
				}
			}
			if k := ev.IdempotencyKey; k != "" {
				rec, err := s.Idempotency(ctx, k)
				if err != nil {
					t.Fatalf("key %s: %v", k, err)
				}
				v.Idem[k] = idemView{RequestHash: rec.RequestHash, Generation: rec.Generation, Event: unlinked(rec.Event)}
			}
		}
		v.Scopes = append(v.Scopes, sv)
	}
	return v
}
