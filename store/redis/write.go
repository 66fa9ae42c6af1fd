package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/replica"
)

// errReadOnly is returned by every mutation of a ReadOnly store.
var errReadOnly = replica.ReadOnlyError("redis", "a data-plane instance")

func (s *Store) checkWritable() error {
	return replica.CheckWritable(&s.closed, s.opts.ReadOnly, errReadOnly)
}

// writeFailure reports a mutation that Redis did not acknowledge. The
// scripts are atomic, so nothing of it is visible; a reply lost after Redis
// ran the script is the one ambiguous case, which commitFailure (outcome.go)
// answers outcome-unknown (docs/redis.md).
func (s *Store) writeFailure(scope varplane.Scope, err error) error {
	s.stats.commitErrors.Add(1)
	s.forgetAbsent(scope) // the script may have run: read the scope again
	return varplane.Unavailable(fmt.Errorf("redis store: commit to %q: %w", scope, err))
}

// prepare registers scope's root and claims the event's idempotency key for
// that root, before the commit script runs. Both are harmless when the
// script then fails: an empty root index, and a claim that a later commit
// under another root can take over because no record backs it.
func (s *Store) prepare(ctx context.Context, ev *varplane.Event) error {
	root := string(ev.Scope.Root())
	cmds := rueidis.Commands{s.client.B().Sadd().Key(s.keys.roots()).Member(root).Build()}
	if ev.IdempotencyKey != "" {
		cmds = append(cmds, s.client.B().Set().Key(s.keys.idemClaim(ev.IdempotencyKey)).Value(root).Nx().Get().Build())
	}
	res := s.client.DoMulti(ctx, cmds...)
	if err := res[0].Error(); err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	if ev.IdempotencyKey == "" {
		return nil
	}
	prev, err := res[1].ToString()
	if rueidis.IsRedisNil(err) || (err == nil && prev == root) {
		return nil // claimed now, or already ours
	}
	if err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	// Claimed for another root: a duplicate if that root's slot recorded
	// it, a leftover of a failed commit otherwise.
	n, err := s.client.Do(ctx, s.client.B().Exists().Key(s.keys.idem(varplane.Scope(prev), ev.IdempotencyKey)).Build()).AsInt64()
	if err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	if n > 0 {
		return varplane.ErrDuplicateIdempotencyKey
	}
	moved, err := claimTakeoverScript.Exec(ctx, s.client, []string{s.keys.idemClaim(ev.IdempotencyKey)}, []string{prev, root}).AsInt64()
	if err != nil {
		return s.writeFailure(ev.Scope, err)
	}
	if moved != 1 {
		// Someone else moved it meanwhile: treat the key as taken.
		return varplane.ErrDuplicateIdempotencyKey
	}
	return nil
}

func hasIdem(ev *varplane.Event) string {
	if ev.IdempotencyKey != "" {
		return "1"
	}
	return "0"
}

// commonKeys are KEYS[1..4] of every commit script.
func (s *Store) commonKeys(ev *varplane.Event) []string {
	return []string{
		s.keys.head(ev.Scope),
		s.keys.history(ev.Scope),
		s.keys.index(ev.Scope),
		s.keys.idem(ev.Scope, ev.IdempotencyKey),
	}
}

// Append commits one event in one atomic script; see varplane.Store. It
// returns errReadOnly on a ReadOnly store, a bad-request error for a
// malformed event, ErrRevisionExists, ErrDuplicateIdempotencyKey, a
// revision-conflict error carrying the current generation, a not-found
// error for an activation of a revision the scope does not store, and a
// store-unavailable error when Redis did not acknowledge the commit. On any
// error nothing is written but the harmless root and claim entries of
// prepare.
func (s *Store) Append(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	if err := s.checkWritable(); err != nil {
		return err
	}
	if err := checkScope(ev.Scope); err != nil {
		return err
	}
	if err := varplane.CheckRollbackMark(ev); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	switch ev.Kind {
	case varplane.EventRevisionCreated:
		return s.appendCreate(ctx, ev)
	case varplane.EventActivated:
		return s.appendActivate(ctx, ev, expected)
	case varplane.EventRejected:
		return s.appendReject(ctx, ev)
	case varplane.EventDeactivated:
		return varplane.Errorf(varplane.CodeBadRequest, "a deactivation is committed with AppendSubtreeDeactivation")
	default:
		return varplane.Errorf(varplane.CodeBadRequest, "unknown event kind %q", ev.Kind)
	}
}

