package postgres

import (
	"context"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// A replica that follows another's activations could read each notified
// scope's head row, but by the time it reads, the writer may have
// committed again on that scope: the replica then holds a newer head than
// the notification announced, must read the commits in between from the
// log to deliver them in order (fillGaps, one statement per scope), and the
// later notifications find it current. Measured with 64 writers on one
// replica and a follower, those gap reads were a third of the database's
// statement time. Instead, an activation whose scope the follower holds at
// the head right before it is read as exactly that commit: its event, by
// scope and generation, from the log. The head it builds is the one the
// heads row held right after the commit, since the row changed only by it
// (the version is one above the installed one) and the event was made
// against the installed generation. Every other line takes the head-row
// path, as before.

// activationsQuery reads the activations probed, each by its scope and
// generation through the (scope, generation) index, with the records the
// prober does not hold (varplane_follow, in migration 0005, says how and
// why it is a function).
const activationsQuery = "SELECT i, body, record FROM varplane_follow($1, $2, $3)"

// nextProbe is one notified activation the follower can read from the log:
// the line's scope, version and generation, the installed head it follows
// and the entry's install count when the read started.
type nextProbe struct {
	scope   varplane.Scope
	version int64
	gen     varplane.Generation
	cur     *snapshot
	seq     uint64
}

// followActivations reads the notified activations of scopes (lines by
// scope) and installs them, each delivered as its own commit when each is
// set (a merged notification), as one commit otherwise. A line whose scope
// is installed at the head right before it is read from the log; the
// others, and those the log read cannot confirm, are read as heads
// (refreshAs).
func (s *Store) followActivations(ctx context.Context, kind varplane.EventKind, each bool, lines map[varplane.Scope]announced, scopes []varplane.Scope) error {
	if kind != varplane.EventActivated || (!each && len(scopes) > 1) {
		return s.refreshAs(ctx, each, scopes...)
	}
	var next []nextProbe
	var rest []varplane.Scope
	for _, sc := range scopes {
		if p, ok := s.nextOf(sc, lines[sc]); ok {
			next = append(next, p)
		} else {
			rest = append(rest, sc)
		}
	}
	if len(next) > 0 {
		reqs, missed, err := s.readNext(ctx, next)
		if err != nil {
			return err
		}
		rest = append(rest, missed...)
		s.stats.logFollows.Add(uint64(len(reqs)))
		if each {
			for i := range reqs {
				s.installAndDeliver(reqs[i : i+1])
			}
		} else {
			s.installAndDeliver(reqs)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return s.refreshAs(ctx, each, rest...)
}

// announced is a notification line's row version and generation, parsed
// (gen 0 when the line's generation is not a number: no head follows it).
type announced struct {
	version int64
	gen     varplane.Generation
}

// nextOf returns the probe of the line a of scope when the scope is
// installed with a head row exactly one version and one generation below
// the line's.
func (s *Store) nextOf(scope varplane.Scope, a announced) (nextProbe, bool) {
	e := s.entry(scope)
	if e == nil {
		return nextProbe{}, false
	}
	seq := e.Seq.Load()
	cur := e.Snap.Load()
	if cur.version == noRow || cur.version+1 != a.version || cur.state.Generation+1 != a.gen {
		return nextProbe{}, false
	}
	return nextProbe{scope: scope, version: a.version, gen: a.gen, cur: cur, seq: seq}, true
}

// readNext reads the probes' activations in one statement and returns the
// heads they make and the scopes whose event the log did not hold as
// expected (not found, found twice, undecodable, or not made against the
// installed head), which the caller reads as heads.
func (s *Store) readNext(ctx context.Context, probes []nextProbe) ([]installReq, []varplane.Scope, error) {
	scopes := make([]string, len(probes))
	gens := make([]int64, len(probes))
	revs := make([]*string, len(probes))
	for i, p := range probes {
		scopes[i], gens[i] = string(p.scope), int64(p.gen)
		if p.cur.rec != nil {
			r := string(p.cur.rec.Revision)
			revs[i] = &r
		}
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(cctx, activationsQuery, scopes, gens, revs)
	if err != nil {
		return nil, nil, s.readFailure("head", probes[0].scope, err)
	}
	defer rows.Close()
	// snaps[i]: the head probe i's event makes; seen[i]: the rows read for
	// it (more than one: the log is damaged there).
	snaps := make([]*snapshot, len(probes))
	seen := make([]int, len(probes))
	for rows.Next() {
		var (
			i           int64
			body, recJS []byte
		)
		if err := rows.Scan(&i, &body, &recJS); err != nil {
			return nil, nil, s.readFailure("head", probes[0].scope, err)
		}
		if i < 1 || i > int64(len(probes)) {
			continue
		}
		seen[i-1]++
		snaps[i-1] = nextSnapshot(&probes[i-1], body, recJS)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, s.readFailure("head", probes[0].scope, err)
	}
	reqs := make([]installReq, 0, len(probes))
	var missed []varplane.Scope
	for i, p := range probes {
		if seen[i] != 1 || snaps[i] == nil {
			missed = append(missed, p.scope)
			continue
		}
		reqs = append(reqs, installReq{scope: p.scope, snap: snaps[i], seq: p.seq})
	}
	return reqs, missed, nil
}

// nextSnapshot builds the head p's activation event makes, or returns nil
// when the event is not p's commit as announced: another scope or
// generation, not an activation, not made against the installed
// generation, or a record that does not decode.
func nextSnapshot(p *nextProbe, body, recJS []byte) *snapshot {
	var ev varplane.Event
	if eventjson.DecodeEvent(body, &ev) != nil || ev.Kind != varplane.EventActivated || ev.Scope != p.scope ||
		ev.Generation != p.gen || ev.PreviousGeneration == nil || *ev.PreviousGeneration != p.cur.state.Generation {
		return nil
	}
	rec, err := headRecord(p.cur.rec, recJS, ev.Revision)
	if err != nil || rec.Scope != p.scope || rec.Revision != ev.Revision {
		return nil
	}
	// The activation is the last event the row's version counts, so its
	// link is the chain head (an activation written before the chain
	// existed has none, and neither had the row then).
	st := &varplane.ScopeState{Scope: p.scope, Generation: p.gen, LastRejected: p.cur.state.LastRejected,
		Chain: varplane.ChainHead{Seq: ev.Seq, Hash: ev.Hash}}
	st.Head = varplane.NewHead(&ev, rec)
	return &snapshot{state: st, version: p.version, rec: rec}
}
