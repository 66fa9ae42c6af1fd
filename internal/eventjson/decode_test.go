package eventjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

var ts = time.Date(2026, 7, 20, 10, 4, 5, 123456789, time.UTC)

var codecEvents = []varplane.Event{
	{Kind: varplane.EventRevisionCreated, Scope: "agentic.lanes.vinci", Revision: varplane.Revision("sha256:" + strings.Repeat("ab", 32)),
		Document: json.RawMessage(`{"enabled":true,"model_target_ref":"secret.ops.model","n":[1,2.5e3,-0.1,null],"s":"<&>\u2028\"\\"}`),
		SchemaID: "agentic-lanes/v1", SchemaVersion: "1", Actor: "ops", Reason: "first", IdempotencyKey: "k", RequestHash: "h", Timestamp: ts},
	{Kind: varplane.EventActivated, Scope: "グループ.日本.ключ", Revision: varplane.Revision("sha256:" + strings.Repeat("0f", 32)),
		Generation: 1, PreviousGeneration: varplane.GenerationPtr(0), Actor: "ops\n\t\x01", Reason: "enable \u2029 vinci", Timestamp: ts.Truncate(time.Second)},
	{Kind: varplane.EventDeactivated, Scope: "a", Generation: 18446744073709551615, PreviousGeneration: varplane.GenerationPtr(18446744073709551614),
		Cascade: []varplane.CascadeEntry{{Scope: "a.b", Generation: 2}, {Scope: "a.c", Generation: 7}}, Timestamp: ts},
	{Kind: varplane.EventRejected, Scope: "tenant:acme", RejectionReason: "document.unknown-field: /budgets2", Timestamp: time.Time{}},
	{Kind: varplane.EventActivated, Scope: "a.b", Revision: varplane.Revision("sha256:" + strings.Repeat("0f", 32)), Generation: 2,
		Actor: "claimed", Unauthenticated: true, Timestamp: ts, Seq: 18446744073709551615, Hash: strings.Repeat("9e", 32)},
	{Kind: varplane.EventActivated, Scope: "a.b", Revision: varplane.Revision("sha256:" + strings.Repeat("0f", 32)), Generation: 4,
		PreviousGeneration: varplane.GenerationPtr(3), Reason: "rollback to sha256:0f0f", RollbackOf: 3, Timestamp: ts},
}

