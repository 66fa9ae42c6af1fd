package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/replica"
)

// readFailure turns a failed Redis read into an error: a reply Redis gave
// about the value itself (a key of the wrong type, written by hand) is an
// undecodable value; anything else means the store could not be read.
func (s *Store) readFailure(what string, scope varplane.Scope, err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "WRONGTYPE") {
		return s.decodeFailure(what, scope, err)
	}
	s.stats.readErrors.Add(1)
	return varplane.Unavailable(fmt.Errorf("redis store: read %s of %q: %w", what, scope, err))
}

// decodeFailure logs and reports a stored value that cannot be decoded. The
// value is left in Redis: it may be the only copy of a document.
func (s *Store) decodeFailure(what string, scope varplane.Scope, err error) error {
	s.stats.decodeErrors.Add(1)
	if s.failureLogDue(scope) {
		s.log.Error("redis store: stored value cannot be decoded; failing the read and leaving the value in place",
			"what", what, "scope", string(scope), "err", err)
	}
	return &varplane.Error{
		Code:    varplane.CodeDocumentFailed,
		Message: fmt.Sprintf("the stored %s of scope %q cannot be decoded", what, scope),
		Err:     err,
	}
}

// vanished logs and reports a head that is gone from Redis (or was rewritten
// below its generation floor) after a generation was allocated to it. It is
// a store failure, never "no head": reading it as absent would serve an
// empty scope and hand its next generation out a second time.
func (s *Store) vanished(scope varplane.Scope, floor string) error {
	s.stats.decodeErrors.Add(1)
	if s.failureLogDue(scope) {
		s.log.Error("redis store: the head of a scope disappeared from the store; failing closed until one returns",
			"scope", string(scope), "generationFloor", floor)
	}
	return &varplane.Error{
		Code: varplane.CodeDocumentFailed,
		Message: fmt.Sprintf("the head of scope %q disappeared from the store after generation %s was allocated; "+
			"restore it, or activate a revision with expectedGeneration %s", scope, floor, floor),
	}
}

// failureLogDue reports whether a failure of scope should be logged now: at
// most once a minute per scope, since every pass and every cold read of a
// failed scope meets the failure again (the counter counts each one).
func (s *Store) failureLogDue(scope varplane.Scope) bool {
	now := time.Now().UnixNano()
	if v, ok := s.failLogged.Load(scope); ok && now-v.(int64) < int64(time.Minute) {
		return false
	}
	s.failLogged.Store(scope, now)
	return true
}

func (s *Store) checkOpen() error { return replica.CheckOpen(&s.closed) }

func checkScope(scope varplane.Scope) error { return replica.CheckScope(scope) }

// headFields are the small fields of a head hash.
type headFields struct {
	exists     bool
	v, g, r    string
	e, j       string
	hasE, hasJ bool
	k          string // the chain head; "" before the first chained event
	floor      string // the generation floor; "" when none was allocated
}

// parseHead reads the {v, g, r, e, j, k, f} reply of confirmScript.
func parseHead(arr []rueidis.RedisMessage) (headFields, error) {
	var h headFields
	if len(arr) != 7 {
		return h, fmt.Errorf("head reply has %d fields, want 7", len(arr))
	}
	get := func(i int) (string, bool, error) {
		if arr[i].IsNil() {
			return "", false, nil
		}
		v, err := arr[i].ToString()
		return v, err == nil, err
	}
	var err error
	if h.v, h.exists, err = get(0); err != nil {
		return h, err
	}
	if h.g, _, err = get(1); err != nil {
		return h, err
	}
	if h.r, _, err = get(2); err != nil {
		return h, err
	}
	if h.e, h.hasE, err = get(3); err != nil {
		return h, err
	}
	if h.j, h.hasJ, err = get(4); err != nil {
		return h, err
	}
	if h.k, _, err = get(5); err != nil {
		return h, err
	}
	if h.floor, _, err = get(6); err != nil {
		return h, err
	}
	return h, nil
}

// load reads scope's head from Redis, and its revision record unless hint is
// that record already (records never change).
func (s *Store) load(ctx context.Context, scope varplane.Scope, hint *varplane.RevisionRecord) (*snapshot, error) {
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	arr, err := confirmScript.Exec(ctx, s.client, []string{s.keys.head(scope), s.keys.floor(scope)}, []string{""}).ToArray()
	if err != nil {
		return nil, s.readFailure("head", scope, err)
	}
	h, err := parseHead(arr)
	if err != nil {
		return nil, s.decodeFailure("head", scope, err)
	}
	return s.snapshotFrom(ctx, scope, h, hint)
}

