package varplane

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane/canonical"
)

// The audit log is tamper-evident: every event a store commits carries its
// place in its scope's chain (Event.Seq, counting from 1) and a hash that
// covers the event and, through the hash of the event before it, every
// earlier event of the scope:
//
//	Hash(n) = hex(SHA-256( raw(Hash(n-1)) ‖ uint64be(Seq(n)) ‖ C(n) ))
//
// raw(Hash(0)) is 32 zero bytes; C(n) is the RFC 8785 form of the event's
// JSON without its seq, hash and document members (AppendChainContent). The
// document is bound through the revision, its own SHA-256 digest, so a
// revision whose body was reclaimed keeps its place in the chain.
//
// A chain is per scope, not per store, because a scope is the unit every
// store already commits atomically (a head row, a Lua script's slot, the
// file store's committer): linking every event of a shared store into one
// chain would serialise every commit of every replica on one row or one
// key. A subtree deactivation is one event in the parent's chain; the
// cascade entries it synthesises in descendants' histories carry no link of
// their own (the parent's hash covers its cascade list).
//
// An outside system anchors a store by recording its chain heads, or their
// digest (ChainDigest); VerifyChain checks a scope's events against the
// rule and names the first broken or missing link.

// ChainHead is where a scope's chain stands: the Seq and Hash of its last
// chained event (Seq 0: none yet).
type ChainHead struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash,omitempty"`
}

// Next sets ev.Seq and ev.Hash as the event that follows h in its scope's
// chain and returns the chain's new head. ev.Scope must be the chain's scope.
func (h ChainHead) Next(ev *Event) ChainHead {
	ev.Seq = h.Seq + 1
	ev.Hash = ChainHash(h.Hash, ev.Seq, ev)
	return ChainHead{Seq: ev.Seq, Hash: ev.Hash}
}

