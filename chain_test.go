package varplane_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"pgregory.net/rapid"

	"github.com/varplane/varplane"
)

// chainEvent draws an event with every member the chain covers, each
// sometimes empty, with strings that need JCS's escapes.
func chainEvent(t *rapid.T) varplane.Event {
	str := rapid.OneOf(rapid.Just(""), rapid.String(), rapid.StringMatching(`[a-z.\-\x00-\x1f"\\\x{2028}é日]{1,12}`))
	ev := varplane.Event{
		Kind:            rapid.SampledFrom([]varplane.EventKind{varplane.EventRevisionCreated, varplane.EventActivated, varplane.EventDeactivated, varplane.EventRejected}).Draw(t, "kind"),
		Scope:           varplane.Scope(rapid.StringMatching(`[a-z]{1,4}(\.[a-zé]{1,4}){0,2}`).Draw(t, "scope")),
		Revision:        varplane.Revision(str.Draw(t, "revision")),
		Document:        json.RawMessage(`{"x":1}`),
		SchemaID:        str.Draw(t, "schemaId"),
		SchemaVersion:   str.Draw(t, "schemaVersion"),
		Generation:      varplane.Generation(rapid.Uint64Range(0, 1<<53).Draw(t, "generation")),
		Actor:           str.Draw(t, "actor"),
		OnBehalfOf:      str.Draw(t, "onBehalfOf"),
		Reason:          str.Draw(t, "reason"),
		IdempotencyKey:  str.Draw(t, "key"),
		RequestHash:     str.Draw(t, "hash"),
		RejectionReason: str.Draw(t, "rejection"),
		Timestamp:       time.Unix(rapid.Int64Range(0, 1<<33).Draw(t, "sec"), rapid.Int64Range(0, 999999999).Draw(t, "nsec")).UTC(),
		Unauthenticated: rapid.Bool().Draw(t, "unauth"),
		RollbackOf:      varplane.Generation(rapid.Uint64Range(0, 1<<53).Draw(t, "rollbackOf")),
		Seq:             rapid.Uint64().Draw(t, "seq"),
		Hash:            str.Draw(t, "ownHash"),
	}
	if rapid.Bool().Draw(t, "hasPrev") {
		ev.PreviousGeneration = varplane.GenerationPtr(varplane.Generation(rapid.Uint64Range(0, 1<<53).Draw(t, "prev")))
	}
	for i := rapid.IntRange(0, 3).Draw(t, "cascade"); i > 0; i-- {
		ev.Cascade = append(ev.Cascade, varplane.CascadeEntry{Scope: varplane.Scope(str.Draw(t, "cscope")), Generation: varplane.Generation(rapid.Uint64Range(0, 1<<53).Draw(t, "cgen"))})
	}
	return ev
}

// TestChainContentIsJCS: the bytes the chain hashes are what any RFC 8785
// implementation makes of the event's JSON without seq, hash and document,
// so that a verifier need not be written in Go.
func TestChainContentIsJCS(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ev := chainEvent(t)
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "seq")
		delete(m, "hash")
		delete(m, "document")
		stripped, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jcs.Transform(stripped)
		if err != nil {
			t.Fatal(err)
		}
		if got := varplane.AppendChainContent(nil, &ev); string(got) != string(want) {
			t.Fatalf("chain content\n got %s\nwant %s", got, want)
		}
	})
}

// TestChainVector pins the hash of one event, so that verifiers in other
// languages can test against it (docs/architecture.md quotes it).
func TestChainVector(t *testing.T) {
	ev := varplane.Event{
		Kind:       varplane.EventActivated,
		Scope:      "agentic.lanes.vinci",
		Revision:   "sha256:f9e3c89f711e1c3e41a48cb0208eedad2ef77a1d65b2ceeeb50a25204ff699ba",
		Generation: 1, PreviousGeneration: varplane.GenerationPtr(0),
		Actor: "ops", Reason: "enable vinci",
		Timestamp: time.Date(2026, 12, 1, 20, 20, 49, 408819140, time.UTC),
	}
	if got, want := string(varplane.AppendChainContent(nil, &ev)), `{"actor":"ops","generation":1,"kind":"activated","previousGeneration":0,"reason":"enable vinci","revision":"sha256:f9e3c89f711e1c3e41a48cb0208eedad2ef77a1d65b2ceeeb50a25204ff699ba","scope":"agentic.lanes.vinci","timestamp":"2026-12-01T20:20:49.40881914Z"}`; got != want {
		t.Fatalf("content\n got %s\nwant %s", got, want)
	}
	head := varplane.ChainHead{}.Next(&ev)
	// The same value comes from any SHA-256: 32 zero bytes, the 8 bytes of
	// seq 1 big-endian, and the content above.
	if got, want := head.Hash, "ea201892fe8bdf7d73043aa37ed7632c2001d71aa64b7ba2ee859edf95c456af"; got != want {
		t.Fatalf("hash %s, want %s", got, want)
	}
	if head.Seq != 1 || ev.Seq != 1 || ev.Hash != head.Hash {
		t.Fatalf("Next set seq %d hash %q, returned %+v", ev.Seq, ev.Hash, head)
	}
}

