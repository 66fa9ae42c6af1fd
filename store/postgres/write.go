package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/logstate"
	"github.com/varplane/varplane/internal/replica"
)

// errReadOnly is returned by every mutation of a ReadOnly store.
var errReadOnly = replica.ReadOnlyError("postgres", "a data-plane replica")

func (s *Store) checkWritable() error {
	return replica.CheckWritable(&s.closed, s.opts.ReadOnly, errReadOnly)
}

// writeFailure maps a failed commit function call. A concurrent commit
// that recorded the same idempotency key first trips the primary key of
// idempotency: that is a duplicate, and the transaction rolled back. A
// failure after which the database certainly did not commit
// (statementNotRun, outcome.go) is store-unavailable; any other, such as a
// reply lost after the statement was sent, is outcome-unknown.
func (s *Store) writeFailure(scope varplane.Scope, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "idempotency_pkey" {
		return varplane.ErrDuplicateIdempotencyKey
	}
	s.stats.commitErrors.Add(1)
	// The commit may have happened (a reply lost with the connection): an
	// absent entry must not answer for scope until the server is asked.
	s.mu.Lock()
	s.entries.ForgetAbsent(scope)
	s.mu.Unlock()
	if !statementNotRun(err) {
		return varplane.OutcomeUnknown(fmt.Errorf("postgres store: commit to %q: %w", scope, err))
	}
	return varplane.Unavailable(fmt.Errorf("postgres store: commit to %q: %w", scope, err))
}

// retryable reports a serialization failure or a deadlock the server broke:
// the transaction rolled back and may simply be run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

