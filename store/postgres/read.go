package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// errMissingRecord is a logged activation whose revision record is not
// stored.
var errMissingRecord = errors.New("the activated revision's record is not stored")

// readFailure turns a failed read into a store-unavailable error: the
// database could not be read, which is never "absent".
func (s *Store) readFailure(what string, scope varplane.Scope, err error) error {
	s.stats.readErrors.Add(1)
	return varplane.Unavailable(fmt.Errorf("postgres store: read %s of %q: %w", what, scope, err))
}

// decodeFailure logs and reports a stored value that cannot be decoded. The
// row is left in place: it may be the only copy of a document.
func (s *Store) decodeFailure(what string, scope varplane.Scope, err error) error {
	s.stats.decodeErrors.Add(1)
	s.log.Error("postgres store: stored value cannot be decoded; failing the read and leaving the row in place",
		"what", what, "scope", string(scope), "err", err)
	return &varplane.Error{
		Code:    varplane.CodeInternal,
		Message: fmt.Sprintf("the stored %s of scope %q cannot be decoded", what, scope),
		Err:     err,
	}
}

// probe is one scope to read in fetchHeads: the version and generation
// the caller holds (a head at both is not returned; the generation guards
// against a version that a restored database reached again with other
// commits) and the revision whose record it holds (that record is not sent
// again).
type probe struct {
	scope   varplane.Scope
	version int64
	gen     varplane.Generation
	rev     varplane.Revision
	hint    *varplane.RevisionRecord
}

// headsQuery returns, for each probed scope whose head row is not at the
// probed version, the row and (unless the prober holds it) the head's
// record. A scope without a row comes back with a NULL version, unless it
// was probed with noRow. Records never change, so an unchanged head costs
// one comparison on the server and transfers nothing.
const headsQuery = `
SELECT c.scope, h.version, h.generation, h.revision, h.event, h.last_rejected, h.chain_seq, h.chain_hash,
	CASE WHEN h.revision IS NOT DISTINCT FROM c.rev THEN NULL ELSE r.record END
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[]) AS c(scope, version, generation, rev)
LEFT JOIN heads h ON h.scope = c.scope
LEFT JOIN revisions r ON r.scope = h.scope AND r.revision = h.revision
WHERE coalesce(h.version, -1) <> c.version OR h.generation <> c.generation OR h.revision IS DISTINCT FROM c.rev`

