package varplane

import (
	"context"
	"errors"
	"time"
)

// The optional capabilities of a Store, beside the contract every store
// keeps (store.go; CheckedPublisher and Replayer are there too). Each is
// declared once, here: the packages that use one (the instance cache,
// control, retention, the HTTP API) assert it on the store they are given,
// every store of this module states the ones it has with compile-time
// checks, and store/storetest checks each one a store implements.

// StatusWriter is a store that holds the status heartbeats of the data
// plane's instances (InstanceStatus as JSON): WriteStatus replaces the
// instance's previous value, ListInstance lists the instance among those
// InstanceStatuses reads (an instance lists itself at start and every
// ListInterval).
type StatusWriter interface {
	WriteStatus(ctx context.Context, id string, value []byte) error
	ListInstance(ctx context.Context, id string, now time.Time) error
}

// StatusReader reads every listed instance's latest status value, by
// instance id.
type StatusReader interface {
	InstanceStatuses(ctx context.Context) (map[string][]byte, error)
}

// StatusDeleter is a store that removes an instance's status before it
// expires: DeleteStatus drops id's status (nothing when it has none). The
// control plane calls it to hold an instance identity filing over HTTP to
// MaxStoredNames statuses in the store, by dropping the oldest of its
// statuses that hold no name. It is not part of StatusWriter, which the
// instance cache asks of a store to write its own status, so that a store
// of another module that only writes them keeps its heartbeats.
type StatusDeleter interface {
	DeleteStatus(ctx context.Context, id string) error
}

// ReportWriter is a store that keeps the instances' canary reports
// (CanaryReport as JSON): each write replaces the instance's previous
// report of the window. A window id holding a brace is refused.
type ReportWriter interface {
	WriteCanaryReport(ctx context.Context, window, id string, value []byte) error
}

// ReportReader reads every unexpired report of a window, by the instance id
// it was filed under.
type ReportReader interface {
	CanaryReports(ctx context.Context, window string) (map[string][]byte, error)
}

// HeartbeatStore is the whole of the instances' side of a store: statuses
// and canary reports, written, read and (statuses) deleted. Every store of
// this module that has one of the five has all of them (store/storetest
// checks it).
type HeartbeatStore interface {
	StatusWriter
	StatusReader
	StatusDeleter
	ReportWriter
	ReportReader
}

// Forgetter is a store that holds its own copy of what it read
// (store/redis): the instance cache asks it to drop a scope it drops, so
// that the cache's bound holds for both.
type Forgetter interface {
	Forget(scope Scope)
}

// Snapshotter is a store that reads several scopes as one request's view
// (the instance cache's Store): one state per scope, the same state for a
// scope named twice, and its freshness rule judged over them all (a
// fail-closed scope fails the request when the oldest document it reads
// lags). Engine.Heads uses it.
type Snapshotter interface {
	States(ctx context.Context, scopes []Scope) ([]*ScopeState, error)
}

// HeadSnapshotter is a Snapshotter whose States may answer, for a scope
// under a progressive rollout, the rollout's revision in place of the head
// (the instance cache's Store, when its own instance is selected):
// HeadStates answers the same view with the heads themselves, what an
// evaluation for an entity key starts from (RolloutPicker decides by the
// key, never by the instance). Engine.StoredHeads uses it.
type HeadSnapshotter interface {
	Snapshotter
	HeadStates(ctx context.Context, scopes []Scope) ([]*ScopeState, error)
}

// Holder is a Forgetter whose copy an embedding cache decides (store/redis,
// store/postgres): after Hold(wants), an invalidation for a scope the store
// does not hold and wants does not report reads and installs nothing, so
// that the cache's bound is the only one and the store holds no more than
// the cache does. One cache at a time holds a store: Hold refuses a store
// held already (ErrHeld), and release gives it back (the store then
// follows every scope again).
type Holder interface {
	Forgetter
	Hold(wants func(Scope) bool) (release func(), err error)
}

