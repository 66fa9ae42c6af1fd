// Package eventjson encodes varplane's stored shapes (events and revision
// records) as JSON by hand, for the stores that write them on every commit.
//
// The output is the JSON form encoding/json gives the same values (the same
// field names, order and omissions), without HTML escaping, and decodes to
// the same value with encoding/json. The encoder copies documents as they
// are: every store writes documents that logstate.Prepare has compacted and
// checked, so re-validating them (what encoding/json does to a
// json.RawMessage, at about a third of a publish's server CPU on the
// PostgreSQL store) would only repeat that work.
package eventjson

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
)

// Event returns the JSON form of ev in one allocation. ev.Document must
// be valid, compact JSON (or empty).
func Event(ev *varplane.Event) []byte {
	return AppendEvent(make([]byte, 0, eventSize(ev)), ev)
}

// Record returns the JSON form of rec in one allocation. rec.Document must
// be valid, compact JSON.
func Record(rec *varplane.RevisionRecord) []byte {
	n := len(rec.Document) + len(rec.Scope) + len(rec.Revision) + len(rec.SchemaID) + len(rec.SchemaVersion) + len(rec.Actor) + 128
	return AppendRecord(make([]byte, 0, n), rec)
}

// Compacted returns doc without insignificant whitespace (doc itself when
// it has none, which is what every document logstate.Prepare returns), or
// an error when doc is not valid JSON. A store's write path that takes an
// event without Prepare calls it before it encodes the event, as
// encoding/json would have compacted the document.
func Compacted(doc []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(doc))
	if err := json.Compact(&buf, doc); err != nil {
		return nil, err
	}
	if buf.Len() == len(doc) {
		return doc, nil
	}
	return buf.Bytes(), nil
}

// eventSize is a capacity for ev's JSON that usually needs no growth.
func eventSize(ev *varplane.Event) int {
	n := len(ev.Document) + len(ev.Scope) + len(ev.Revision) + len(ev.SchemaID) + len(ev.SchemaVersion) +
		len(ev.Actor) + len(ev.OnBehalfOf) + len(ev.Reason) + len(ev.IdempotencyKey) + len(ev.RequestHash) +
		len(ev.RejectionReason) + len(ev.Hash) + 360
	for _, c := range ev.Cascade {
		n += len(c.Scope) + 48
	}
	return n
}

// AppendEvent appends the JSON form of ev, without a trailing newline, to
// b. ev.Document must be valid, compact JSON (or empty).
func AppendEvent(b []byte, ev *varplane.Event) []byte {
	b = append(b, `{"kind":`...)
	b = jsontext.AppendString(b, string(ev.Kind))
	b = append(b, `,"scope":`...)
	b = jsontext.AppendString(b, string(ev.Scope))
	b = appendField(b, "revision", string(ev.Revision))
	if len(ev.Document) > 0 {
		b = append(b, `,"document":`...)
		b = append(b, ev.Document...)
	}
	b = appendField(b, "schemaId", ev.SchemaID)
	b = appendField(b, "schemaVersion", ev.SchemaVersion)
	if ev.Generation != 0 {
		b = append(b, `,"generation":`...)
		b = strconv.AppendUint(b, uint64(ev.Generation), 10)
	}
	if ev.PreviousGeneration != nil {
		b = append(b, `,"previousGeneration":`...)
		b = strconv.AppendUint(b, uint64(*ev.PreviousGeneration), 10)
	}
	b = appendField(b, "actor", ev.Actor)
	b = appendField(b, "onBehalfOf", ev.OnBehalfOf)
	b = appendField(b, "reason", ev.Reason)
	b = appendField(b, "idempotencyKey", ev.IdempotencyKey)
	b = appendField(b, "requestHash", ev.RequestHash)
	b = appendField(b, "rejectionReason", ev.RejectionReason)
	if len(ev.Cascade) > 0 {
		b = append(b, `,"cascade":[`...)
		for i, c := range ev.Cascade {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"scope":`...)
			b = jsontext.AppendString(b, string(c.Scope))
			b = append(b, `,"generation":`...)
			b = strconv.AppendUint(b, uint64(c.Generation), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"timestamp":`...)
	b = appendTime(b, ev.Timestamp)
	if ev.Unauthenticated {
		b = append(b, `,"unauthenticated":true`...)
	}
	if ev.RollbackOf != 0 {
		b = append(b, `,"rollbackOf":`...)
		b = strconv.AppendUint(b, uint64(ev.RollbackOf), 10)
	}
	if ev.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, ev.Seq, 10)
	}
	b = appendField(b, "hash", ev.Hash)
	return append(b, '}')
}

// AppendRecord appends the JSON form of rec to b. rec.Document must be
// valid, compact JSON; an empty one is written as null, as encoding/json
// writes a nil json.RawMessage.
func AppendRecord(b []byte, rec *varplane.RevisionRecord) []byte {
	b = append(b, `{"scope":`...)
	b = jsontext.AppendString(b, string(rec.Scope))
	b = append(b, `,"revision":`...)
	b = jsontext.AppendString(b, string(rec.Revision))
	b = append(b, `,"document":`...)
	if len(rec.Document) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, rec.Document...)
	}
	b = appendField(b, "schemaId", rec.SchemaID)
	b = appendField(b, "schemaVersion", rec.SchemaVersion)
	b = appendField(b, "actor", rec.Actor)
	b = append(b, `,"createdAt":`...)
	b = appendTime(b, rec.CreatedAt)
	return append(b, '}')
}

// appendTime appends t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, quoted).
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return jsontext.AppendString(b, v)
}