// TestChainVectorRollback pins the content and hash of a rollback's
// activation, whose rollbackOf member the chain covers (in RFC 8785 order,
// between revision and schemaId), for verifiers in other languages.
func TestChainVectorRollback(t *testing.T) {
	ev := varplane.Event{
		Kind:       varplane.EventActivated,
		Scope:      "agentic.lanes.vinci",
		Revision:   "sha256:f9e3c89f711e1c3e41a48cb0208eedad2ef77a1d65b2ceeeb50a25204ff699ba",
		Generation: 3, PreviousGeneration: varplane.GenerationPtr(2), RollbackOf: 2,
		Actor: "ops", Reason: "bad deploy",
		Timestamp: time.Date(2026, 12, 1, 20, 20, 49, 408819140, time.UTC),
	}
	if got, want := string(varplane.AppendChainContent(nil, &ev)), `{"actor":"ops","generation":3,"kind":"activated","previousGeneration":2,"reason":"bad deploy","revision":"sha256:f9e3c89f711e1c3e41a48cb0208eedad2ef77a1d65b2ceeeb50a25204ff699ba","rollbackOf":2,"scope":"agentic.lanes.vinci","timestamp":"2026-12-01T20:20:49.40881914Z"}`; got != want {
		t.Fatalf("content\n got %s\nwant %s", got, want)
	}
	// Any SHA-256 of 32 zero bytes, seq 1 as 8 bytes big-endian and the
	// content above gives it.
	if got, want := varplane.ChainHash("", 1, &ev), "de5d2b4b50ad42ec43097a27fa147dbdbaab293c0520b14bc2366d885e14d04e"; got != want {
		t.Fatalf("hash %s, want %s", got, want)
	}
}

func chained(scope varplane.Scope, n int) []varplane.Event {
	var h varplane.ChainHead
	out := make([]varplane.Event, n)
	for i := range out {
		out[i] = varplane.Event{Kind: varplane.EventRejected, Scope: scope, Reason: "r" + strings.Repeat("x", i), Timestamp: time.Unix(int64(i), 0).UTC()}
		h = h.Next(&out[i])
	}
	return out
}

func TestVerifyChain(t *testing.T) {
	const scope = varplane.Scope("a.b")
	cascade := varplane.Event{Kind: varplane.EventDeactivated, Scope: scope, Generation: 4, Reason: varplane.CascadeReason("a"), Timestamp: time.Unix(9, 0).UTC()}
	legacy := varplane.Event{Kind: varplane.EventRejected, Scope: scope, Timestamp: time.Unix(1, 0).UTC()}
	for _, tc := range []struct {
		name      string
		history   func() []varplane.Event
		wantSeq   uint64 // the Seq a ChainError names; 0: sound
		wantHead  uint64
		unchained int
		cascades  int
	}{
		{name: "empty", history: func() []varplane.Event { return nil }},
		{name: "sound", history: func() []varplane.Event { return chained(scope, 5) }, wantHead: 5},
		{name: "legacy prefix", history: func() []varplane.Event {
			return append([]varplane.Event{legacy, legacy}, chained(scope, 3)...)
		}, wantHead: 3, unchained: 2},
		{name: "cascade entry skipped", history: func() []varplane.Event {
			h := chained(scope, 3)
			return append(h[:2:2], cascade, h[2])
		}, wantHead: 3, cascades: 1},
		{name: "changed member", history: func() []varplane.Event {
			h := chained(scope, 4)
			h[1].Reason = "changed"
			return h
		}, wantSeq: 2},
		{name: "changed document is not covered", history: func() []varplane.Event {
			h := chained(scope, 2)
			h[0].Document = json.RawMessage(`{"other":true}`)
			return h
		}, wantHead: 2},
		{name: "deleted middle event", history: func() []varplane.Event {
			h := chained(scope, 4)
			return append(h[:1:1], h[2:]...)
		}, wantSeq: 2},
		{name: "swapped events", history: func() []varplane.Event {
			h := chained(scope, 4)
			h[1], h[2] = h[2], h[1]
			return h
		}, wantSeq: 2},
		{name: "repeated event", history: func() []varplane.Event {
			h := chained(scope, 3)
			return append(h, h[2])
		}, wantSeq: 4},
		{name: "unlinked event after the chain began", history: func() []varplane.Event {
			return append(chained(scope, 2), legacy)
		}, wantSeq: 3},
		{name: "rewritten link", history: func() []varplane.Event {
			h := chained(scope, 3)
			h[1].Hash = h[2].Hash
			return h
		}, wantSeq: 2},
		{name: "event of another scope", history: func() []varplane.Event {
			return append(chained(scope, 1), chained("a.c", 2)[1])
		}, wantSeq: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := varplane.VerifyChain(scope, tc.history())
			if tc.wantSeq != 0 {
				var ce *varplane.ChainError
				if !errors.As(err, &ce) {
					t.Fatalf("VerifyChain = %+v, %v; want a ChainError at seq %d", v, err, tc.wantSeq)
				}
				if ce.Seq != tc.wantSeq || ce.Scope != scope {
					t.Fatalf("ChainError at %q seq %d (%v); want seq %d", ce.Scope, ce.Seq, ce, tc.wantSeq)
				}
				return
			}
			if err != nil {
				t.Fatalf("VerifyChain: %v", err)
			}
			if v.Head.Seq != tc.wantHead || v.Unchained != tc.unchained || v.Cascades != tc.cascades {
				t.Fatalf("verdict %+v; want head %d, unchained %d, cascades %d", v, tc.wantHead, tc.unchained, tc.cascades)
			}
		})
	}
}