// reply splits a script reply into its status word and the rest.
func reply(res rueidis.RedisResult) (string, []rueidis.RedisMessage, error) {
	arr, err := res.ToArray()
	if err != nil {
		return "", nil, err
	}
	if len(arr) == 0 {
		return "", nil, fmt.Errorf("empty script reply")
	}
	st, err := arr[0].ToString()
	if err != nil {
		return "", nil, err
	}
	return st, arr[1:], nil
}

// decimal reads an integer or bulk-string reply as a decimal string.
func decimal(m rueidis.RedisMessage) (string, error) {
	if n, err := m.AsInt64(); err == nil {
		return strconv.FormatInt(n, 10), nil
	}
	return m.ToString()
}

// optString reads a bulk string that may be nil.
func optString(m rueidis.RedisMessage) (string, bool, error) {
	if m.IsNil() {
		return "", false, nil
	}
	v, err := m.ToString()
	return v, err == nil, err
}

// status maps the status words every commit script may answer.
func (s *Store) status(ev *varplane.Event, expected varplane.Generation, st string, rest []rueidis.RedisMessage) error {
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
	case "VANISHED":
		floor := ""
		if len(rest) > 0 {
			floor, _ = decimal(rest[0])
		}
		return s.vanished(ev.Scope, floor)
	case "CONFLICT":
		s.stats.commitConflicts.Add(1)
		cur := varplane.Generation(0)
		if len(rest) > 0 {
			if d, err := decimal(rest[0]); err == nil {
				n, _ := strconv.ParseUint(d, 10, 64)
				cur = varplane.Generation(n)
			}
		}
		return varplane.ConflictError(ev.Scope, expected, cur)
	}
	return s.writeFailure(ev.Scope, fmt.Errorf("unexpected script status %q", st))
}

