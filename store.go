package varplane

import (
	"context"
	"fmt"
	"time"
)

// Store is the contract between the Engine and a storage adapter. The
// compare-and-set on generations lives here, not in the Engine: a store shared
// by several processes (Redis, PostgreSQL) must check the expected generation
// in the same atomic step that writes the event (a script or a transaction),
// because no in-process lock can see another process's commit.
//
// Reads (State, Revision) are synchronous and serve one immutable per-scope
// snapshot; a store that holds everything in memory answers them without
// locks. Every method is safe for concurrent use.
type Store interface {
	// Name is the store's kind ("memory", "file", "redis", ...), reported as
	// the source of a status.
	Name() string

	// State returns the current snapshot of scope. A scope never written has
	// a zero state (generation 0, no head). A failed read is an error, never
	// an empty state.
	State(ctx context.Context, scope Scope) (*ScopeState, error)

	// Revision returns the stored revision rev of scope, or ErrNotFound.
	Revision(ctx context.Context, scope Scope, rev Revision) (*RevisionRecord, error)

	// History returns every event of scope in log order, including the
	// deactivated entries that subtree deactivations of its ancestors wrote
	// for it (reason CascadeReason(parent)).
	History(ctx context.Context, scope Scope) ([]Event, error)

	// EventHistory returns History's events, in the same order, without
	// reading a revision body: a revision-created event carries its
	// Document only when the store holds it in memory anyway, and callers
	// must not count on it (Revision reads one body). Callers that need
	// kinds, generations, revisions and times (paged history, retention)
	// use it, so that a scope of many large revisions costs them its
	// events' metadata, not its bodies.
	EventHistory(ctx context.Context, scope Scope) ([]Event, error)

	// Idempotency returns what the store recorded for key, or ErrNotFound.
	Idempotency(ctx context.Context, key string) (*IdempotencyRecord, error)

	// Scopes returns every scope that has appeared in the log, sorted.
	Scopes(ctx context.Context) ([]Scope, error)

	// Append commits one event atomically and durably (per the store's
	// promise) before it becomes visible:
	//   - revision-created: stores the revision record; ErrRevisionExists
	//     when (scope, revision) is already stored.
	//   - activated: requires the scope's generation to equal expected and
	//     ev.Generation to be expected+1, and the revision to exist in the
	//     scope (ErrNotFound otherwise); a generation mismatch returns a
	//     conflict error (ConflictError) carrying the current generation.
	//   - rejected: recorded as the scope's last rejection.
	//   - deactivated is refused: use AppendSubtreeDeactivation.
	// An event whose IdempotencyKey is already recorded returns
	// ErrDuplicateIdempotencyKey. On any error nothing is appended.
	Append(ctx context.Context, ev *Event, expected Generation) error

	// AppendSubtreeDeactivation commits a deactivated event for ev.Scope at
	// generation expected+1 together with a deactivation of every active
	// descendant, each at its own next generation, all or nothing. The store
	// chooses the descendants in the same atomic step and records them in
	// ev.Cascade before returning.
	AppendSubtreeDeactivation(ctx context.Context, ev *Event, expected Generation) error

	// AppendPublish commits a revision and its activation as one atomic,
	// durable step (one fsync, one script, one transaction): created, a
	// revision-created event, is stored unless (scope, revision) is already
	// stored, and activated, the activation of that same revision at
	// generation expected+1, makes it the head. It reports whether created
	// was appended (false: the revision was found and only activated). The
	// checks are those of Append for each event, made before either is
	// written; on any error (a conflict carrying the current generation
	// included) nothing is appended, not even the revision. A crash leaves
	// both events or neither.
	//
	// The idempotency key is given on activated (created carries none, or
	// the publish is a bad request). The store records it with the first
	// event the publish appends: with created, at the generation before the
	// activation, when the revision is new; with activated otherwise. So
	// Idempotency(key) tells a replay whether the revision was created.
	AppendPublish(ctx context.Context, created, activated *Event, expected Generation) (bool, error)

	// RollbackTarget returns the revision a rollback of scope guarded by
	// expected re-activates, read from the store of record, never from a
	// snapshot this process holds (which may be behind expected): with to
	// set, the revision of the activation at generation *to; without, the
	// revision of the latest activation before the head as of generation
	// expected (the activation or deactivation of the highest generation
	// not above expected) whose revision differs from that head's. When
	// there is none it returns a conflict if the scope is not at expected
	// (RollbackNotFound) and a not-found error otherwise; a target found is
	// returned without that check: the rollback's own compare-and-set
	// refuses it with a conflict if need be. It reads the history from its end
	// and stops at the answer (an indexed query, bounded pages, or a walk
	// of the history held in memory; RollbackSearch), never the whole
	// history of a scope with a recent target.
	//
	// It is part of the contract, not a capability, because the rollback
	// of every store needs it: a target taken from a replica's snapshot
	// re-activated the wrong revision (issue 33).
	RollbackTarget(ctx context.Context, scope Scope, expected Generation, to *Generation) (Revision, error)

	// Watch registers fn to receive every commit that changes a head, after
	// the store's snapshot is updated, in commit order per scope. It includes
	// commits made through this store value and, for shared stores, those
	// made by other processes. fn runs on the store's goroutine and must not
	// block. The returned function unregisters fn.
	Watch(fn func(Commit)) (cancel func())

	// AcquireLease takes the lease name for holder for d: it succeeds when
	// nobody holds name, when the last holder's lease expired, and when
	// holder already holds it (a holder re-taking its own lease holds it for
	// the full d from now). It returns ErrLeaseHeld, changing nothing, when
	// another holder holds it. Leases coordinate maintenance passes (canary
	// windows, reclamation) among the processes sharing a store; a store
	// shared by several processes must decide in one atomic step (Redis: SET
	// NX PX, then a compare-and-expire script; SQL: one conditional upsert).
	// The holder is an opaque token the caller chooses, unique per process.
	// Name, holder and d are checked with CheckLease.
	AcquireLease(ctx context.Context, name, holder string, d time.Duration) error

	// RenewLease extends holder's lease on name to d from now. It returns
	// ErrLeaseLost, changing nothing, when holder does not hold it (expired,
	// released, or taken by another).
	RenewLease(ctx context.Context, name, holder string, d time.Duration) error

	// ReleaseLease deletes the lease name only while holder holds it
	// (compare-and-delete), so a holder whose lease expired and was taken
	// never releases its successor's. It returns ErrLeaseLost, deleting
	// nothing, when holder does not hold it.
	ReleaseLease(ctx context.Context, name, holder string) error

	// Close releases the store. Later calls return ErrClosed.
	Close() error
}