// snapshotFrom builds the snapshot of head fields h, reading the head's
// revision record when hint is not it.
func (s *Store) snapshotFrom(ctx context.Context, scope varplane.Scope, h headFields, hint *varplane.RevisionRecord) (*snapshot, error) {
	st := &varplane.ScopeState{Scope: scope}
	snap := &snapshot{state: st}
	var floor uint64
	if h.floor != "" {
		f, err := strconv.ParseUint(h.floor, 10, 64)
		if err != nil {
			return nil, s.decodeFailure("generation floor", scope, err)
		}
		floor = f
	}
	if !h.exists {
		if floor > 0 {
			return nil, s.vanished(scope, h.floor)
		}
		return snap, nil
	}
	snap.v, snap.g, snap.r = h.v, h.g, h.r
	gen, err := strconv.ParseUint(h.g, 10, 64)
	if err != nil {
		return nil, s.decodeFailure("head generation", scope, err)
	}
	if gen < floor {
		return nil, s.vanished(scope, h.floor)
	}
	st.Generation = varplane.Generation(gen)
	if st.Chain, err = parseChain(h.k); err != nil {
		return nil, s.decodeFailure("chain head", scope, err)
	}
	if h.hasJ {
		var rej varplane.Event
		if err := eventjson.DecodeEvent([]byte(h.j), &rej); err != nil {
			return nil, s.decodeFailure("last rejection", scope, err)
		}
		st.LastRejected = &rej
	}
	if h.r == "" {
		return snap, nil
	}
	if !h.hasE {
		return nil, s.decodeFailure("head", scope, errors.New("head names a revision but no activation event"))
	}
	var ev varplane.Event
	if err := eventjson.DecodeEvent([]byte(h.e), &ev); err != nil {
		return nil, s.decodeFailure("head event", scope, err)
	}
	if string(ev.Revision) != h.r || ev.Generation != st.Generation {
		return nil, s.decodeFailure("head", scope, fmt.Errorf("head fields (generation %s, revision %s) disagree with its event", h.g, h.r))
	}
	rec := hint
	if rec == nil || string(rec.Revision) != h.r || rec.Scope != scope {
		rec, err = s.readRevision(ctx, scope, varplane.Revision(h.r))
		if err != nil {
			if errors.Is(err, varplane.ErrNotFound) {
				return nil, s.decodeFailure("head", scope, fmt.Errorf("head names revision %s, which is not stored", h.r))
			}
			return nil, err
		}
	}
	snap.rec = rec
	st.Head = varplane.NewHead(&ev, rec)
	return snap, nil
}

// readRevision reads one revision record from Redis. Like every read of the
// store, it decodes with encoding/json, which bounds neither the size of a
// value nor its nesting below 10,000 levels: whatever the limits' ceilings
// let the engine store (MaxDepthCeiling+EnvelopeDepth levels, MaxBodyCeiling
// bytes) is read back, with its document bytes as they were written.
func (s *Store) readRevision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	b, err := s.client.Do(ctx, s.client.B().Get().Key(s.keys.revision(scope, rev)).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, s.missingRevision(ctx, scope, rev) // reclaim.go
	}
	if err != nil {
		return nil, s.readFailure("revision", scope, err)
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

// State returns the installed snapshot of scope without touching Redis. A
// scope not installed yet is read from Redis and installed (a scope Redis
// holds nothing for answers the zero state, and is remembered as absent
// while fewer than maxAbsent such scopes are; past that the next read asks
// Redis again). A failed read returns a store-unavailable error,
// and an undecodable value or a vanished head (see keys.floor) a
// document-failed error; never an empty state.
func (s *Store) State(ctx context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if e := s.entry(scope); e != nil {
		snap := e.Snap.Load()
		if snap.err != nil {
			return nil, snap.err
		}
		return snap.state, nil
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	snap, err := s.load(ctx, scope, nil)
	if err != nil {
		return nil, err
	}
	s.stats.coldLoads.Add(1)
	s.mu.Lock()
	_, cur := s.installLocked(scope, snap, 0, true)
	s.mu.Unlock()
	if cur.err != nil {
		return nil, cur.err
	}
	return cur.state, nil
}

// Revision returns revision rev of scope: from memory when it is the
// installed head's, from Redis otherwise. It returns an error matching
// varplane.ErrNotFound when the record is not stored.
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

// History returns every event of scope, oldest first, read from Redis.
func (s *Store) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	return s.history(ctx, scope, true)
}

// history reads scope's history list, with the documents attached from
// their revision records when withDocuments.
func (s *Store) history(ctx context.Context, scope varplane.Scope, withDocuments bool) ([]varplane.Event, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	raw, err := s.client.Do(cctx, s.client.B().Lrange().Key(s.keys.history(scope)).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return nil, s.readFailure("history", scope, err)
	}
	out := make([]varplane.Event, len(raw))
	for i, r := range raw {
		if err := eventjson.DecodeEvent([]byte(r), &out[i]); err != nil {
			return nil, s.decodeFailure(fmt.Sprintf("history entry %d", i), scope, err)
		}
	}
	if !withDocuments {
		return out, nil
	}
	if err := s.attachDocuments(cctx, scope, out); err != nil { // history.go
		return nil, err
	}
	return out, nil
}

// EventHistory returns every event of scope, oldest first, as the history
// list holds them: without reading the revision records, so a
// revision-created event carries no document (unless an older store wrote
// it into the entry).
func (s *Store) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	return s.history(ctx, scope, false)
}

