// Package memory is the ephemeral varplane.Store: the fold of the event log
// kept in process memory only, empty on every start. It suits tests and
// embedded authorities whose consumers fall back to static values.
//
// Concurrency contract: every method is safe for concurrent use. Reads
// (State, Revision, History, Idempotency, Scopes) never wait for a commit;
// State takes no lock and does not allocate for a scope that exists.
// Commits are serialized by one mutex around validation and folding; Watch
// callbacks run synchronously on the committing goroutine, in commit order,
// while that mutex is held, so they must not block nor commit to the same
// store. The memory store does not implement varplane.Replayer: it keeps no
// durable log to replay from, so an engine answers replay with
// store-unsupported. Leases, and the instances' status heartbeats and canary
// reports (logstate.Beats), live in the same process memory.
package memory

import (
	"context"
	"slices"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

// Store is the in-memory store. The zero value is not usable: call New.
type Store struct {
	logstate.Reads  // State, Revision, History, Idempotency, Scopes
	logstate.Leases // AcquireLease, RenewLease, ReleaseLease: in this process
	logstate.Beats  // instance statuses and canary reports: in this process

	st *logstate.State

	mu sync.Mutex // serializes commits
	tx *logstate.Tx

	watchers logstate.Watchers
}

// New returns an empty memory store.
func New() *Store {
	st := logstate.New()
	s := &Store{st: st, tx: st.Begin()}
	s.Init(st)
	s.InitLeases(&s.Reads, nil)
	s.InitBeats(&s.Reads, nil)
	return s
}

// Name returns "memory".
func (s *Store) Name() string { return "memory" }

// Append commits ev with the checks of varplane.Store.Append. The stored
// event is a normalised copy (UTC timestamp, compacted document, generation
// fields filled in from expected when unset) linked into its scope's chain;
// of ev, only Seq and Hash are set, to the stored event's link. It returns
// ErrClosed after Close and the context's error if ctx is already done.
func (s *Store) Append(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	_, err := s.commit(ctx, ev, expected, false)
	return err
}

// AppendSubtreeDeactivation commits the deactivation of ev.Scope and of every
// active descendant, all at once, as one event of ev.Scope's chain, and sets
// ev.Cascade to the descendants it deactivated and ev.Seq, ev.Hash to its
// link. Errors as Append.
func (s *Store) AppendSubtreeDeactivation(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	stored, err := s.commit(ctx, ev, expected, true)
	if err == nil {
		ev.Cascade = slices.Clone(stored.Cascade)
	}
	return err
}

// AppendPublish commits created (unless its revision is already stored)
// and its activation at expected+1 together, all or nothing, and reports
// whether the revision was created. It sets the Seq and Hash of each event
// to its link (created's to zero when it was not appended). Errors as
// Append.
func (s *Store) AppendPublish(ctx context.Context, created, activated *varplane.Event, expected varplane.Generation) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.IsShut() {
		return false, varplane.ErrClosed
	}
	c, a, err := s.tx.AppendPublish(created, activated, expected)
	if err != nil {
		s.tx.Discard()
		return false, err
	}
	s.watchers.Notify(s.tx.Commit())
	created.Seq, created.Hash = 0, ""
	if c != nil {
		created.Seq, created.Hash = c.Seq, c.Hash
	}
	activated.Seq, activated.Hash = a.Seq, a.Hash
	return c != nil, nil
}

func (s *Store) commit(ctx context.Context, ev *varplane.Event, expected varplane.Generation, subtree bool) (*varplane.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.IsShut() {
		return nil, varplane.ErrClosed
	}
	var stored *varplane.Event
	var err error
	if subtree {
		stored, err = s.tx.AppendSubtree(ev, expected)
	} else {
		stored, err = s.tx.Append(ev, expected)
	}
	if err != nil {
		s.tx.Discard()
		return nil, err
	}
	s.watchers.Notify(s.tx.Commit())
	ev.Seq, ev.Hash = stored.Seq, stored.Hash
	return stored, nil
}

// Watch registers fn for every commit that changes a head, called after the
// snapshot is installed, in commit order, on the committing goroutine.
func (s *Store) Watch(fn func(varplane.Commit)) (cancel func()) {
	return s.watchers.Add(fn)
}

// Close releases the store; later calls return ErrClosed. Closing twice is
// harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Shut()
	return nil
}
