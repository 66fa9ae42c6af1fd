package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// testEventHistory: EventHistory is History without the documents (the
// contract lets a store keep one it holds in memory): the same events, in
// the same order, with the same metadata, for every kind of event a
// history holds, including a descendant's cascade entry and a document
// whose strings a stricter JSON type would refuse.
func testEventHistory(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const parent, scope = "evhist", "evhist.k"
	docs := []json.RawMessage{Doc(1), json.RawMessage(`{"nul":"a\u0000b","n":1.50}`)}
	rev1 := mustCreate(t, s, scope, docs[0])
	mustActivate(t, s, scope, rev1, 0)
	rev2 := mustCreate(t, s, scope, docs[1])
	mustActivate(t, s, scope, rev2, 1)
	mustDeactivate(t, s, parent, 0) // a cascade entry in scope's history
	rej := &varplane.Event{Kind: varplane.EventRejected, Scope: scope, SchemaID: "test/v1", Actor: "ops", RejectionReason: "document.type: /n", Timestamp: time.Now().UTC()}
	if err := s.Append(ctx, rej, 3); err != nil {
		t.Fatalf("reject: %v", err)
	}

	want := mustHistory(t, s, scope)
	got, err := s.EventHistory(ctx, scope)
	if err != nil {
		t.Fatalf("EventHistory: %v", err)
	}
	if len(got) != len(want) || len(want) < 6 {
		t.Fatalf("EventHistory has %d events, History %d (want 6 or more)", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Document != nil && !bytes.Equal(g.Document, w.Document) {
			t.Errorf("EventHistory[%d] carries document %s, History %s", i, g.Document, w.Document)
		}
		g.Document, w.Document = nil, nil
		if a, b := mustJSON(t, g), mustJSON(t, w); a != b {
			t.Errorf("EventHistory[%d] = %s, want History's without its document: %s", i, a, b)
		}
	}
	if got, err := s.EventHistory(ctx, "evhist.never"); err != nil || len(got) != 0 {
		t.Errorf("EventHistory of a scope never written = %v, %v; want none", got, err)
	}
}