// idemWire is the stored form of an idempotency record.
type idemWire struct {
	Generation varplane.Generation `json:"g"`
	Event      varplane.Event      `json:"e"`
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
	root, err := s.client.Do(cctx, s.client.B().Get().Key(s.keys.idemClaim(key)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return nil, varplane.Errorf(varplane.CodeNotFound, "no idempotency record for the key")
	}
	if err != nil {
		return nil, s.readFailure("idempotency claim", "", err)
	}
	scope := varplane.Scope(root)
	b, err := s.client.Do(cctx, s.client.B().Get().Key(s.keys.idem(scope, key)).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		// A claim whose commit failed: nothing was recorded.
		return nil, varplane.Errorf(varplane.CodeNotFound, "no idempotency record for the key")
	}
	if err != nil {
		return nil, s.readFailure("idempotency record", scope, err)
	}
	var w idemWire
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, s.decodeFailure("idempotency record", scope, err)
	}
	return &varplane.IdempotencyRecord{Key: key, RequestHash: w.Event.RequestHash, Event: w.Event, Generation: w.Generation}, nil
}

// Scopes returns every scope that has appeared in the log, sorted, read from
// the per-root indexes in Redis.
func (s *Store) Scopes(ctx context.Context) ([]varplane.Scope, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	roots, err := s.client.Do(cctx, s.client.B().Smembers().Key(s.keys.roots()).Build()).AsStrSlice()
	if err != nil {
		return nil, s.readFailure("scope list", "", err)
	}
	if len(roots) == 0 {
		return nil, nil
	}
	cmds := make(rueidis.Commands, len(roots))
	for i, r := range roots {
		cmds[i] = s.client.B().Zrange().Key(s.keys.index(varplane.Scope(r))).Min("0").Max("-1").Build()
	}
	var out []varplane.Scope
	for i, res := range s.client.DoMulti(cctx, cmds...) {
		names, err := res.AsStrSlice()
		if err != nil {
			return nil, s.readFailure("scope index", varplane.Scope(roots[i]), err)
		}
		for _, n := range names {
			out = append(out, varplane.Scope(n))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// Replay folds scope's history up to the event that allocated generation gen
// and returns the state right after it. It returns an error matching
// varplane.ErrNotFound when the scope never reached gen. Generation 0 is the
// state before the first activation or deactivation.
func (s *Store) Replay(ctx context.Context, scope varplane.Scope, gen varplane.Generation) (*varplane.ScopeState, error) {
	events, err := s.History(ctx, scope)
	if err != nil {
		return nil, err
	}
	st := &varplane.ScopeState{Scope: scope}
	var head *varplane.Event
	reached := gen == 0
	for i := range events {
		ev := &events[i]
		if ev.Kind == varplane.EventRejected {
			st.LastRejected = ev
			continue
		}
		if ev.Kind != varplane.EventActivated && ev.Kind != varplane.EventDeactivated {
			continue
		}
		if gen == 0 {
			break
		}
		st.Generation = ev.Generation
		head = nil
		if ev.Kind == varplane.EventActivated {
			head = ev
		}
		if ev.Generation == gen {
			reached = true
			break
		}
	}
	if !reached {
		return nil, varplane.Errorf(varplane.CodeNotFound, "scope %q never reached generation %d", scope, gen)
	}
	if head != nil {
		rec, err := s.Revision(ctx, scope, head.Revision)
		if err != nil {
			return nil, err
		}
		st.Head = varplane.NewHead(head, rec)
	}
	return st, nil
}