func TestCodecRoundTrip(t *testing.T) {
	for _, ev := range codecEvents {
		t.Run(string(ev.Kind), func(t *testing.T) {
			line := eventjson.AppendEvent(nil, &ev)
			if bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("encoded line contains a newline: %s", line)
			}
			var got varplane.Event
			if err := eventjson.DecodeEvent(line, &got); err != nil {
				t.Fatalf("DecodeEvent(%s): %v", line, err)
			}
			if !reflect.DeepEqual(got, ev) {
				t.Errorf("round trip:\n got  %+v\n want %+v", got, ev)
			}
			// encoding/json agrees on our lines, and we decode its output.
			var std varplane.Event
			if err := json.Unmarshal(line, &std); err != nil {
				t.Fatalf("encoding/json cannot read %s: %v", line, err)
			}
			if !reflect.DeepEqual(std, ev) {
				t.Errorf("encoding/json reads:\n got  %+v\n want %+v", std, ev)
			}
			b, err := json.Marshal(&ev)
			if err != nil {
				t.Fatal(err)
			}
			var fromStd varplane.Event
			if err := eventjson.DecodeEvent(b, &fromStd); err != nil {
				t.Fatalf("DecodeEvent(encoding/json output %s): %v", b, err)
			}
			// encoding/json HTML-escapes inside documents: same value, other bytes.
			if len(ev.Document) > 0 && semantic(fromStd.Document) == semantic(ev.Document) {
				fromStd.Document = ev.Document
			}
			if !reflect.DeepEqual(fromStd, ev) {
				t.Errorf("decoding encoding/json output:\n got  %+v\n want %+v", fromStd, ev)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, line := range []string{
		``, `{`, `[]`, `{"kind":"activated"`, `{"kind":"activated",}`, `{"generation":-1}`, `{"generation":1.5}`,
		`{"generation":01}`, `{"generation":18446744073709551616}`, `{"document":{"a":}}`, `{"document":[1,]}`,
		`{"scope":"\x00"}`, `{"scope":"\q"}`, `{"timestamp":"yesterday"}`, `{"kind":"x"} trailing`, "{\"scope\":\"\xff\"}",
		`{"cascade":[{"scope":"a.b","generation":"2"}]}`, `{"document":01}`, `{"document":tru}`,
		`{"actor":"ops","kind":"activated","actor":"mallory"}`, `{"kind":"activated","\u006bind":"rejected"}`, `{"seq":1,"seq":2}`,
		`{"unauthenticated":1}`, `{"unauthenticated":"true"}`, `{"unauthenticated":fals}`, `{"seq":-1}`, `{"seq":"1"}`, `{"hash":1}`,
	} {
		var ev varplane.Event
		if err := eventjson.DecodeEvent([]byte(line), &ev); err == nil {
			t.Errorf("DecodeEvent(%q) succeeded, want an error", line)
		}
	}
}

// TestDecodeDepthBound checks the reader's depth bound against the ceilings:
// a line nested MaxDepthCeiling+EnvelopeDepth deep (the deepest document
// any configuration accepts, and more) decodes, in the document and in a
// skipped field; one level more is refused.
func TestDecodeDepthBound(t *testing.T) {
	const lineDepth = varplane.MaxDepthCeiling + varplane.EnvelopeDepth
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name  string
		line  func(docDepth int) string
		outer int // containers of the line around the value
	}{
		{"document", func(d int) string { return `{"kind":"revision-created","document":` + nest(d) + `}` }, 1},
		{"unknown field", func(d int) string { return `{"kind":"activated","extra":` + nest(d) + `}` }, 1},
		{"cascade field", func(d int) string { return `{"cascade":[{"scope":"a.b","x":` + nest(d) + `}]}` }, 3},
	} {
		var ev varplane.Event
		if err := eventjson.DecodeEvent([]byte(tc.line(lineDepth-tc.outer)), &ev); err != nil {
			t.Errorf("%s: a line %d deep is refused: %v", tc.name, lineDepth, err)
		}
		if err := eventjson.DecodeEvent([]byte(tc.line(lineDepth-tc.outer+1)), &ev); err == nil {
			t.Errorf("%s: a line %d deep decodes, want the depth bound", tc.name, lineDepth+1)
		}
	}
}

func TestDecodeTolerates(t *testing.T) {
	line := ` { "kind" : "activated" , "extra": {"x":[1,{"y":null}]}, "scope":"a.b", "previousGeneration": null, "actor":null,` +
		` "reason":"\ud83d\ude00 \ud800", "generation": 3, "timestamp":"2026-07-20T12:00:00+02:00" } `
	var ev varplane.Event
	if err := eventjson.DecodeEvent([]byte(line), &ev); err != nil {
		t.Fatal(err)
	}
	var std varplane.Event
	if err := json.Unmarshal([]byte(line), &std); err != nil {
		t.Fatal(err)
	}
	if ev.Reason != std.Reason || ev.Reason != "😀 \ufffd" {
		t.Errorf("reason = %q, encoding/json %q", ev.Reason, std.Reason)
	}
	if !ev.Timestamp.Equal(std.Timestamp) || ev.Generation != 3 || ev.Scope != "a.b" || ev.PreviousGeneration != nil {
		t.Errorf("decoded %+v, encoding/json %+v", ev, std)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, ev := range codecEvents {
		f.Add(eventjson.AppendEvent(nil, &ev))
	}
	f.Add([]byte(`{"kind":"activated","scope":"a","generation":1,"timestamp":"2026-07-20T12:00:00.5+02:00"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var ev varplane.Event
		if err := eventjson.DecodeEvent(line, &ev); err != nil {
			return
		}
		if ev.Timestamp.Year() < 0 || ev.Timestamp.Year() > 9999 {
			return
		}
		enc := eventjson.AppendEvent(nil, &ev)
		var again varplane.Event
		if err := eventjson.DecodeEvent(enc, &again); err != nil {
			t.Fatalf("re-decoding %s (from %q): %v", enc, line, err)
		}
		if !again.Timestamp.Equal(ev.Timestamp) {
			t.Fatalf("timestamp %v became %v", ev.Timestamp, again.Timestamp)
		}
		again.Timestamp = ev.Timestamp
		if !reflect.DeepEqual(again, ev) {
			t.Fatalf("round trip of %q:\n got  %+v\n want %+v", line, again, ev)
		}
		if enc2 := eventjson.AppendEvent(nil, &again); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not stable: %s vs %s", enc, enc2)
		}
	})
}

var codecRecords = []varplane.RevisionRecord{
	{Scope: "agentic.lanes.vinci", Revision: varplane.Revision("sha256:" + strings.Repeat("ab", 32)),
		Document: json.RawMessage(`{"enabled":true,"n":[1,2.5e3,-0.1,null],"s":"<&>\u2028\"\\"}`),
		SchemaID: "agentic-lanes/v1", SchemaVersion: "1", Actor: "ops\n\t\x01", CreatedAt: ts},
	{Scope: "グループ.日本.ключ", Revision: "sha256:00", Document: json.RawMessage(`"x"`), CreatedAt: ts.Truncate(time.Second)},
	{Scope: "a", Revision: "sha256:01", Document: json.RawMessage(`null`)},
}

func TestRecordRoundTrip(t *testing.T) {
	for _, rec := range codecRecords {
		b := eventjson.Record(&rec)
		var got, std varplane.RevisionRecord
		if err := eventjson.DecodeRecord(b, &got); err != nil {
			t.Fatalf("DecodeRecord(%s): %v", b, err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Errorf("round trip:\n got  %+v\n want %+v", got, rec)
		}
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("encoding/json cannot read %s: %v", b, err)
		}
		if !reflect.DeepEqual(got, std) {
			t.Errorf("encoding/json reads another record:\n ours %+v\n std  %+v", got, std)
		}
	}
	// Reused destinations are reset; unknown fields are skipped.
	got := codecRecords[0]
	if err := eventjson.DecodeRecord([]byte(`{"scope":"b","extra":{"x":[1]},"revision":"sha256:02"}`), &got); err != nil {
		t.Fatal(err)
	}
	if want := (varplane.RevisionRecord{Scope: "b", Revision: "sha256:02"}); !reflect.DeepEqual(got, want) {
		t.Errorf("decoded into a used record: %+v, want %+v", got, want)
	}
}

func TestDecodeRecordRefuses(t *testing.T) {
	for _, b := range []string{
		``, `[]`, `{"scope":"a"`, `{"scope":1}`, `{"document":{"a":}}`, `{"createdAt":"yesterday"}`,
		`{"scope":"a"} {}`, "{\"actor\":\"\xff\"}", `{"document":` + strings.Repeat("[", varplane.MaxDepthCeiling+varplane.EnvelopeDepth) + `}`,
	} {
		var rec varplane.RevisionRecord
		if err := eventjson.DecodeRecord([]byte(b), &rec); err == nil {
			t.Errorf("DecodeRecord(%q) succeeded, want an error", b)
		} else if !errors.Is(err, eventjson.ErrSyntax) {
			t.Errorf("DecodeRecord(%q): %v does not wrap ErrSyntax", b, err)
		}
	}
}

// FuzzDecodeRecord checks that what DecodeRecord accepts encodes and
// decodes back to itself, and that encoding/json accepts it too.
func FuzzDecodeRecord(f *testing.F) {
	for _, rec := range codecRecords {
		f.Add(eventjson.Record(&rec))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var rec varplane.RevisionRecord
		if err := eventjson.DecodeRecord(b, &rec); err != nil {
			return
		}
		var std varplane.RevisionRecord
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("DecodeRecord accepts %q, encoding/json does not: %v", b, err)
		}
		if rec.CreatedAt.Year() < 0 || rec.CreatedAt.Year() > 9999 {
			return
		}
		enc := eventjson.Record(&rec)
		var again varplane.RevisionRecord
		if err := eventjson.DecodeRecord(enc, &again); err != nil {
			t.Fatalf("re-decoding %s (from %q): %v", enc, b, err)
		}
		if !again.CreatedAt.Equal(rec.CreatedAt) {
			t.Fatalf("createdAt %v became %v", rec.CreatedAt, again.CreatedAt)
		}
		again.CreatedAt = rec.CreatedAt
		if rec.Document == nil {
			rec.Document = json.RawMessage("null") // the record is written with "document":null
		}
		if !reflect.DeepEqual(again, rec) {
			t.Fatalf("round trip of %q:\n got  %+v\n want %+v", b, again, rec)
		}
	})
}

func semantic(doc []byte) string {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return "invalid: " + err.Error()
	}
	b, _ := json.Marshal(v)
	return string(b)
}
