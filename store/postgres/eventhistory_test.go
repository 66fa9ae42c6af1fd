package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// TestEventHistoryCutsDocuments: EventHistory cuts every revision-created
// event's document out on the server, whatever the document holds (text
// that looks like the event's own members, \u0000, a scalar) and whatever
// the event's metadata holds, and keeps the metadata as History has it.
func TestEventHistoryCutsDocuments(t *testing.T) {
	s := openStore(t, freshSchema(t, sharedURL(t)), Options{})
	ctx := context.Background()
	const scope = "cut.k"
	docs := []string{
		`{"a":1,"actor":"x","timestamp":"t"}`,
		`[1,",\"document\":",{"b":[true,null]}]`,
		`"a\"b,\"actor\":\"x\"}"`,
		`12.50`,
		`{"nul":"x\u0000y","q":"\\"}`,
		`true`,
	}
	reasons := []string{
		`why: "quoted", back\slash\`,
		`a reason past the window: ` + strings.Repeat(`\"x`, tailWindow), // read whole
		`},"document":"`,
		`ends with a backslash \`,
		`\\\"`,
		"",
	}
	for i, d := range docs {
		ev := storetest.CreatedEvent(scope, json.RawMessage(d))
		ev.Reason = reasons[i]
		ev.OnBehalfOf = "someone"
		if err := s.Append(ctx, ev, 0); err != nil {
			t.Fatalf("create %s: %v", d, err)
		}
	}
	want, err := s.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.EventHistory(ctx, scope)
	if err != nil {
		t.Fatalf("EventHistory: %v", err)
	}
	if len(got) != len(docs) || len(want) != len(docs) {
		t.Fatalf("EventHistory has %d events, History %d, want %d", len(got), len(want), len(docs))
	}
	for i := range want {
		if got[i].Document != nil {
			t.Errorf("event %d (document %s) carries %s", i, docs[i], got[i].Document)
		}
		if string(want[i].Document) != docs[i] {
			t.Errorf("History's document %d = %s, want %s", i, want[i].Document, docs[i])
		}
		g, w := got[i], want[i]
		g.Document, w.Document = nil, nil
		a, _ := json.Marshal(g)
		b, _ := json.Marshal(w)
		if string(a) != string(b) {
			t.Errorf("event %d = %s, want %s", i, a, b)
		}
		if g.Kind != varplane.EventRevisionCreated {
			t.Errorf("event %d is %s", i, g.Kind)
		}
	}
}

// TestTailAfterDocument: where the members after the document begin, read
// backwards from the end of an event's text, or false when the text does
// not say.
func TestTailAfterDocument(t *testing.T) {
	for _, tc := range []struct {
		text string
		want string // the tail; "" for false
	}{
		{`{"kind":"k","document":{"a":1},"actor":"x","timestamp":"t"}`, `,"actor":"x","timestamp":"t"}`},
		{`{"kind":"k","document":[1,"b"],"seq":12,"unauthenticated":true}`, `,"seq":12,"unauthenticated":true}`},
		{`{"kind":"k","document":"s,\"actor\":\"x\"","reason":"r"}`, `,"reason":"r"}`},
		{`{"kind":"k","document":12,"reason":"a\\"}`, `,"reason":"a\\"}`},
		{`{"kind":"k","document":true,"reason":"\""}`, `,"reason":"\""}`},
		{`{"kind":"k","document":null,"reason":"x"}`, `,"reason":"x"}`},
		{`{"kind":"k","document":{"reason":"x"},"reason":"},\"document\":1"}`, `,"reason":"},\"document\":1"}`},
		{`"reason":"cut by the window"}`, ""},
		{`\"x","reason":"y"}`, ""},
		{`{"kind":"k","document":{},"n":1.5}`, ""},
		{``, ""},
	} {
		at, ok := tailAfterDocument([]byte(tc.text))
		got := ""
		if ok {
			got = tc.text[at:]
		}
		if got != tc.want {
			t.Errorf("tailAfterDocument(%s) = %q, %v; want %q", tc.text, got, ok, tc.want)
		}
	}
}