// fetchHeads reads the heads of probes that changed, in one statement, and
// returns their snapshots by scope, and by scope the rows that cannot be
// decoded (logged; they do not keep the other rows of the statement from
// being installed).
func (s *Store) fetchHeads(ctx context.Context, probes []probe) (map[varplane.Scope]*snapshot, map[varplane.Scope]error, error) {
	scopes := make([]string, len(probes))
	versions := make([]int64, len(probes))
	gens := make([]int64, len(probes))
	revs := make([]*string, len(probes))
	byScope := make(map[varplane.Scope]*probe, len(probes))
	for i := range probes {
		p := &probes[i]
		scopes[i], versions[i], gens[i] = string(p.scope), p.version, int64(p.gen)
		if p.rev != "" {
			r := string(p.rev)
			revs[i] = &r
		}
		byScope[p.scope] = p
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(cctx, headsQuery, scopes, versions, gens, revs)
	if err != nil {
		return nil, nil, s.readFailure("head", probes[0].scope, err)
	}
	defer rows.Close()
	out := make(map[varplane.Scope]*snapshot, 4)
	var bad map[varplane.Scope]error
	for rows.Next() {
		var (
			scope                         string
			version, generation, chainSeq *int64
			revision, chainHash           *string
			event, rejected, recJS        []byte
		)
		if err := rows.Scan(&scope, &version, &generation, &revision, &event, &rejected, &chainSeq, &chainHash, &recJS); err != nil {
			return nil, nil, s.readFailure("head", varplane.Scope(scope), err)
		}
		sc := varplane.Scope(scope)
		snap, err := s.snapshotFrom(sc, version, generation, revision, event, rejected, recJS, byScope[sc].hint)
		if err == nil {
			snap.state.Chain = link(chainSeq, chainHash)
		}
		if err != nil {
			if bad == nil {
				bad = map[varplane.Scope]error{}
			}
			bad[sc] = err
			continue
		}
		out[sc] = snap
	}
	if err := rows.Err(); err != nil {
		return nil, nil, s.readFailure("head", probes[0].scope, err)
	}
	return out, bad, nil
}

// snapshotFrom builds the snapshot of one heads row (version nil: no row).
func (s *Store) snapshotFrom(scope varplane.Scope, version, generation *int64, revision *string, event, rejected, recJS []byte, hint *varplane.RevisionRecord) (*snapshot, error) {
	st := &varplane.ScopeState{Scope: scope}
	snap := &snapshot{state: st, version: noRow}
	if version == nil {
		return snap, nil
	}
	snap.version = *version
	if generation != nil {
		st.Generation = varplane.Generation(*generation)
	}
	if rejected != nil {
		var rej varplane.Event
		if err := eventjson.DecodeEvent(rejected, &rej); err != nil {
			return nil, s.decodeFailure("last rejection", scope, err)
		}
		st.LastRejected = &rej
	}
	if revision == nil {
		return snap, nil
	}
	var ev varplane.Event
	if err := eventjson.DecodeEvent(event, &ev); err != nil {
		return nil, s.decodeFailure("head event", scope, err)
	}
	if string(ev.Revision) != *revision || ev.Generation != st.Generation {
		return nil, s.decodeFailure("head", scope, fmt.Errorf("head row (generation %d, revision %s) disagrees with its event", st.Generation, *revision))
	}
	rec, err := headRecord(hint, recJS, varplane.Revision(*revision))
	if errors.Is(err, errMissingRecord) {
		return nil, s.decodeFailure("head", scope, fmt.Errorf("head names revision %s, which is not stored", *revision))
	}
	if err != nil {
		return nil, s.decodeFailure("revision "+*revision, scope, err)
	}
	snap.rec = rec
	st.Head = varplane.NewHead(&ev, rec)
	return snap, nil
}

// headRecord returns the record of revision rev that a head read carries:
// the one the server sent (recJS), or hint, the record the reader holds,
// when the server sent none because the reader holds it. It returns
// errMissingRecord when neither is there.
func headRecord(hint *varplane.RevisionRecord, recJS []byte, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if recJS == nil {
		if hint != nil && hint.Revision == rev {
			return hint, nil
		}
		return nil, errMissingRecord
	}
	var r varplane.RevisionRecord
	if err := eventjson.DecodeRecord(recJS, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// probeOf returns the probe of scope that reads it whatever is installed.
func (s *Store) probeOf(scope varplane.Scope) probe {
	p := probe{scope: scope, version: -2} // no row version is -2: always read
	if e := s.entry(scope); e != nil {
		if rec := e.Snap.Load().rec; rec != nil {
			p.rev, p.hint = rec.Revision, rec
		}
	}
	return p
}

// load reads scope's head from the database (never a local copy).
func (s *Store) load(ctx context.Context, scope varplane.Scope) (*snapshot, error) {
	got, bad, err := s.fetchHeads(ctx, []probe{s.probeOf(scope)})
	if err != nil {
		return nil, err
	}
	if err := bad[scope]; err != nil {
		return nil, err
	}
	return got[scope], nil
}

// refresh reads scopes from the database and installs them as one commit,
// delivering it when a generation changed.
func (s *Store) refresh(ctx context.Context, scopes ...varplane.Scope) error {
	return s.refreshAs(ctx, false, scopes...)
}

// refreshAs reads scopes' heads in one query and installs them, delivering
// them as one commit or, when each is set, one commit per scope.
func (s *Store) refreshAs(ctx context.Context, each bool, scopes ...varplane.Scope) error {
	probes := make([]probe, len(scopes))
	seqs := make([]uint64, len(scopes))
	for i, sc := range scopes {
		seqs[i] = s.readSeq(sc)
		probes[i] = s.probeOf(sc)
	}
	got, bad, err := s.fetchHeads(ctx, probes)
	if err != nil {
		return err
	}
	reqs := make([]installReq, 0, len(scopes))
	for i, sc := range scopes {
		if bad[sc] != nil {
			continue // logged; the installed head (if any) stays
		}
		reqs = append(reqs, installReq{scope: sc, snap: got[sc], seq: seqs[i]})
	}
	s.fillGaps(ctx, reqs)
	if !each {
		s.installAndDeliver(reqs)
		return nil
	}
	for i := range reqs {
		s.installAndDeliver(reqs[i : i+1])
	}
	return nil
}

// State returns the installed snapshot of scope without touching the
// database. A scope not installed yet is read and installed (a scope the
// database has no row for answers the zero state, and is installed as
// such while fewer than maxAbsent such scopes are; past that the next read
// asks again). A failed read returns a store-unavailable
// error and an undecodable row an internal error; never an empty state.
func (s *Store) State(ctx context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if e := s.entry(scope); e != nil {
		return e.Snap.Load().state, nil
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	snap, err := s.load(ctx, scope)
	if err != nil {
		return nil, err
	}
	s.stats.coldLoads.Add(1)
	return s.installCold(scope, snap).state, nil
}

// readRevision reads one revision record.
func (s *Store) readRevision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	var (
		b         []byte
		reclaimed bool
	)
	err := s.pool.QueryRow(cctx, "SELECT record, reclaimed_at IS NOT NULL FROM revisions WHERE scope = $1 AND revision = $2",
		string(scope), string(rev)).Scan(&b, &reclaimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, varplane.Errorf(varplane.CodeNotFound, "revision %s of scope %q is not stored", rev, scope)
	}
	if err != nil {
		return nil, s.readFailure("revision", scope, err)
	}
	if reclaimed {
		// The row stays, so a reclaimed revision is told apart from one
		// that never existed; its record is not served, whatever it holds.
		return nil, varplane.Errorf(varplane.CodeRevisionReclaimed, "the body of revision %s of scope %q was reclaimed by retention", rev, scope)
	}
	var rec varplane.RevisionRecord
	if err := eventjson.DecodeRecord(b, &rec); err != nil {
		return nil, s.decodeFailure("revision "+string(rev), scope, err)
	}
	if rec.Scope != scope || rec.Revision != rev {
		return nil, s.decodeFailure("revision "+string(rev), scope, fmt.Errorf("record names %q %s", rec.Scope, rec.Revision))
	}
	return &rec, nil
}

// Revision returns revision rev of scope: from memory when it is the
// installed head's, from the database otherwise. It returns an error
// matching varplane.ErrNotFound when the record is not stored, and one
// matching varplane.ErrReclaimed when its row is marked reclaimed_at.
func (s *Store) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if e := s.entry(scope); e != nil {
		if r := e.Snap.Load().rec; r != nil && r.Revision == rev {
			return r, nil
		}
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	return s.readRevision(ctx, scope, rev)
}

// History returns every event of scope in log order, read from the events
// table.
func (s *Store) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	return s.history(ctx, scope, false)
}

// EventHistory returns every event of scope in log order without their
// documents. A revision-created body is sent in two pieces, never whole:
// the text before its document (up to the first ,"document":, which the
// escaped strings before it cannot hold) and the last tailWindow
// characters, where the event's members after the document are found
// (tailAfterDocument). PostgreSQL's JSON functions cannot do this cut:
// they refuse a document holding \u0000, and its regular expressions
// convert the whole text first (hundreds of milliseconds a MiB). A body
// whose members after the document do not fit the window is read whole
// (one more query) and its document dropped here.
func (s *Store) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	return s.history(ctx, scope, true)
}

// history reads scope's events in log order, their documents cut out
// when cut (EventHistory).
func (s *Store) history(ctx context.Context, scope varplane.Scope, cut bool) ([]varplane.Event, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	query, args := historyQuery, []any{string(scope)}
	if cut {
		query, args = eventHistoryQuery, append(args, tailWindow)
	}
	rows, err := s.pool.Query(cctx, query, args...)
	if err != nil {
		return nil, s.readFailure("history", scope, err)
	}
	defer rows.Close()
	var out []varplane.Event
	var whole []int // indexes of out to read whole, by seq
	var seqs []int64
	for rows.Next() {
		var (
			seq        int64
			head, tail []byte
		)
		if err := rows.Scan(&seq, &head, &tail); err != nil {
			return nil, s.readFailure("history", scope, err)
		}
		b := head
		if tail != nil {
			at, ok := tailAfterDocument(tail)
			if !ok {
				whole, seqs = append(whole, len(out)), append(seqs, seq)
				out = append(out, varplane.Event{})
				continue
			}
			b = append(head, tail[at:]...)
		}
		var ev varplane.Event
		if err := eventjson.DecodeEvent(b, &ev); err != nil {
			return nil, s.decodeFailure(fmt.Sprintf("history entry %d", len(out)), scope, err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readFailure("history", scope, err)
	}
	rows.Close()
	for k, i := range whole {
		var b []byte
		if err := s.pool.QueryRow(cctx, "SELECT body FROM events WHERE seq = $1", seqs[k]).Scan(&b); err != nil {
			return nil, s.readFailure("history", scope, err)
		}
		if err := eventjson.DecodeEvent(b, &out[i]); err != nil {
			return nil, s.decodeFailure(fmt.Sprintf("history entry %d", i), scope, err)
		}
		out[i].Document = nil
	}
	return out, nil
}

// tailWindow is how many characters of a revision-created body's end
// EventHistory reads to find the members after its document.
const tailWindow = 4096

// historyQuery selects scope's events in log order: seq, the body, no
// tail (as eventHistoryQuery does for a body it does not cut).
const historyQuery = `SELECT seq, body, NULL::text FROM events WHERE scope = $1 ORDER BY seq`

// eventHistoryQuery selects scope's events in log order: seq, then the
// body whole (and no tail), or for a revision-created body the text before
// its document and its last $2 characters.
const eventHistoryQuery = `SELECT seq, CASE WHEN cut THEN left(t, p - 1) ELSE t END, CASE WHEN cut THEN right(t, $2) END
	FROM events, LATERAL (SELECT body::text AS t) b, LATERAL (SELECT strpos(t, ',"document":') AS p) d,
		LATERAL (SELECT kind = 'revision-created' AND p > 0 AS cut) c
	WHERE scope = $1 ORDER BY seq`

// tailAfterDocument finds, in w, the end of an event's JSON text as
// eventjson writes it ({…,"document":D,…}), where the members after the
// document D begin: it reads the members backwards from the closing brace
// (their values are strings, integers and booleans; a name is letters),
// and stops at the end of D (a bracket, or null) or at a member named
// document (D a scalar, which is then read as a value). It returns false
// when w ends before that, or holds anything else: the caller then reads
// the body whole.
func tailAfterDocument(w []byte) (int, bool) {
	i := len(w) - 1
	if i < 0 || w[i] != '}' {
		return 0, false
	}
	i--
	for {
		if i < 0 {
			return 0, false
		}
		end := i // the last byte of the value
		switch c := w[i]; {
		case c == '"':
			k := i - 1
			for ; ; k-- {
				if k < 0 {
					return 0, false
				}
				if w[k] != '"' {
					continue
				}
				m := k - 1
				for m >= 0 && w[m] == '\\' {
					m--
				}
				if m < 0 {
					return 0, false // the backslashes may go on before w
				}
				if (k-1-m)%2 == 0 {
					break
				}
			}
			i = k - 1
		case c >= '0' && c <= '9':
			for i >= 0 && (w[i] >= '0' && w[i] <= '9' || w[i] == '-') {
				i--
			}
		case c == 'e' && i >= 3 && string(w[i-3:i+1]) == "true":
			i -= 4
		case c == 'e' && i >= 4 && string(w[i-4:i+1]) == "false":
			i -= 5
		case c == '}' || c == ']' || c == 'l':
			return end + 1, true // the end of D
		default:
			return 0, false
		}
		// i is at the colon before the value; the name is before it.
		if i < 2 || w[i] != ':' || w[i-1] != '"' {
			return 0, false
		}
		n := i - 2
		for n >= 0 && (w[n] >= 'a' && w[n] <= 'z' || w[n] >= 'A' && w[n] <= 'Z') {
			n--
		}
		if n < 1 || w[n] != '"' || w[n-1] != ',' {
			return 0, false
		}
		if string(w[n+1:i-1]) == "document" {
			return end + 1, true
		}
		i = n - 2 // the end of the value before the comma
	}
}

// Idempotency returns what was recorded for key, or an error matching
// varplane.ErrNotFound.
func (s *Store) Idempotency(ctx context.Context, key string) (*varplane.IdempotencyRecord, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, varplane.Errorf(varplane.CodeNotFound, "no idempotency record for an empty key")
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	var (
		hash  string
		gen   int64
		scope string
		body  []byte
	)
	err := s.pool.QueryRow(cctx, `SELECT i.request_hash, i.generation, i.scope, e.body
FROM idempotency i JOIN events e ON e.seq = i.event_seq WHERE i.key = $1`, key).Scan(&hash, &gen, &scope, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, varplane.Errorf(varplane.CodeNotFound, "no idempotency record for the key")
	}
	if err != nil {
		return nil, s.readFailure("idempotency record", "", err)
	}
	var ev varplane.Event
	if err := eventjson.DecodeEvent(body, &ev); err != nil {
		return nil, s.decodeFailure("idempotency record", varplane.Scope(scope), err)
	}
	return &varplane.IdempotencyRecord{Key: key, RequestHash: hash, Event: ev, Generation: varplane.Generation(gen)}, nil
}

// Scopes returns every scope that has appeared in the log, sorted bytewise
// (the heads table has a row for each, in the "C" collation).
func (s *Store) Scopes(ctx context.Context) ([]varplane.Scope, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(cctx, "SELECT scope FROM heads ORDER BY scope")
	if err != nil {
		return nil, s.readFailure("scope list", "", err)
	}
	defer rows.Close()
	var out []varplane.Scope
	for rows.Next() {
		var sc string
		if err := rows.Scan(&sc); err != nil {
			return nil, s.readFailure("scope list", "", err)
		}
		out = append(out, varplane.Scope(sc))
	}
	if err := rows.Err(); err != nil {
		return nil, s.readFailure("scope list", "", err)
	}
	return out, nil
}

// Replay returns the state of scope right after the event that allocated
// generation gen: that event (by the generation index), the last rejection
// logged before it and, for an activation, its revision record. Generation
// 0 is the state before the first activation or deactivation. It returns an
// error matching varplane.ErrNotFound when the scope never reached gen.
func (s *Store) Replay(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	st := &varplane.ScopeState{Scope: scope}
	if gen == 0 {
		var one int
		err := s.pool.QueryRow(cctx, "SELECT 1 FROM heads WHERE scope = $1", string(scope)).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, varplane.Errorf(varplane.CodeNotFound, "scope %q has no events", scope)
		}
		if err != nil {
			return nil, s.readFailure("history", scope, err)
		}
		return st, nil
	}
	var (
		body, rejected []byte
	)
	err := s.pool.QueryRow(cctx, `SELECT e.body,
	(SELECT r.body FROM events r WHERE r.scope = e.scope AND r.kind = 'rejected' AND r.seq < e.seq ORDER BY r.seq DESC LIMIT 1)
FROM events e WHERE e.scope = $1 AND e.generation = $2 ORDER BY e.seq LIMIT 1`, string(scope), int64(gen)).Scan(&body, &rejected)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, varplane.Errorf(varplane.CodeNotFound, "scope %q never reached generation %d", scope, gen)
	}
	if err != nil {
		return nil, s.readFailure("history", scope, err)
	}
	var ev varplane.Event
	if err := eventjson.DecodeEvent(body, &ev); err != nil {
		return nil, s.decodeFailure("history entry", scope, err)
	}
	if rejected != nil {
		var rej varplane.Event
		if err := eventjson.DecodeEvent(rejected, &rej); err != nil {
			return nil, s.decodeFailure("history entry", scope, err)
		}
		st.LastRejected = &rej
	}
	st.Generation = ev.Generation
	if ev.Kind == varplane.EventActivated {
		rec, err := s.Revision(ctx, scope, ev.Revision)
		if err != nil {
			return nil, err
		}
		st.Head = varplane.NewHead(&ev, rec)
	}
	return st, nil
}
