package postgres

import (
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/store/storetest"
)

// TestWithoutDocument: the document member is cut out of the stored bytes,
// wherever it stands and however the body is spaced, keeping every other
// byte (a member this binary does not know included); a body the cut
// cannot handle is encoded anew without its document; one without a
// document is left alone.
func TestWithoutDocument(t *testing.T) {
	ev := storetest.CreatedEvent("cut.k", storetest.Doc(1))
	ours := string(eventjson.Event(ev))
	docJSON := string(ev.Document)
	rest := strings.Replace(ours, `,"document":`+docJSON, "", 1)
	if rest == ours {
		t.Fatalf("the test's body %s does not hold its document as expected", ours)
	}
	for _, tc := range []struct {
		name, body string
		want       string // "" : any body that decodes to the event without its document
		ok         bool
		cut        bool // the bytes are cut (other bytes kept verbatim)
	}{
		{"varplane's encoding", ours, rest, true, true},
		{"document first", `{"document":` + docJSON + `,` + rest[1:], rest, true, true},
		{"spaced", strings.Replace(ours, `,"document":`, ` , "document" : `, 1), strings.Replace(ours, `,"document":`+docJSON, " ", 1), true, true},
		{"a member this binary does not know", strings.Replace(ours, `}`+`,"schemaId"`, `},"extra":{"a":[1,2]},"schemaId"`, 1), "", true, true},
		{"an escaped key", strings.Replace(ours, `"document"`, `"docum\u0065nt"`, 1), "", true, false},
		{"no document", rest, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := withoutDocument([]byte(tc.body))
			if err != nil || ok != tc.ok {
				t.Fatalf("withoutDocument = %s, %v, %v; want ok %v", got, ok, err, tc.ok)
			}
			if !ok {
				return
			}
			var dec varplane.Event
			if err := eventjson.DecodeEvent(got, &dec); err != nil || dec.Document != nil || dec.Revision != ev.Revision || dec.Actor != ev.Actor || !dec.Timestamp.Equal(ev.Timestamp) {
				t.Fatalf("result %s decodes to %+v, %v", got, dec, err)
			}
			if tc.want != "" && string(got) != tc.want {
				t.Errorf("result %s, want %s", got, tc.want)
			}
			if tc.cut && strings.Contains(tc.body, `"extra"`) && !strings.Contains(string(got), `"extra":{"a":[1,2]}`) {
				t.Errorf("the unknown member was lost: %s", got)
			}
		})
	}
	if _, _, err := withoutDocument([]byte(`{"kind":`)); err == nil {
		t.Error("a body that does not decode was accepted")
	}
}

// FuzzWithoutDocument: for any body that decodes, the result decodes to
// the same event without its document, or the body had none.
func FuzzWithoutDocument(f *testing.F) {
	f.Add(string(eventjson.Event(storetest.CreatedEvent("fz.k", storetest.Doc(1)))))
	f.Add(`{"document":{"a":1},"kind":"revision-created","scope":"a.b","revision":"x","timestamp":"2026-12-02T00:00:00Z"}`)
	f.Add(`{"kind":"revision-created" , "document" : [1,{"b":"}"}] }`)
	f.Fuzz(func(t *testing.T, body string) {
		var before varplane.Event
		if eventjson.DecodeEvent([]byte(body), &before) != nil {
			return
		}
		got, ok, err := withoutDocument([]byte(body))
		if err != nil {
			t.Fatalf("withoutDocument of a body that decodes: %v", err)
		}
		if !ok {
			if len(before.Document) != 0 {
				t.Fatalf("a body with a document reported without one: %s", body)
			}
			return
		}
		var after varplane.Event
		if err := eventjson.DecodeEvent(got, &after); err != nil {
			t.Fatalf("result %q of %q does not decode: %v", got, body, err)
		}
		before.Document = nil
		if !equalEvents(before, after) {
			t.Fatalf("result %q of %q decodes to %+v, want %+v", got, body, after, before)
		}
	})
}

func equalEvents(a, b varplane.Event) bool {
	return string(eventjson.Event(&a)) == string(eventjson.Event(&b))
}