func nullable(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// status maps the refusals every commit function may answer.
func (s *Store) status(ev *varplane.Event, expected varplane.Generation, st string, cur int64) error {
	switch st {
	case "OK":
		s.stats.commits.Add(1)
		return nil
	case "DUP":
		return varplane.ErrDuplicateIdempotencyKey
	case "EXISTS":
		return varplane.ErrRevisionExists
	case "NOREV":
		return varplane.Errorf(varplane.CodeNotFound, "revision %s is not stored in scope %q", ev.Revision, ev.Scope)
	case "CONFLICT":
		s.stats.commitConflicts.Add(1)
		return varplane.ConflictError(ev.Scope, expected, varplane.Generation(cur))
	}
	return s.writeFailure(ev.Scope, fmt.Errorf("unexpected commit status %q", st))
}

// Append commits one event in one transaction; see varplane.Store. It
// returns errReadOnly on a ReadOnly store, a bad-request error for a
// malformed event, ErrRevisionExists, ErrDuplicateIdempotencyKey, a
// revision-conflict error carrying the current generation, a not-found
// error for an activation of a revision the scope does not store, and a
// store-unavailable error when the database did not commit. On any error
// nothing is written.
func (s *Store) Append(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	if err := s.checkWritable(); err != nil {
		return err
	}
	if err := checkScope(ev.Scope); err != nil {
		return err
	}
	switch ev.Kind {
	case varplane.EventDeactivated:
		return varplane.Errorf(varplane.CodeBadRequest, "a deactivation is committed with AppendSubtreeDeactivation")
	case varplane.EventRevisionCreated, varplane.EventActivated, varplane.EventRejected:
	default:
		return varplane.Errorf(varplane.CodeBadRequest, "unknown event kind %q", ev.Kind)
	}
	if err := logstate.WellFormed(ev); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	switch ev.Kind {
	case varplane.EventRevisionCreated:
		return s.appendCreate(ctx, ev)
	case varplane.EventActivated:
		return s.appendActivate(ctx, ev, expected)
	default:
		return s.appendReject(ctx, ev)
	}
}

func (s *Store) appendCreate(ctx context.Context, ev *varplane.Event) error {
	orig := ev
	ev = unlinked(ev)
	doc, err := eventjson.Compacted(ev.Document)
	if err != nil {
		return varplane.Errorf(varplane.CodeBadRequest, "a revision-created event needs a JSON document")
	}
	if len(doc) != len(ev.Document) {
		cp := *ev
		cp.Document = doc
		ev = &cp
	}
	rec := varplane.RevisionRecord{
		Scope: ev.Scope, Revision: ev.Revision, Document: ev.Document,
		SchemaID: ev.SchemaID, SchemaVersion: ev.SchemaVersion, Actor: ev.Actor, CreatedAt: ev.Timestamp,
	}
	recJSON, evJSON := eventjson.Record(&rec), eventjson.Event(ev)
	var (
		st                string
		cur, version, seq *int64
		hash              *string
	)
	err = s.call(ctx, string(ev.Scope), "SELECT status, cur_generation, new_version, link_seq, link_hash FROM varplane_create($1, $2, $3, $4, $5, $6, $7)",
		[]any{string(ev.Scope), string(ev.Revision), recJSON, unclosed(evJSON), content(ev), nullable(ev.IdempotencyKey), ev.RequestHash},
		&st, &cur, &version, &seq, &hash)
	if err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	if err := s.status(ev, 0, st, 0); err != nil {
		return err
	}
	l := link(seq, hash)
	orig.Seq, orig.Hash = l.Seq, l.Hash
	s.installCreated(ctx, ev.Scope, version, l)
	return nil
}

// installCreated installs the chain head that an own create left on
// scope's row at version. The create changed nothing else a read sees, so
// when the installed snapshot is the row's previous version (or the scope
// had no row, which the create added at version 1) the new one is that
// snapshot with the new head; otherwise the row is read back. A scope not
// installed is left to its first read. No notification is sent: a create
// changes no head, and other replicas take its chain head with their next
// read of the row (the scope's next notified commit, or a revalidation
// pass).
func (s *Store) installCreated(ctx context.Context, scope varplane.Scope, version *int64, l varplane.ChainHead) {
	e := s.entry(scope)
	if e == nil {
		return
	}
	cur := e.Snap.Load()
	if version == nil || (cur.version+1 != *version && (cur.version != noRow || *version != 1)) {
		s.refreshAfterCommit(ctx, scope)
		return
	}
	st := *cur.state
	st.Chain = l
	s.installAndDeliver([]installReq{{scope: scope, snap: &snapshot{state: &st, version: *version, rec: cur.rec}, seq: ownSeq}})
}

func (s *Store) appendActivate(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	if ev.Generation != expected+1 {
		return varplane.Errorf(varplane.CodeBadRequest, "activation generation %d is not expected generation %d + 1", ev.Generation, expected)
	}
	var rec *varplane.RevisionRecord
	if e := s.entry(ev.Scope); e != nil {
		if r := e.Snap.Load().rec; r != nil && r.Revision == ev.Revision {
			rec = r
		}
	}
	orig := ev
	ev = unlinked(ev)
	evJSON := eventjson.Event(ev)
	var (
		st                string
		cur, version, seq *int64
		hash              *string
		rejected, recJSN  []byte
	)
	err := s.call(ctx, string(ev.Scope), "SELECT status, cur_generation, new_version, last_rejected, rev_record, link_seq, link_hash FROM varplane_activate($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		[]any{string(ev.Scope), int64(expected), int64(ev.Generation), string(ev.Revision), unclosed(evJSON), content(ev),
			nullable(ev.IdempotencyKey), ev.RequestHash, rec == nil},
		&st, &cur, &version, &rejected, &recJSN, &seq, &hash)
	if err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	if err := s.status(ev, expected, st, deref(cur)); err != nil {
		return err
	}
	l := link(seq, hash)
	orig.Seq, orig.Hash = l.Seq, l.Hash
	if version != nil {
		// Sent once this replica has installed the commit (deferred), so
		// that its own echo finds the head installed and is skipped.
		defer s.notify(fmt.Sprintf("%s\n%d %d %s", varplane.EventActivated, *version, ev.Generation, ev.Scope))
	}
	snap, err := s.ownSnapshot(ev.Scope, ev.Generation, version, rejected, l)
	if err == nil && rec == nil {
		var r varplane.RevisionRecord
		if err = eventjson.DecodeRecord(recJSN, &r); err == nil {
			rec = &r
		}
	}
	if err != nil {
		s.log.Warn("postgres store: committed, but the reply cannot be read; reloading", "scope", string(ev.Scope), "err", err)
		s.refreshAfterCommit(ctx, ev.Scope)
		return nil
	}
	snap.rec = rec
	snap.state.Head = varplane.NewHead(ev, rec)
	reqs := []installReq{{scope: ev.Scope, snap: snap, seq: ownSeq}}
	s.fillGaps(ctx, reqs) // commits of other replicas this one had not seen yet
	s.installAndDeliver(reqs)
	return nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// ownSnapshot is the snapshot of an own commit, from the function's reply:
// the row's version, generation, last rejection and chain head.
func (s *Store) ownSnapshot(scope varplane.Scope, gen varplane.Generation, version *int64, rejected []byte, chain varplane.ChainHead) (*snapshot, error) {
	if version == nil {
		return nil, errors.New("the reply has no version")
	}
	snap := &snapshot{state: &varplane.ScopeState{Scope: scope, Generation: gen, Chain: chain}, version: *version}
	if rejected != nil {
		var rej varplane.Event
		if err := eventjson.DecodeEvent(rejected, &rej); err != nil {
			return nil, s.decodeFailure("last rejection", scope, err)
		}
		snap.state.LastRejected = &rej
	}
	return snap, nil
}

// refreshAfterCommit reloads scopes after an own commit whose reply could
// not be used; a failure leaves them to the next revalidation pass.
func (s *Store) refreshAfterCommit(ctx context.Context, scopes ...varplane.Scope) {
	if err := s.refresh(ctx, scopes...); err != nil {
		s.log.Warn("postgres store: committed, but the new head could not be read back; revalidation will install it",
			"scope", string(scopes[0]), "err", err)
		s.addPending(scopes...)
	}
}

func (s *Store) appendReject(ctx context.Context, ev *varplane.Event) error {
	orig := ev
	ev = unlinked(ev)
	evJSON := eventjson.Event(ev)
	var (
		st                string
		cur, version, seq *int64
		hash              *string
	)
	err := s.call(ctx, string(ev.Scope), "SELECT status, cur_generation, new_version, link_seq, link_hash FROM varplane_reject($1, $2, $3, $4, $5)",
		[]any{string(ev.Scope), unclosed(evJSON), content(ev), nullable(ev.IdempotencyKey), ev.RequestHash}, &st, &cur, &version, &seq, &hash)
	if err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	if err := s.status(ev, 0, st, 0); err != nil {
		return err
	}
	l := link(seq, hash)
	orig.Seq, orig.Hash = l.Seq, l.Hash
	if version != nil {
		defer s.notify(fmt.Sprintf("%s\n%d %d %s", varplane.EventRejected, *version, deref(cur), ev.Scope)) // after the install, as above
	}
	// The reply does not carry the head, so the scope is read back; the
	// rejection is committed whether or not that read succeeds.
	s.refreshAfterCommit(ctx, ev.Scope)
	return nil
}

// descendantReply is one element of varplane_deactivate's descendants.
type descendantReply struct {
	Scope        varplane.Scope      `json:"scope"`
	Generation   varplane.Generation `json:"generation"`
	Version      int64               `json:"version"`
	LastRejected json.RawMessage     `json:"lastRejected"`
	// The descendant's chain head, which the cascade leaves as it was.
	ChainSeq  uint64 `json:"chainSeq"`
	ChainHash string `json:"chainHash"`
}

// AppendSubtreeDeactivation deactivates ev.Scope at generation expected+1
// and every active descendant at its own next generation, in one
// transaction that chooses the descendants itself; it fills ev.Cascade
// (sorted by scope). Its errors are those of Append.
func (s *Store) AppendSubtreeDeactivation(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	if err := s.checkWritable(); err != nil {
		return err
	}
	if err := checkScope(ev.Scope); err != nil {
		return err
	}
	// The event is encoded without the caller's links, if any: the
	// database appends the one it computes.
	un := *ev
	un.Seq, un.Hash = 0, ""
	evJSON, tail, err := replica.Deactivation(&un, expected, logstate.WellFormed)
	if err != nil {
		return err
	}
	ev.Generation = un.Generation
	un.Cascade = nil
	pre, post := splitContent(&un)
	tail = append(tail, '}')
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	var (
		st                string
		cur, version, seq *int64
		hash              *string
		rejected, descJSN []byte
	)
	// A deactivation runs in a transaction of its own, never in a batch:
	// it locks a whole subtree.
	err = s.single(&commitCall{ctx: ctx, sql: "SELECT status, cur_generation, new_version, last_rejected, descendants, link_seq, link_hash FROM varplane_deactivate($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		args: []any{string(ev.Scope), int64(expected), int64(ev.Generation), string(evJSON), string(tail), pre, post,
			nullable(ev.IdempotencyKey), ev.RequestHash},
		dst: []any{&st, &cur, &version, &rejected, &descJSN, &seq, &hash}})
	if err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	if err := s.status(ev, expected, st, deref(cur)); err != nil {
		return err
	}
	l := link(seq, hash)
	ev.Seq, ev.Hash = l.Seq, l.Hash
	var descs []descendantReply
	snap, err := s.ownSnapshot(ev.Scope, ev.Generation, version, rejected, l)
	if err == nil {
		err = json.Unmarshal(descJSN, &descs)
	}
	reqs := []installReq{{scope: ev.Scope, snap: snap, seq: ownSeq}}
	var cascade []varplane.CascadeEntry
	for _, d := range descs {
		if err != nil {
			break
		}
		var ds *snapshot
		var rj []byte
		if len(d.LastRejected) > 0 && string(d.LastRejected) != "null" {
			rj = d.LastRejected
		}
		ds, err = s.ownSnapshot(d.Scope, d.Generation, &d.Version, rj, varplane.ChainHead{Seq: d.ChainSeq, Hash: d.ChainHash})
		reqs = append(reqs, installReq{scope: d.Scope, snap: ds, seq: ownSeq})
		cascade = append(cascade, varplane.CascadeEntry{Scope: d.Scope, Generation: d.Generation})
	}
	defer s.notify(deactivationPayload(ev, version, descs)) // after the install, as above
	if err != nil {
		s.log.Warn("postgres store: committed, but the reply cannot be read; reloading", "scope", string(ev.Scope), "err", err)
		scopes := []varplane.Scope{ev.Scope}
		for _, d := range descs {
			scopes = append(scopes, d.Scope)
		}
		s.refreshAfterCommit(ctx, scopes...)
		return nil
	}
	ev.Cascade = cascade
	s.fillGaps(ctx, reqs)
	s.installAndDeliver(reqs)
	return nil
}

// maxPayload is the longest notification payload sent; PostgreSQL refuses
// payloads of 8000 bytes or more.
const maxPayload = 7900

// deactivationPayload is the invalidation of a subtree deactivation: the
// parent's line, then one line per descendant, or "*" (revalidate
// everything) when that would not fit.
func deactivationPayload(ev *varplane.Event, version *int64, descs []descendantReply) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%d %d %s", varplane.EventDeactivated, deref(version), ev.Generation, ev.Scope)
	for _, d := range descs {
		fmt.Fprintf(&b, "\n%d %d %s", d.Version, d.Generation, d.Scope)
	}
	if b.Len() > maxPayload || version == nil {
		return string(varplane.EventDeactivated) + "\n*"
	}
	return b.String()
}