// ChainHash returns the hash of ev as event seq of its scope's chain after
// the event whose hash is prev ("" for the first event). A prev that is not
// 64 lowercase hex digits (a damaged record) is hashed as it is, so the
// result never matches what a sound chain holds.
func ChainHash(prev string, seq uint64, ev *Event) string {
	var buf [512]byte
	var raw [sha256.Size]byte
	b := buf[:0]
	switch {
	case prev == "":
		b = append(b, raw[:]...)
	case decodeLowerHex(raw[:], prev):
		b = append(b, raw[:]...)
	default:
		b = append(b, prev...)
	}
	b = binary.BigEndian.AppendUint64(b, seq)
	b = AppendChainContent(b, ev)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// decodeLowerHex decodes s into raw when s is exactly 2*len(raw) lowercase
// hex digits, without allocating (replay checks a link per event).
func decodeLowerHex(raw []byte, s string) bool {
	if len(s) != 2*len(raw) {
		return false
	}
	nibble := func(c byte) (byte, bool) {
		switch {
		case c >= '0' && c <= '9':
			return c - '0', true
		case c >= 'a' && c <= 'f':
			return c - 'a' + 10, true
		}
		return 0, false
	}
	for i := range raw {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		raw[i] = hi<<4 | lo
	}
	return true
}

// AppendChainContent appends the bytes of ev that its chain hash covers: the
// RFC 8785 (JCS) form of the event's JSON without its seq, hash and document
// members. Members are written in JCS order (sorted by name; every name is
// ASCII) and omitted where the event's JSON omits them. Any RFC 8785
// implementation given the event's JSON minus those members produces the same
// bytes, so a verifier need not be written in Go.
func AppendChainContent(b []byte, ev *Event) []byte {
	b = append(b, '{')
	sep := false
	str := func(name, v string) {
		if v == "" {
			return
		}
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = canonical.AppendString(b, v)
	}
	num := func(name string, v uint64) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendUint(b, v, 10)
	}
	// Sorted by name: actor, cascade, generation, idempotencyKey, kind,
	// onBehalfOf, previousGeneration, reason, rejectionReason, requestHash,
	// revision, rollbackOf, schemaId, schemaVersion, scope, timestamp,
	// unauthenticated.
	str("actor", ev.Actor)
	if len(ev.Cascade) > 0 {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, `"cascade":[`...)
		for i, c := range ev.Cascade {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"generation":`...)
			b = strconv.AppendUint(b, uint64(c.Generation), 10)
			b = append(b, `,"scope":`...)
			b = canonical.AppendString(b, string(c.Scope))
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if ev.Generation != 0 {
		num("generation", uint64(ev.Generation))
	}
	str("idempotencyKey", ev.IdempotencyKey)
	str("kind", string(ev.Kind))
	str("onBehalfOf", ev.OnBehalfOf)
	if ev.PreviousGeneration != nil {
		num("previousGeneration", uint64(*ev.PreviousGeneration))
	}
	str("reason", ev.Reason)
	str("rejectionReason", ev.RejectionReason)
	str("requestHash", ev.RequestHash)
	str("revision", string(ev.Revision))
	if ev.RollbackOf != 0 {
		num("rollbackOf", uint64(ev.RollbackOf))
	}
	str("schemaId", ev.SchemaID)
	str("schemaVersion", ev.SchemaVersion)
	str("scope", string(ev.Scope))
	// An RFC 3339 timestamp holds no character JCS escapes: appended as it
	// is, without the string Format would allocate.
	if sep {
		b = append(b, ',')
	}
	sep = true
	b = append(b, `"timestamp":"`...)
	b = ev.Timestamp.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if ev.Unauthenticated {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"unauthenticated":true`...)
	}
	return append(b, '}')
}

// ChainError names the first event of a scope's history that breaks its
// chain. It maps to the API code chain-broken.
type ChainError struct {
	Scope Scope
	// Seq is the sequence number the chain expected at the failure.
	Seq uint64
	// Index is the event's position in the history as read (0-based).
	Index int
	// Problem says what is wrong, in words.
	Problem string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("chain of scope %q broken at seq %d (event %d of its history): %s", e.Scope, e.Seq, e.Index+1, e.Problem)
}

// ChainVerdict is what VerifyChain found in a sound history.
type ChainVerdict struct {
	// Head is the chain's last link.
	Head ChainHead
	// Unchained counts the events before the chain's first link: events
	// written before the store kept chains, which the chain does not cover.
	Unchained int
	// Cascades counts the cascade entries skipped (covered by their
	// parent's event, which CheckCascades matches them against).
	Cascades int
}

// VerifyChain checks the history of scope (as Store.History returns it, in
// log order) against the chain rule. Events before the first chained event
// are counted as unchained; after it, every event must carry the next Seq and
// the hash the rule gives, except the cascade entries an ancestor's subtree
// deactivation synthesised (no Seq, reason CascadeReason). It returns the
// first break as a *ChainError.
func VerifyChain(scope Scope, history []Event) (ChainVerdict, error) {
	var v ChainVerdict
	for i := range history {
		ev := &history[i]
		if ev.Scope != scope {
			return v, &ChainError{Scope: scope, Seq: v.Head.Seq + 1, Index: i, Problem: fmt.Sprintf("the event belongs to scope %q", ev.Scope)}
		}
		if ev.Seq == 0 {
			switch {
			case ev.Kind == EventDeactivated && strings.HasPrefix(ev.Reason, cascadePrefix) && ev.Hash == "" && len(ev.Cascade) == 0:
				v.Cascades++
			case v.Head.Seq == 0 && ev.Hash == "":
				v.Unchained++
			default:
				return v, &ChainError{Scope: scope, Seq: v.Head.Seq + 1, Index: i, Problem: "the event carries no link"}
			}
			continue
		}
		if ev.Seq != v.Head.Seq+1 {
			if ev.Seq > v.Head.Seq+1 {
				return v, &ChainError{Scope: scope, Seq: v.Head.Seq + 1, Index: i, Problem: fmt.Sprintf("missing: the next event has seq %d", ev.Seq)}
			}
			return v, &ChainError{Scope: scope, Seq: v.Head.Seq + 1, Index: i, Problem: fmt.Sprintf("seq %d repeats or goes back", ev.Seq)}
		}
		if want := ChainHash(v.Head.Hash, ev.Seq, ev); ev.Hash != want {
			return v, &ChainError{Scope: scope, Seq: ev.Seq, Index: i, Problem: "the hash does not match the event and the link before it (the event or an earlier one was changed)"}
		}
		v.Head = ChainHead{Seq: ev.Seq, Hash: ev.Hash}
	}
	return v, nil
}

const cascadePrefix = "cascade:"

// CheckCascade reports whether entry, a cascade entry in a descendant's
// history, is one that parent (a chained deactivated event of the scope its
// reason names) lists: same descendant, same generation. A verifier of a
// whole store calls it for every entry VerifyChain skipped.
func CheckCascade(entry, parent *Event) bool {
	if parent.Kind != EventDeactivated || entry.Reason != CascadeReason(parent.Scope) {
		return false
	}
	for _, c := range parent.Cascade {
		if c.Scope == entry.Scope && c.Generation == entry.Generation {
			return true
		}
	}
	return false
}

// ChainDigest returns one value that anchors a whole store: "sha256:" and the
// SHA-256 of one line per scope with a chained event, in bytewise order of
// scopes: the scope as an RFC 8785 string, a space, its head's Seq in
// decimal, a space, its head's Hash, and a newline. Scopes whose Seq is 0 are
// left out.
func ChainDigest(heads map[Scope]ChainHead) string {
	scopes := make([]Scope, 0, len(heads))
	for s := range heads {
		scopes = append(scopes, s)
	}
	slices.Sort(scopes)
	d := NewChainDigester()
	for _, s := range scopes {
		d.Add(s, heads[s])
	}
	return d.Sum()
}

// ChainDigester computes ChainDigest from scopes given one at a time in
// bytewise order (as Store.Scopes lists them), without holding them all.
type ChainDigester struct {
	h      hash.Hash
	b      []byte
	last   Scope
	added  bool
	scopes int
	events uint64
}

// NewChainDigester returns an empty ChainDigester.
func NewChainDigester() *ChainDigester { return &ChainDigester{h: sha256.New()} }

// Add adds scope's chain head. Scopes must come in bytewise order, each
// once; a head with Seq 0 is skipped, as ChainDigest skips it. Add panics on
// a scope out of order, which would give a digest nobody else computes.
func (d *ChainDigester) Add(scope Scope, h ChainHead) {
	if d.added && scope <= d.last {
		panic(fmt.Sprintf("varplane: ChainDigester.Add: scope %q after %q", scope, d.last))
	}
	d.last, d.added = scope, true
	if h.Seq == 0 {
		return
	}
	d.scopes++
	d.events += h.Seq
	b := canonical.AppendString(d.b[:0], string(scope))
	b = append(b, ' ')
	b = strconv.AppendUint(b, h.Seq, 10)
	b = append(b, ' ')
	b = append(b, h.Hash...)
	b = append(b, '\n')
	d.h.Write(b)
	d.b = b
}

// Scopes is how many scopes with a chained event were added; Events the
// sum of their Seqs (the chained events they cover).
func (d *ChainDigester) Scopes() int { return d.scopes }

// Events is the number of chained events the added heads cover.
func (d *ChainDigester) Events() uint64 { return d.events }

// Sum returns the digest of what was added ("sha256:" and 64 hex digits).
func (d *ChainDigester) Sum() string {
	return canonical.DigestPrefix + hex.EncodeToString(d.h.Sum(nil))
}