func TestCheckCascade(t *testing.T) {
	parent := varplane.Event{Kind: varplane.EventDeactivated, Scope: "a", Cascade: []varplane.CascadeEntry{{Scope: "a.b", Generation: 4}}}
	entry := varplane.Event{Kind: varplane.EventDeactivated, Scope: "a.b", Generation: 4, Reason: varplane.CascadeReason("a")}
	if !varplane.CheckCascade(&entry, &parent) {
		t.Fatal("a listed entry was refused")
	}
	for _, bad := range []varplane.Event{
		{Kind: varplane.EventDeactivated, Scope: "a.b", Generation: 5, Reason: varplane.CascadeReason("a")},
		{Kind: varplane.EventDeactivated, Scope: "a.c", Generation: 4, Reason: varplane.CascadeReason("a")},
		{Kind: varplane.EventDeactivated, Scope: "a.b", Generation: 4, Reason: varplane.CascadeReason("x")},
	} {
		if varplane.CheckCascade(&bad, &parent) {
			t.Fatalf("entry %+v was accepted", bad)
		}
	}
}

func TestChainDigest(t *testing.T) {
	heads := map[varplane.Scope]varplane.ChainHead{"b": {Seq: 2, Hash: strings.Repeat("b", 64)}, "a": {Seq: 1, Hash: strings.Repeat("a", 64)}}
	d := varplane.ChainDigest(heads)
	if !strings.HasPrefix(d, "sha256:") || len(d) != 71 {
		t.Fatalf("digest %q", d)
	}
	heads["c"] = varplane.ChainHead{}
	if got := varplane.ChainDigest(heads); got != d {
		t.Fatal("a scope without a chained event changed the digest")
	}
	heads["b"] = varplane.ChainHead{Seq: 3, Hash: strings.Repeat("c", 64)}
	if got := varplane.ChainDigest(heads); got == d {
		t.Fatal("a moved head left the digest as it was")
	}
}

// TestChainDigester: scopes added one at a time in order give ChainDigest's
// value; one out of order is refused.
func TestChainDigester(t *testing.T) {
	heads := map[varplane.Scope]varplane.ChainHead{"a": {Seq: 1, Hash: strings.Repeat("a", 64)}, "a.b": {}, "b": {Seq: 4, Hash: strings.Repeat("b", 64)}}
	d := varplane.NewChainDigester()
	for _, s := range []varplane.Scope{"a", "a.b", "b"} {
		d.Add(s, heads[s])
	}
	if got, want := d.Sum(), varplane.ChainDigest(heads); got != want {
		t.Fatalf("digester %s, ChainDigest %s", got, want)
	}
	if d.Scopes() != 2 || d.Events() != 5 {
		t.Fatalf("scopes %d events %d, want 2 and 5", d.Scopes(), d.Events())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a scope out of order was added")
		}
	}()
	d.Add("a.c", varplane.ChainHead{})
}