func (s *Store) appendCreate(ctx context.Context, ev *varplane.Event) error {
	orig := ev
	if _, err := varplane.ParseRevision(string(ev.Revision)); err != nil {
		return err
	}
	doc, err := eventjson.Compacted(ev.Document)
	if len(ev.Document) == 0 || err != nil {
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
	recJSON := eventjson.Record(&rec)
	hev := historyEvent(ev) // the document is in the record (history.go)
	if err := s.prepare(ctx, ev); err != nil {
		return err
	}
	keys := append(s.commonKeys(ev), s.keys.revision(ev.Scope, ev.Revision), s.keys.floor(ev.Scope))
	var link varplane.ChainHead
	st, rest, err := s.chained(ev.Scope, func(head varplane.ChainHead, _ []rueidis.RedisMessage) (string, []rueidis.RedisMessage, error) {
		var evJSON []byte
		evJSON, link = linked(hev, head)
		return reply(createScript.Exec(ctx, s.client, keys, []string{hasIdem(ev), string(recJSON), string(evJSON), string(ev.Scope), chainArg(head), chainArg(link)}))
	})
	if err != nil {
		return s.scriptFailure(ev.Scope, err)
	}
	if err := s.status(ev, 0, st, rest); err != nil {
		return err
	}
	orig.Seq, orig.Hash = link.Seq, link.Hash
	s.installCreated(ctx, ev.Scope, rest, link)
	return nil
}

// installCreated installs the chain head that an own create left on scope
// ({v, g}: the head hash's new version and its generation). The create
// changed nothing else a read sees, so when the installed snapshot is the
// hash's previous version (or the scope had none, and the create made it
// at version 1) the new one is that snapshot with the new head; otherwise
// the head is read back. A scope not installed is left to its first read.
// No invalidation is published: a create changes no head, and other
// replicas take its chain head with their next read of the hash (the
// scope's next invalidation, or a revalidation pass).
func (s *Store) installCreated(ctx context.Context, scope varplane.Scope, rest []rueidis.RedisMessage, l varplane.ChainHead) {
	e := s.entry(scope)
	if e == nil {
		return
	}
	cur := e.Snap.Load()
	var v, g string
	if len(rest) >= 2 {
		v, _ = decimal(rest[0])
		g, _ = decimal(rest[1])
	}
	n, err := strconv.ParseUint(v, 10, 64)
	prev := strconv.FormatUint(n-1, 10)
	if err != nil || cur.err != nil || (cur.v != prev || cur.g != g) && (!cur.absent() || v != "1" || g != "0") {
		s.refreshAfterCommit(ctx, scope)
		return
	}
	st := *cur.state
	st.Chain = l
	snap := &snapshot{state: &st, v: v, g: g, r: cur.r, rec: cur.rec}
	s.installAndDeliver([]installReq{{scope: scope, snap: snap, seq: ownSeq}})
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
	if rec == nil {
		var err error
		if rec, err = s.readRevision(ctx, ev.Scope, ev.Revision); err != nil {
			return err
		}
	}
	if err := s.prepare(ctx, ev); err != nil {
		return err
	}
	g := strconv.FormatUint(uint64(ev.Generation), 10)
	keys := append(s.commonKeys(ev), s.keys.revision(ev.Scope, ev.Revision), s.keys.floor(ev.Scope))
	var link varplane.ChainHead
	st, rest, err := s.chained(ev.Scope, func(head varplane.ChainHead, _ []rueidis.RedisMessage) (string, []rueidis.RedisMessage, error) {
		var evJSON []byte
		evJSON, link = linked(ev, head)
		args := []string{hasIdem(ev), strconv.FormatUint(uint64(expected), 10), string(evJSON), string(ev.Scope), g, string(ev.Revision), s.keys.channel(),
			chainArg(head), chainArg(link)}
		return reply(activateScript.Exec(ctx, s.client, keys, args))
	})
	if err != nil {
		return s.scriptFailure(ev.Scope, err)
	}
	if err := s.status(ev, expected, st, rest); err != nil {
		return err
	}
	ev.Seq, ev.Hash = link.Seq, link.Hash
	snap := &snapshot{state: &varplane.ScopeState{Scope: ev.Scope, Generation: ev.Generation, Head: varplane.NewHead(ev, rec), Chain: link}, g: g, r: string(ev.Revision), rec: rec}
	if err := s.fillOwn(snap, rest); err != nil {
		s.log.Warn("redis store: committed, but the script reply cannot be read; reloading", "scope", string(ev.Scope), "err", err)
		s.refreshAfterCommit(ctx, ev.Scope)
		return nil
	}
	s.installAndDeliver([]installReq{{scope: ev.Scope, snap: snap, seq: ownSeq}})
	return nil
}

// ownSeq marks the snapshot of an own commit: it is exact as of the commit,
// so an installed head with a higher version is newer, never a regression.
const ownSeq = ^uint64(0)

// fillOwn sets the version and last rejection of an own commit's snapshot
// from the script's {v, j} reply.
func (s *Store) fillOwn(snap *snapshot, rest []rueidis.RedisMessage) error {
	if len(rest) < 2 {
		return fmt.Errorf("reply has %d fields", len(rest))
	}
	v, err := decimal(rest[0])
	if err != nil {
		return err
	}
	snap.v = v
	j, ok, err := optString(rest[1])
	if err != nil {
		return err
	}
	if ok {
		var rej varplane.Event
		if err := eventjson.DecodeEvent([]byte(j), &rej); err != nil {
			return s.decodeFailure("last rejection", snap.state.Scope, err)
		}
		snap.state.LastRejected = &rej
	}
	return nil
}

// refreshAfterCommit reloads scopes after an own commit whose reply could
// not be used; a failure leaves them to the next revalidation pass.
func (s *Store) refreshAfterCommit(ctx context.Context, scopes ...varplane.Scope) {
	if err := s.refresh(ctx, scopes...); err != nil {
		for _, sc := range scopes {
			s.forgetAbsent(sc) // committed: an absent entry must not answer for it
		}
		s.log.Warn("redis store: committed, but the new head could not be read back; revalidation will install it",
			"scope", string(scopes[0]), "err", err)
	}
}

func (s *Store) appendReject(ctx context.Context, ev *varplane.Event) error {
	if err := s.prepare(ctx, ev); err != nil {
		return err
	}
	keys := append(s.commonKeys(ev), s.keys.floor(ev.Scope))
	var link varplane.ChainHead
	st, rest, err := s.chained(ev.Scope, func(head varplane.ChainHead, _ []rueidis.RedisMessage) (string, []rueidis.RedisMessage, error) {
		var evJSON []byte
		evJSON, link = linked(ev, head)
		return reply(rejectScript.Exec(ctx, s.client, keys, []string{hasIdem(ev), string(evJSON), string(ev.Scope), s.keys.channel(), chainArg(head), chainArg(link)}))
	})
	if err != nil {
		return s.scriptFailure(ev.Scope, err)
	}
	if err := s.status(ev, 0, st, rest); err != nil {
		return err
	}
	ev.Seq, ev.Hash = link.Seq, link.Hash
	s.refreshAfterCommit(ctx, ev.Scope)
	return nil
}

// AppendSubtreeDeactivation deactivates ev.Scope at generation expected+1
// and every active descendant at its own next generation, in one script that
// chooses the descendants itself; it fills ev.Cascade (sorted by scope). Its
// errors are those of Append.
func (s *Store) AppendSubtreeDeactivation(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	if err := s.checkWritable(); err != nil {
		return err
	}
	if err := checkScope(ev.Scope); err != nil {
		return err
	}
	// The event is encoded without the caller's links, if any; the link
	// goes after the cascade the script writes.
	un := *ev
	un.Seq, un.Hash, un.Cascade = 0, "", nil
	evJSON, tail, err := replica.Deactivation(&un, expected, nil)
	if err != nil {
		return err
	}
	ev.Generation = un.Generation
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	if err := s.prepare(ctx, ev); err != nil {
		return err
	}
	g := strconv.FormatUint(uint64(ev.Generation), 10)
	keys := append(s.commonKeys(ev), s.keys.floor(ev.Scope))
	cascade := s.cascadeGuess(ev.Scope)
	var link varplane.ChainHead
	st, rest, err := s.chained(ev.Scope, func(head varplane.ChainHead, hint []rueidis.RedisMessage) (string, []rueidis.RedisMessage, error) {
		if len(hint) > 0 {
			c, err := hint[0].ToString()
			if err != nil {
				return "", nil, err
			}
			if cascade, err = parseCascade(c); err != nil {
				return "", nil, s.decodeFailure("cascade", ev.Scope, err)
			}
		}
		linkedEv := un
		linkedEv.Cascade = cascade
		link = head.Next(&linkedEv)
		args := []string{
			hasIdem(ev), strconv.FormatUint(uint64(expected), 10), string(evJSON), string(ev.Scope), g,
			s.keys.headBase(ev.Scope), s.keys.historyBase(ev.Scope), s.keys.channel(), string(tail), s.keys.floorBase(ev.Scope),
			chainArg(head), cascadeArg(cascade), chainArg(link), linkSuffix(link),
		}
		return reply(deactivateScript.Exec(ctx, s.client, keys, args))
	})
	if err != nil {
		return s.scriptFailure(ev.Scope, err)
	}
	if err := s.status(ev, expected, st, rest); err != nil {
		return err
	}
	ev.Seq, ev.Hash = link.Seq, link.Hash
	reqs, cascade, err := s.parseDeactivation(ev, g, link, rest)
	if err != nil {
		s.log.Warn("redis store: committed, but the script reply cannot be read; reloading", "scope", string(ev.Scope), "err", err)
		s.refreshAfterCommit(ctx, ev.Scope)
		return nil
	}
	ev.Cascade = cascade
	s.installAndDeliver(reqs)
	return nil
}

// parseDeactivation reads {v, j, k, d1, g1, v1, j1, k1, ...} into the
// snapshots of the deactivated scopes and the cascade; link is the scope's
// new chain head (k).
func (s *Store) parseDeactivation(ev *varplane.Event, g string, link varplane.ChainHead, rest []rueidis.RedisMessage) ([]installReq, []varplane.CascadeEntry, error) {
	main := &snapshot{state: &varplane.ScopeState{Scope: ev.Scope, Generation: ev.Generation, Chain: link}, g: g}
	if err := s.fillOwn(main, rest); err != nil {
		return nil, nil, err
	}
	reqs := []installReq{{scope: ev.Scope, snap: main, seq: ownSeq}}
	var cascade []varplane.CascadeEntry
	if len(rest) < 3 || (len(rest)-3)%5 != 0 {
		return nil, nil, fmt.Errorf("deactivation reply has %d fields", len(rest))
	}
	rest = rest[3:]
	for i := 0; i < len(rest); i += 5 {
		d, err := rest[i].ToString()
		if err != nil {
			return nil, nil, err
		}
		dg, err := decimal(rest[i+1])
		if err != nil {
			return nil, nil, err
		}
		n, err := strconv.ParseUint(dg, 10, 64)
		if err != nil {
			return nil, nil, err
		}
		scope := varplane.Scope(d)
		snap := &snapshot{state: &varplane.ScopeState{Scope: scope, Generation: varplane.Generation(n)}, g: dg}
		if err := s.fillOwn(snap, rest[i+2:i+4]); err != nil {
			return nil, nil, err
		}
		k, _, err := optString(rest[i+4])
		if err != nil {
			return nil, nil, err
		}
		if snap.state.Chain, err = parseChain(k); err != nil {
			return nil, nil, err
		}
		reqs = append(reqs, installReq{scope: scope, snap: snap, seq: ownSeq})
		cascade = append(cascade, varplane.CascadeEntry{Scope: scope, Generation: varplane.Generation(n)})
	}
	return reqs, cascade, nil
}
