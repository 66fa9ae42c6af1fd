package varplane

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane/internal/jsontext"
)

// Revision is the content address of a document: "sha256:" followed by 64
// lowercase hex digits of the SHA-256 of its RFC 8785 canonical JSON.
type Revision string

// ParseRevision validates s as a revision digest. It returns a bad-request
// *Error when s is not "sha256:" + 64 lowercase hex digits.
func ParseRevision(s string) (Revision, error) {
	const prefix = "sha256:"
	if len(s) != len(prefix)+64 || !strings.HasPrefix(s, prefix) {
		return "", Errorf(CodeBadRequest, "revision must be %q followed by 64 lowercase hex digits", prefix)
	}
	var bad byte
	for i := len(prefix); i < len(s); i++ {
		bad |= notLowerHex[s[i]] // no branch per byte: replay checks every revision of the log
	}
	if bad != 0 {
		return "", Errorf(CodeBadRequest, "revision must be %q followed by 64 lowercase hex digits", prefix)
	}
	return Revision(s), nil
}

// notLowerHex is 1 for every byte that is not a lowercase hex digit.
var notLowerHex = func() (t [256]byte) {
	for c := range t {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			t[c] = 1
		}
	}
	return t
}()

// Generation counts the activations and deactivations of one scope. It starts
// at 0 (never activated); each activation or deactivation allocates the next
// integer. A generation is never reused.
type Generation uint64

// EventKind names one of the four kinds of event in the audit log.
type EventKind string

// The event kinds, exactly as they appear in the log.
const (
	EventRevisionCreated EventKind = "revision-created"
	EventActivated       EventKind = "activated"
	EventDeactivated     EventKind = "deactivated"
	EventRejected        EventKind = "rejected"
)

// Valid reports whether k is one of the four kinds.
func (k EventKind) Valid() bool {
	switch k {
	case EventRevisionCreated, EventActivated, EventDeactivated, EventRejected:
		return true
	}
	return false
}

// CascadeEntry is one descendant deactivated together with its parent in a
// subtree deactivation, at its own next generation.
type CascadeEntry struct {
	Scope      Scope      `json:"scope"`
	Generation Generation `json:"generation"`
}