// CheckedPublisher is a Store whose publish can take a CheckedDocument's
// word for the document: AppendPublishChecked is AppendPublish, with its
// checks, durability and errors, except that when doc holds
// created.Document itself (CheckedDocument.Holds) and was checked no deeper
// than MaxDepthCeiling, the store does not scan the document again (it
// still copies it before keeping it). Any other doc is ignored and the
// document checked as AppendPublish checks it. The Engine uses it when its
// store has it; AppendPublish keeps every check for every other caller.
type CheckedPublisher interface {
	AppendPublishChecked(ctx context.Context, created, activated *Event, expected Generation, doc CheckedDocument) (bool, error)
}

// MaxLeaseName bounds a lease name and a holder token in bytes.
const MaxLeaseName = 256

// CheckLease checks the arguments of AcquireLease and RenewLease: those of
// CheckLeaseHolder, and a duration of at least a millisecond, the
// resolution every store keeps. It returns a bad-request *Error otherwise.
func CheckLease(name, holder string, d time.Duration) error {
	if err := CheckLeaseHolder(name, holder); err != nil {
		return err
	}
	if d < time.Millisecond {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("lease duration %v is shorter than a millisecond", d)}
	}
	return nil
}

// CheckLeaseHolder checks a lease name and a holder token: 1 to
// MaxLeaseName bytes each, without whitespace or control characters (they
// become Redis keys and values, and log fields). It returns a bad-request
// *Error otherwise.
func CheckLeaseHolder(name, holder string) error {
	for _, f := range []struct{ what, v string }{{"lease name", name}, {"lease holder", holder}} {
		if f.v == "" || len(f.v) > MaxLeaseName {
			return Errorf(CodeBadRequest, "%s must be 1 to %d bytes", f.what, MaxLeaseName)
		}
		for i := 0; i < len(f.v); i++ {
			if c := f.v[i]; c <= ' ' || c == 0x7f {
				return Errorf(CodeBadRequest, "%s contains whitespace or a control character at byte %d", f.what, i)
			}
		}
	}
	return nil
}

// Replayer is implemented by persistent stores that can rebuild a scope as it
// was at an earlier generation.
type Replayer interface {
	// Replay returns the state of scope right after generation gen, or
	// ErrNotFound when the scope never reached gen.
	Replay(ctx context.Context, scope Scope, gen Generation) (*ScopeState, error)
}
