package postgres

import (
	"context"
	"slices"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// Watch promises every commit that changes a head, in commit order per
// scope. A replica that reads a head after several commits (it was busy,
// or a notification was lost) would otherwise deliver only the newest; the
// log holds the ones in between, so they are read and delivered first.

// maxGap bounds the commits in between that are delivered one by one; a
// longer gap (a replica that was cut off for long) delivers the newest
// head only.
const maxGap = 1000

// fillGaps reads, for each request whose scope is installed at a
// generation more than one below the snapshot's, the heads of the
// generations in between, and records them on the request. A failed read
// leaves the request as it is (only the newest head is delivered).
func (s *Store) fillGaps(ctx context.Context, reqs []installReq) {
	for i := range reqs {
		r := &reqs[i]
		e := s.entry(r.scope)
		if e == nil || r.snap == nil {
			continue
		}
		from := e.Snap.Load().state.Generation
		to := r.snap.state.Generation
		if to <= from+1 || to-from > maxGap {
			continue
		}
		gap, err := s.gapChanges(ctx, r.scope, from, to)
		if err != nil {
			s.log.Debug("postgres store: the commits in between could not be read; delivering the newest head only", "scope", string(r.scope), "err", err)
			continue
		}
		r.gapFrom, r.gap = from, gap
	}
}

// gapChanges reads the activations and deactivations of scope with a
// generation strictly between from and to, in log order.
func (s *Store) gapChanges(ctx context.Context, scope varplane.Scope, from, to varplane.Generation) ([]varplane.ScopeChange, error) {
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	// Every generation is one event of the scope (an activation or a
	// deactivation), allocated in log order: the range of the
	// (scope, generation) index holds exactly the ones wanted. Each record
	// is read by a subquery on the whole key of revisions: as a join on
	// the event's revision, a plan made without statistics can look the
	// records up by scope alone (see varplane_follow in migration 0005).
	rows, err := s.pool.Query(cctx, `SELECT e.body, CASE WHEN e.kind = 'activated' THEN
	(SELECT r.record FROM revisions r WHERE r.scope = e.scope AND r.revision = e.body->>'revision') END
FROM events e
WHERE e.scope = $1 AND e.generation > $2 AND e.generation < $3 ORDER BY e.generation DESC LIMIT $4`, string(scope), int64(from), int64(to), int64(to-from-1))
	if err != nil {
		return nil, s.readFailure("history", scope, err)
	}
	defer rows.Close()
	var out []varplane.ScopeChange
	for rows.Next() {
		var body, recJS []byte
		if err := rows.Scan(&body, &recJS); err != nil {
			return nil, s.readFailure("history", scope, err)
		}
		var ev varplane.Event
		if err := eventjson.DecodeEvent(body, &ev); err != nil {
			return nil, s.decodeFailure("history entry", scope, err)
		}
		ch := varplane.ScopeChange{Scope: scope, Generation: ev.Generation}
		if ev.Kind == varplane.EventActivated {
			var rec varplane.RevisionRecord
			if recJS == nil || eventjson.DecodeRecord(recJS, &rec) != nil {
				return nil, s.decodeFailure("revision "+string(ev.Revision), scope, errMissingRecord)
			}
			ch.Head = varplane.NewHead(&ev, &rec)
		}
		out = append(out, ch)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readFailure("history", scope, err)
	}
	slices.Reverse(out) // log order
	return out, nil
}