// Event is one entry of the append-only audit log. Its JSON form is one line of
// the file store's log; the field names are part of the log format.
//
// Generation and PreviousGeneration are set on activated and deactivated
// events only. Cascade lists, on a deactivated event, every active descendant
// that the same commit deactivated. RequestHash fingerprints the request that
// carried IdempotencyKey so that a reused key with a different request can be
// refused, also after a restart.
type Event struct {
	Kind               EventKind       `json:"kind"`
	Scope              Scope           `json:"scope"`
	Revision           Revision        `json:"revision,omitempty"`
	Document           json.RawMessage `json:"document,omitempty"`
	SchemaID           string          `json:"schemaId,omitempty"`
	SchemaVersion      string          `json:"schemaVersion,omitempty"`
	Generation         Generation      `json:"generation,omitempty"`
	PreviousGeneration *Generation     `json:"previousGeneration,omitempty"`
	Actor              string          `json:"actor,omitempty"`
	OnBehalfOf         string          `json:"onBehalfOf,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	IdempotencyKey     string          `json:"idempotencyKey,omitempty"`
	RequestHash        string          `json:"requestHash,omitempty"`
	RejectionReason    string          `json:"rejectionReason,omitempty"`
	Cascade            []CascadeEntry  `json:"cascade,omitempty"`
	Timestamp          time.Time       `json:"timestamp"`
	// Unauthenticated marks an Actor that the client claimed and nobody
	// authenticated (a server without tokens records the request's actor,
	// as the reference var server does).
	Unauthenticated bool `json:"unauthenticated,omitempty"`
	// RollbackOf marks an activated event that is a rollback (Engine.Rollback,
	// or a reviewed change proposed as one): it names the generation the
	// rollback replaced (the head it undid). Zero, and absent from the JSON,
	// on every other event, so a log written before it existed reads the same
	// and a reader that does not know it skips it. The chain hash covers it.
	RollbackOf Generation `json:"rollbackOf,omitempty"`
	// Seq and Hash place the event in its scope's chain (chain.go): Seq
	// counts the scope's chained events from 1, Hash links the event to
	// the one before it. Both are set by the store in the step that
	// commits the event; zero on events written before chains existed and
	// on the cascade entries a subtree deactivation synthesises in a
	// descendant's history (the parent's event covers those).
	Seq  uint64 `json:"seq,omitempty"`
	Hash string `json:"hash,omitempty"`
}

// GenerationPtr returns a pointer to g, for Event.PreviousGeneration.
func GenerationPtr(g Generation) *Generation { return &g }

// CascadeReason is the reason recorded in a descendant's history when a
// subtree deactivation of parent cleared it.
func CascadeReason(parent Scope) string { return "cascade:" + string(parent) }

// RevisionRecord is a stored revision: an immutable document addressed by its
// digest within one scope.
type RevisionRecord struct {
	Scope         Scope           `json:"scope"`
	Revision      Revision        `json:"revision"`
	Document      json.RawMessage `json:"document"`
	SchemaID      string          `json:"schemaId,omitempty"`
	SchemaVersion string          `json:"schemaVersion,omitempty"`
	Actor         string          `json:"actor,omitempty"`
	CreatedAt     time.Time       `json:"createdAt"`
}

// Head is what a scope serves now. A Head is immutable and shared: the bytes a
// read answers with and the ETag are computed once, when the head is built.
type Head struct {
	Scope         Scope
	Generation    Generation
	Revision      Revision
	SchemaID      string
	SchemaVersion string
	EffectiveAt   time.Time
	Document      json.RawMessage
	Actor         string
	Reason        string

	etag string
	// body is the read body, built by the first ReadBody: a commit does
	// not pay for it (a head may be replaced before anyone reads it, and
	// a lone writer's publish is that much shorter).
	body atomic.Pointer[[]byte]
}

// NewHead builds the head that activation event ev installs for document doc,
// with its ETag; its read body is built by the first read.
func NewHead(ev *Event, rec *RevisionRecord) *Head {
	h := &Head{
		Scope:         ev.Scope,
		Generation:    ev.Generation,
		Revision:      ev.Revision,
		SchemaID:      rec.SchemaID,
		SchemaVersion: rec.SchemaVersion,
		EffectiveAt:   ev.Timestamp.UTC(),
		Document:      rec.Document,
		Actor:         ev.Actor,
		Reason:        ev.Reason,
	}
	h.etag = `"` + string(h.Revision) + `"`
	return h
}

// ETag returns the revision as a quoted strong validator.
func (h *Head) ETag() string { return h.etag }

// Values returns the values object of a read: {"<scope>": document} for a key,
// the document itself for a group.
func (h *Head) Values() json.RawMessage {
	if h.Scope.IsGroup() {
		return h.Document
	}
	return h.appendValues(make([]byte, 0, h.valuesLen()))
}

// appendValues appends the values object of Values to b.
func (h *Head) appendValues(b []byte) []byte {
	if h.Scope.IsGroup() {
		return append(b, h.Document...)
	}
	b = append(b, '{')
	b = jsontext.AppendString(b, string(h.Scope))
	b = append(b, ':')
	b = append(b, h.Document...)
	return append(b, '}')
}

// valuesLen is the length of the values object, a scope needing no escapes
// (every valid scope): the capacity that appendValues fills exactly.
func (h *Head) valuesLen() int {
	if h.Scope.IsGroup() {
		return len(h.Document)
	}
	return len(h.Scope) + len(h.Document) + 5
}

// ReadBody returns the JSON body of a read of this head:
// {"generation","revision","schemaId"?,"effectiveAt","values"}. The slice is
// shared: do not modify it. The first call builds it; readers that race
// to build it all get the one stored first.
func (h *Head) ReadBody() []byte {
	if b := h.body.Load(); b != nil {
		return *b
	}
	b := h.buildBody()
	if h.body.CompareAndSwap(nil, &b) {
		return b
	}
	return *h.body.Load()
}

// buildBody builds the read body in one allocation: the values object is
// written in place rather than built apart and copied.
func (h *Head) buildBody() []byte {
	b := make([]byte, 0, h.valuesLen()+bodyOverhead+len(h.Revision)+len(h.SchemaID))
	b = append(b, `{"generation":`...)
	b = strconv.AppendUint(b, uint64(h.Generation), 10)
	b = append(b, `,"revision":`...)
	b = jsontext.AppendString(b, string(h.Revision))
	if h.SchemaID != "" {
		b = append(b, `,"schemaId":`...)
		b = jsontext.AppendString(b, h.SchemaID)
	}
	b = append(b, `,"effectiveAt":"`...)
	b = h.EffectiveAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","values":`...)
	b = h.appendValues(b)
	return append(b, '}')
}

// bodyOverhead bounds what a read body holds besides its values, revision
// and schema id: the member names, a generation and a timestamp.
const bodyOverhead = 128

// ScopeState is the immutable snapshot of one scope that reads observe: a
// concurrent commit is seen whole or not at all.
type ScopeState struct {
	Scope Scope
	// Generation is the last generation allocated (0: never activated).
	Generation Generation
	// Head is the active head, nil when the scope serves nothing.
	Head *Head
	// LastRejected is the most recent rejected event, nil when none.
	LastRejected *Event
	// Chain is the head of the scope's event chain (chain.go): the link
	// the scope's next event will follow.
	Chain ChainHead
}

// Issue is one validation finding: a stable code, the JSON Pointer of the
// offending location, and a message that names the field, never its value.
type Issue struct {
	Code    string `json:"code"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// IdempotencyRecord is what a store remembers of an idempotency key: the
// fingerprint of the request that used it, the event it appended, and the
// scope's generation right after that event.
type IdempotencyRecord struct {
	Key         string
	RequestHash string
	Event       Event
	Generation  Generation
}

// ScopeChange is one scope whose head a commit changed.
type ScopeChange struct {
	Scope      Scope
	Generation Generation
	// Head is the new head, nil when the scope no longer serves anything.
	Head *Head
}

// Commit describes one accepted activation or deactivation (rollback
// included), delivered after the store is updated. Changes names every scope
// whose head changed, Scope first; a subtree deactivation has one entry per
// affected scope.
type Commit struct {
	Kind    EventKind
	Scope   Scope
	Changes []ScopeChange
}
