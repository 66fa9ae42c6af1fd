package redis

import (
	"encoding/base64"
	"strings"

	"github.com/varplane/varplane"
)

// keys builds every Redis key and channel name of one store under its prefix.
//
// Every key that a script touches for a scope carries the hash tag of the
// scope's root segment, so a whole subtree (a, a.b, a.b.c) lives in one Redis
// Cluster slot and one script can change all of it. The tag is the base64url
// (unpadded) form of the root segment: a scope may contain '{' and '}', which
// would otherwise end or start the tag early and scatter a subtree across
// slots; base64url has neither character and cannot be empty for a valid
// scope.
//
// Keys that are not tied to one root (the list of roots, the global claim of
// an idempotency key) carry no tag; no script touches them.
type keys struct {
	prefix string // e.g. "varplane"; validated to contain no '{' or '}'
}

// tag returns the hash tag of scope's root segment, braces included.
func (k keys) tag(scope varplane.Scope) string {
	return "{" + base64.RawURLEncoding.EncodeToString([]byte(scope.Root())) + "}"
}

// slotBase returns "<prefix>:{<tag>}:" for scope: the start of every key in
// the scope's slot.
func (k keys) slotBase(scope varplane.Scope) string {
	return k.prefix + ":" + k.tag(scope) + ":"
}

// head is the head hash of scope: fields v (version, bumped by every write of
// the hash), g (generation), r (revision, "" without a head), e (the event
// that activated the head), j (the last rejected event) and c ("<v> <g> <r>",
// what the conditional read of revalidation compares in one step).
func (k keys) head(scope varplane.Scope) string { return k.slotBase(scope) + "head:" + string(scope) }

// headBase is head(scope) without the scope: scripts append a descendant's
// name to it, which stays in the same slot because the tag comes first.
func (k keys) headBase(scope varplane.Scope) string { return k.slotBase(scope) + "head:" }

// revision is the revision record of (scope, rev): the full document. The
// revision has a fixed length, so "<scope>:<revision>" is unambiguous even for
// a scope that contains ':'.
func (k keys) revision(scope varplane.Scope, rev varplane.Revision) string {
	return k.slotBase(scope) + "rev:" + string(scope) + ":" + string(rev)
}

// history is the list of event JSON of scope, oldest first.
func (k keys) history(scope varplane.Scope) string {
	return k.slotBase(scope) + "hist:" + string(scope)
}

// historyBase is history(scope) without the scope, for descendants.
func (k keys) historyBase(scope varplane.Scope) string { return k.slotBase(scope) + "hist:" }

// floor is the generation floor of scope: the highest generation any script
// has allocated to it, as a decimal string. It is written in the same step
// as the head and never deleted, so a head that disappears (a DEL, a
// FLUSHDB of one key, a hand-written SET) is told apart from a scope that
// never had one, and no generation is handed out twice.
func (k keys) floor(scope varplane.Scope) string { return k.slotBase(scope) + "gen:" + string(scope) }

// floorBase is floor(scope) without the scope, for descendants.
func (k keys) floorBase(scope varplane.Scope) string { return k.slotBase(scope) + "gen:" }

// index is the sorted set (all scores 0, so ordered bytewise) of every scope
// under scope's root that has appeared in the log; a subtree deactivation
// enumerates descendants from it with ZRANGEBYLEX.
func (k keys) index(scope varplane.Scope) string { return k.slotBase(scope) + "scopes" }

// idem is the idempotency record of key, kept in the slot of the scope it
// committed so that the commit script can refuse a duplicate atomically.
func (k keys) idem(scope varplane.Scope, key string) string {
	return k.slotBase(scope) + "idem:" + key
}

// roots is the set of root segments that have (or had) a scope; Scopes reads
// it to find the per-root indexes. It is written before a commit script, so it
// may name a root whose commit failed (its index is then empty).
func (k keys) roots() string { return k.prefix + ":roots" }

// idemClaim maps an idempotency key to the root whose slot holds its record,
// so that Idempotency(key) can find it and a key reused under another root is
// detected.
func (k keys) idemClaim(key string) string { return k.prefix + ":idem:" + key }

// channel is the invalidation channel of the store.
func (k keys) channel() string { return k.prefix + ":inv" }

// validPrefix reports whether p can be a key prefix: non-empty, no hash-tag
// braces (they would change the slot of every key), no whitespace.
func validPrefix(p string) bool {
	return p != "" && !strings.ContainsAny(p, "{} \t\r\n")
}
