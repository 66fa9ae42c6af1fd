package eventjson_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/jsontext"
)

// fataler is what mustMarshal needs of a *testing.T, *testing.B or *rapid.T.
type fataler interface{ Fatal(args ...any) }

func mustMarshal(t fataler, v any) []byte {
	b, err := jsontext.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEventMatchesEncodingJSON(t *testing.T) {
	ts := time.Date(2026, 12, 2, 8, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		name string
		ev   varplane.Event
	}{
		{"activation", varplane.Event{Kind: varplane.EventActivated, Scope: "a.b", Revision: "sha256:00", Generation: 7, PreviousGeneration: varplane.GenerationPtr(6), Actor: "ci", Timestamp: ts}},
		{"created with document", varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "a", Revision: "sha256:ff", Document: json.RawMessage(`{"x":[1,2,{"y":null}]}`), SchemaID: "s", SchemaVersion: "1", Timestamp: ts}},
		{"escapes", varplane.Event{Kind: varplane.EventRejected, Scope: "a", Reason: "<&> \"q\" \\ \n\t\u2028 é \x01", RejectionReason: "bad \xff byte", Timestamp: ts}},
		{"cascade", varplane.Event{Kind: varplane.EventDeactivated, Scope: "a", Generation: 3, Cascade: []varplane.CascadeEntry{{Scope: "a.b", Generation: 2}, {Scope: "a.c", Generation: 9}}, Timestamp: ts}},
		{"keys", varplane.Event{Kind: varplane.EventActivated, Scope: "a", OnBehalfOf: "u", IdempotencyKey: "k", RequestHash: "h", Timestamp: ts}},
		{"chained", varplane.Event{Kind: varplane.EventActivated, Scope: "a", Actor: "claimed", Unauthenticated: true, Timestamp: ts, Seq: 12, Hash: "ab01"}},
		{"rollback", varplane.Event{Kind: varplane.EventActivated, Scope: "a", Revision: "sha256:00", Generation: 8, PreviousGeneration: varplane.GenerationPtr(7), RollbackOf: 7, Timestamp: ts, Seq: 3, Hash: "ab"}},
		{"zero time", varplane.Event{Kind: varplane.EventActivated, Scope: "a"}},
		{"offset time", varplane.Event{Kind: varplane.EventActivated, Scope: "a", Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := mustMarshal(t, &tc.ev)
			if got := eventjson.Event(&tc.ev); !bytes.Equal(got, want) {
				t.Fatalf("Event:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestRecordMatchesEncodingJSON(t *testing.T) {
	ts := time.Date(2026, 12, 2, 8, 0, 0, 5, time.UTC)
	for _, rec := range []varplane.RevisionRecord{
		{Scope: "a.b", Revision: "sha256:01", Document: json.RawMessage(`{"a":1}`), SchemaID: "s", SchemaVersion: "2", Actor: "ci <bot>", CreatedAt: ts},
		{Scope: "a", Revision: "sha256:02", Document: json.RawMessage(`"x"`), CreatedAt: ts},
		{Scope: "a", Revision: "sha256:03"},
	} {
		want := mustMarshal(t, &rec)
		if got := eventjson.Record(&rec); !bytes.Equal(got, want) {
			t.Fatalf("Record:\n got %s\nwant %s", got, want)
		}
	}
}

// TestEncodingProperty checks, for generated events and records with
// arbitrary strings, that the hand-written encoder writes what
// encoding/json writes, and that the hand-written decoders read it back to
// the value encoding/json reads, which is the value encoded.
func TestEncodingProperty(t *testing.T) {
	docs := []string{`{}`, `[1,2.5,"s"]`, `{"a":{"b":[true,false,null]}}`, `"\u003c"`, `123456789012345678901234567890`}
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.String()
		ev := varplane.Event{
			Kind:            varplane.EventKind(rapid.SampledFrom([]string{"revision-created", "activated", "deactivated", "rejected"}).Draw(t, "kind")),
			Scope:           varplane.Scope(str.Draw(t, "scope")),
			Revision:        varplane.Revision(str.Draw(t, "revision")),
			SchemaID:        str.Draw(t, "schemaId"),
			SchemaVersion:   str.Draw(t, "schemaVersion"),
			Generation:      varplane.Generation(rapid.Uint64().Draw(t, "generation")),
			Actor:           str.Draw(t, "actor"),
			OnBehalfOf:      str.Draw(t, "onBehalfOf"),
			Reason:          str.Draw(t, "reason"),
			IdempotencyKey:  str.Draw(t, "key"),
			RequestHash:     str.Draw(t, "hash"),
			RejectionReason: str.Draw(t, "rejection"),
			Timestamp:       time.Unix(rapid.Int64Range(0, 1<<34).Draw(t, "sec"), rapid.Int64Range(0, 999999999).Draw(t, "nsec")).UTC(),
			Unauthenticated: rapid.Bool().Draw(t, "unauthenticated"),
			RollbackOf:      varplane.Generation(rapid.Uint64().Draw(t, "rollbackOf")),
			Seq:             rapid.Uint64().Draw(t, "seq"),
			Hash:            str.Draw(t, "chainHash"),
		}
		if rapid.Bool().Draw(t, "hasDoc") {
			ev.Document = json.RawMessage(rapid.SampledFrom(docs).Draw(t, "doc"))
		}
		if rapid.Bool().Draw(t, "hasPrev") {
			ev.PreviousGeneration = varplane.GenerationPtr(varplane.Generation(rapid.Uint64().Draw(t, "prev")))
		}
		for i := rapid.IntRange(0, 3).Draw(t, "cascade"); i > 0; i-- {
			ev.Cascade = append(ev.Cascade, varplane.CascadeEntry{Scope: varplane.Scope(str.Draw(t, "cscope")), Generation: varplane.Generation(rapid.Uint64().Draw(t, "cgen"))})
		}
		got := eventjson.Event(&ev)
		if want := mustMarshal(t, &ev); !bytes.Equal(got, want) {
			t.Fatalf("Event:\n got %s\nwant %s", got, want)
		}
		var back varplane.Event
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("Event output does not decode: %v: %s", err, got)
		}
		var ours varplane.Event
		if err := eventjson.DecodeEvent(got, &ours); err != nil {
			t.Fatalf("DecodeEvent(%s): %v", got, err)
		}
		if !reflect.DeepEqual(ours, back) {
			t.Fatalf("DecodeEvent:\n got  %+v\n encoding/json %+v", ours, back)
		}
		rec := varplane.RevisionRecord{Scope: ev.Scope, Revision: ev.Revision, Document: ev.Document, SchemaID: ev.SchemaID,
			SchemaVersion: ev.SchemaVersion, Actor: ev.Actor, CreatedAt: ev.Timestamp}
		gotRec := eventjson.Record(&rec)
		if want := mustMarshal(t, &rec); !bytes.Equal(gotRec, want) {
			t.Fatalf("Record:\n got %s\nwant %s", gotRec, want)
		}
		var backRec, oursRec varplane.RevisionRecord
		if err := json.Unmarshal(gotRec, &backRec); err != nil {
			t.Fatalf("Record output does not decode: %v: %s", err, gotRec)
		}
		if err := eventjson.DecodeRecord(gotRec, &oursRec); err != nil {
			t.Fatalf("DecodeRecord(%s): %v", gotRec, err)
		}
		if rec.Document == nil {
			rec.Document = json.RawMessage("null") // as encoding/json reads it back
		}
		if !reflect.DeepEqual(oursRec, backRec) || !reflect.DeepEqual(oursRec, rec) {
			t.Fatalf("DecodeRecord:\n got  %+v\n encoding/json %+v\n encoded %+v", oursRec, backRec, rec)
		}
	})
}

func BenchmarkEvent(b *testing.B) {
	doc := json.RawMessage(`{"enabled":true,"note":"` + string(bytes.Repeat([]byte("x"), 960)) + `"}`)
	ev := varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "bench.a", Revision: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Document: doc, Actor: "bench", Timestamp: time.Now().UTC()}
	b.Run("eventjson", func(b *testing.B) {
		for b.Loop() {
			_ = eventjson.Event(&ev)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			_ = mustMarshal(b, &ev)
		}
	})
}