// ErrHeld is Holder.Hold's refusal of a store that another cache holds:
// each cache needs a store value of its own, or one's choice of what to
// follow, and its Forget, would silence the other's commits.
var ErrHeld = errors.New("the store already follows what another cache holds: give each cache a store value of its own")

// Confirmer is a store that revalidates what it holds on its own
// (store/redis's conditional reads): the instance cache takes the store's
// time of confirmation instead of sending reads of its own.
type Confirmer interface {
	ConfirmedAt(scope Scope) (time.Time, bool)
}

// Reclaimer is a store whose revision bodies a reclamation pass (package
// retention) can reclaim. ReclaimRevisions takes revs of scope out of the
// revision index, then deletes their bodies, never the head's nor what is
// not stored, and returns how many it deleted. What it took out but failed
// to delete stays on the store's to-delete list, which the next call
// retries; its error then has a Failed() int method counting them. A store
// that deletes later (the file store, at its compaction) reports its
// deletions from FinishReclaim.
type Reclaimer interface {
	ReclaimRevisions(ctx context.Context, scope Scope, revs []Revision) (int, error)
}

// ReclaimFinisher is a Reclaimer that completes the deletions of a pass at
// its end (the file store compacts its log). It returns how many bodies it
// deleted; on error they stay on its to-delete list for the next pass, and
// the error counts them as ReclaimRevisions' does.
type ReclaimFinisher interface {
	FinishReclaim(ctx context.Context) (int, error)
}

// RecordLister is a Reclaimer whose revision records can exist without the
// revision-created event of their commit (Redis writes a record in the
// script that commits it, and a script that stops part-way keeps what it
// wrote): RevisionRecords lists, by scope, the revisions whose records it
// holds, and a reclamation pass reclaims those no event names once older
// than its orphan age. The memory, file and PostgreSQL stores write a record
// and its event in one atomic step, have no orphans and do not implement it.
type RecordLister interface {
	RevisionRecords(ctx context.Context) (map[Scope][]Revision, error)
}

// WriteReadiness is a store that can tell whether it accepts writes right
// now, for a server's readiness check: every store of this module has it.
// WriteReady returns nil when a write sent now can commit, and otherwise an
// error that says why not: store-unavailable when the store refuses writes
// for now (the file store after a failed write or a full disk, until it is
// reopened; Redis or PostgreSQL unreachable, read-only (a replica, a
// standby, default_transaction_read_only) or refusing writes (Redis out of
// memory or unable to persist)), store-unsupported for a store opened
// read-only, which never will, and ErrClosed after Close. It changes
// nothing, and costs at most one short request to a shared store's server,
// bounded by the store's command timeout and ctx.
type WriteReadiness interface {
	WriteReady(ctx context.Context) error
}

// WriteReady reports whether s, or the store it wraps, accepts writes now
// (WriteReadiness); a store without the capability is taken to accept them.
func WriteReady(ctx context.Context, s Store) error {
	if r, ok := StoreAs[WriteReadiness](s); ok {
		return r.WriteReady(ctx)
	}
	return nil
}

// ReadOnlyStore is a store that may be opened as a data-plane replica which
// refuses every mutation; ReadOnly reports whether this one was.
type ReadOnlyStore interface {
	ReadOnly() bool
}

// Readier is a store with a readiness rule of its own beyond answering a
// read (a read replica that has not installed its root yet): Ready returns
// nil when the store may serve, and an error saying why not otherwise.
// The HTTP API's /readyz asks it.
type Readier interface {
	Ready(ctx context.Context) error
}

// ReadyDetailer is a store that describes its state for /readyz (its
// settings, what it holds, how far behind it is). ReadyDetails returns a
// value that encodes as a JSON object, shown under the store's Name.
type ReadyDetailer interface {
	ReadyDetails() any
}

// Unwrapper is a store that wraps another one (the instance cache's
// Store); Unwrap returns the store underneath, so that a capability of the
// store of record is found through the wrapper (StoreAs).
type Unwrapper interface {
	Unwrap() Store
}

// StoreAs returns the first of s and the stores it wraps (Unwrapper) that
// implements T, and false when none does.
func StoreAs[T any](s Store) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(Unwrapper)
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}
