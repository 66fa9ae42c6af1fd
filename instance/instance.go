package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// Defaults and bounds of Options (seed 002's values).
const (
	DefaultRevalidateInterval    = 10 * time.Second
	MaxRevalidateInterval        = 5 * time.Minute
	MinRevalidateInterval        = 10 * time.Millisecond
	DefaultRevalidateConcurrency = 4
	DefaultMaxCached             = 10000
	MaxAbsentPerFamily           = 256
	DefaultColdLoadTimeout       = 2 * time.Second
	DefaultStoreReadTimeout      = 30 * time.Second
	DefaultLocalMaxAge           = 30 * time.Second
	DefaultFailClosedMaxLag      = 30 * time.Minute
	DefaultLagWarn               = 60 * time.Second
	DefaultLagEscalate           = 5 * time.Minute
	// StallTimeout is how long a pass may go without confirming a document
	// (and without a read in flight) before the next tick abandons it, and
	// how long a pass waits for one decode before it goes on without it.
	StallTimeout = 30 * time.Second
)

// Decoder turns a stored revision into the value a service decides with.
// An error installs the document as failed (reads answer document-failed).
// It must not keep rec beyond the call unless it treats it as read-only.
type Decoder[T any] func(ctx context.Context, rec *varplane.RevisionRecord) (T, error)

// RawJSON is the Decoder of a read replica: the document's bytes, checked
// to be JSON.
func RawJSON(_ context.Context, rec *varplane.RevisionRecord) (json.RawMessage, error) {
	if !json.Valid(rec.Document) {
		return nil, errors.New("the document is not JSON")
	}
	return rec.Document, nil
}

// Family bounds the documents of one scope prefix: Prefix itself and every
// scope below it. A scope belongs to the longest prefix that matches it.
type Family struct {
	Prefix    varplane.Scope
	MaxCached int
}

// Options configure a Cache. Zero values take the defaults above.
type Options[T any] struct {
	// Root is loaded at start and pinned; until it has a document the
	// cache is not ready. Required.
	Root varplane.Scope
	// Prewarm scopes load after the root at start (failures are logged:
	// they load again on first need).
	Prewarm []varplane.Scope
	// Decode builds the typed value of a revision. Required.
	Decode Decoder[T]
	// Families bound scope prefixes; MaxCached bounds every scope in none.
	Families  []Family
	MaxCached int
	// RevalidateInterval: how often every document is confirmed (at most
	// 5 minutes; it cannot be turned off). RevalidateConcurrency reads run
	// at a time.
	RevalidateInterval    time.Duration
	RevalidateConcurrency int
	// FailClosed prefixes answer document-stale once their document or the
	// root has not been confirmed for FailClosedMaxLag.
	FailClosed       []varplane.Scope
	FailClosedMaxLag time.Duration
	// ColdLoadTimeout bounds how long a read waits for a document that is
	// not installed; StoreReadTimeout bounds the load itself.
	ColdLoadTimeout  time.Duration
	StoreReadTimeout time.Duration
	// CacheDir, when set, keeps a local copy of each installed document on
	// disk (written atomically); a cold load may take one at most
	// LocalMaxAge old, counts it that old and confirms it with the store.
	// A local copy is served only when its size and document are within
	// Limits (zero: varplane.DefaultLimits) and its document's digest is
	// its revision; any other is ignored and logged at ERROR.
	CacheDir    string
	LocalMaxAge time.Duration
	Limits      varplane.Limits
	// LagWarn and LagEscalate are the lag log thresholds.
	LagWarn, LagEscalate time.Duration
	// InstanceID names the instance in its status heartbeat; empty turns
	// the heartbeat off (or when the store cannot hold one). A rollout's
	// share selects instances by it (rollout.Selected): without one, an
	// instance never serves a rollout's revision to Get (GetFor still
	// does, by its entity key).
	InstanceID string
	// Labels describe the instance in its status (region, tier, ...): a
	// rollout's label steps select instances by them.
	Labels map[string]string
	// CanaryEvaluate, when set, runs beside the current head on the
	// candidate of each open canary window of a scope the instance holds
	// (see Beat); without it a candidate only has to decode.
	CanaryEvaluate CanaryEvaluator[T]
	Logger         *slog.Logger
	// Clock is the time source; nil is the system clock. Tests pass a fake.
	Clock Clock
}

func (o Options[T]) normalise() (Options[T], error) {
	if !o.Root.Valid() {
		return o, varplane.Errorf(varplane.CodeBadRequest, "instance: root scope %q is not a valid scope", o.Root)
	}
	if o.Decode == nil {
		return o, varplane.Errorf(varplane.CodeBadRequest, "instance: a Decoder is required")
	}
	switch {
	case o.RevalidateInterval == 0:
		o.RevalidateInterval = DefaultRevalidateInterval
	case o.RevalidateInterval < MinRevalidateInterval || o.RevalidateInterval > MaxRevalidateInterval:
		return o, varplane.Errorf(varplane.CodeBadRequest, "instance: revalidate interval %v: want %v to %v (revalidation cannot be turned off)", o.RevalidateInterval, MinRevalidateInterval, MaxRevalidateInterval)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.FailClosedMaxLag, DefaultFailClosedMaxLag)
	def(&o.ColdLoadTimeout, DefaultColdLoadTimeout)
	def(&o.StoreReadTimeout, DefaultStoreReadTimeout)
	def(&o.LocalMaxAge, DefaultLocalMaxAge)
	def(&o.LagWarn, DefaultLagWarn)
	def(&o.LagEscalate, DefaultLagEscalate)
	if o.RevalidateConcurrency <= 0 {
		o.RevalidateConcurrency = DefaultRevalidateConcurrency
	}
	if o.MaxCached <= 0 {
		o.MaxCached = DefaultMaxCached
	}
	for i, f := range o.Families {
		if !f.Prefix.Valid() || f.MaxCached <= 0 {
			return o, varplane.Errorf(varplane.CodeBadRequest, "instance: family %d (%q, max %d) needs a valid prefix and a positive bound", i, f.Prefix, f.MaxCached)
		}
	}
	for _, p := range o.FailClosed {
		if !p.Valid() {
			return o, varplane.Errorf(varplane.CodeBadRequest, "instance: fail-closed prefix %q is not a valid scope", p)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	return o, nil
}

// Doc is one installed document as the store held it. It is immutable: a
// request that holds a *Doc reads one revision for its whole duration.
type Doc[T any] struct {
	Scope      varplane.Scope
	Generation varplane.Generation
	// Head is the store's head; nil for a scope with no document.
	Head *varplane.Head
	// Value is what the Decoder built; zero when Err is set.
	Value T
	// Local is true when the document came from the local copy and the
	// store has not confirmed it yet.
	Local bool
	err   error
}

// Err is what reads of the document answer instead of it (document-failed),
// nil for a usable document.
func (d *Doc[T]) Err() error { return d.err }

// entry is one installed scope.
type entry[T any] struct {
	doc       atomic.Pointer[Doc[T]]
	confirmed atomic.Int64 // clock unix nanoseconds of the last confirmation
	used      atomic.Uint64
	lagLogged atomic.Int64
	fam       *family[T]
	pinned    bool
	closed    bool // fail-closed prefix
}

// family is the bound of one prefix and the absent scopes it remembers.
type family[T any] struct {
	prefix  varplane.Scope
	max     int
	members map[varplane.Scope]*entry[T]           // under Cache.mu
	absent  map[varplane.Scope]varplane.Generation // scope → its generation when the store said so
	ring    []varplane.Scope                       // FIFO of absent, at most MaxAbsentPerFamily
}

// Cache is the data-plane cache. Its read methods are safe for concurrent
// use and never block on the store for an installed document.
type Cache[T any] struct {
	store varplane.Store
	opts  Options[T]
	log   *slog.Logger
	clock Clock

	entries *table[T]
	epoch   atomic.Uint64
	ready   atomic.Bool
	root    atomic.Pointer[entry[T]]

	mu       sync.Mutex // families, loads, installs
	families []*family[T]
	def      *family[T]
	loads    map[varplane.Scope]*load[T]

	work    chan []varplane.ScopeChange
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	unwatch func()
	unhold  func() // gives the store's Hold back (Close)
	pass    passState
	stats   counters
	local   *localCopy
	canary  canaryState
	follow  atomic.Pointer[func(varplane.Scope) bool]

	rollouts atomic.Pointer[rolloutSet[T]]
	rollout  rolloutState
}

// load is one cold load in flight; loads count toward no bound.
type load[T any] struct {
	done chan struct{}
	doc  *Doc[T]
	err  error
	// again says that the store delivered a change of the scope while
	// the load read it, so that its answer may be older (under c.mu).
	again bool
}

// New opens a Cache over store: it installs the root (waiting at most
// StoreReadTimeout for it; a root with no document leaves the cache not
// ready, and it becomes ready when one is published), then the prewarmed
// scopes, and starts the invalidation, revalidation and heartbeat loops.
// Close stops them; it does not close store. A store that keeps its own
// copy (varplane.Holder) then follows only what the cache holds: give the
// cache a store of its own, not one a control plane also serves from. A
// store another open cache holds is refused (varplane.ErrHeld).
func New[T any](ctx context.Context, store varplane.Store, opts Options[T]) (*Cache[T], error) {
	o, err := opts.normalise()
	if err != nil {
		return nil, err
	}
	c := &Cache[T]{store: store, opts: o, log: o.Logger.With("component", "instance"), clock: o.Clock, entries: newTable[T](),
		loads: map[varplane.Scope]*load[T]{}, work: make(chan []varplane.ScopeChange, 1024)}
	c.def = &family[T]{max: o.MaxCached, members: map[varplane.Scope]*entry[T]{}, absent: map[varplane.Scope]varplane.Generation{}}
	for _, f := range o.Families {
		c.families = append(c.families, &family[T]{prefix: f.Prefix, max: f.MaxCached, members: map[varplane.Scope]*entry[T]{}, absent: map[varplane.Scope]varplane.Generation{}})
	}
	// Longest prefix first, so the first match is the family.
	sort.SliceStable(c.families, func(i, j int) bool { return len(c.families[i].prefix) > len(c.families[j].prefix) })
	if o.CacheDir != "" {
		if c.local, err = newLocalCopy(o.CacheDir, o.Limits); err != nil {
			return nil, err
		}
	}
	c.unhold = func() {}
	if h, ok := store.(varplane.Holder); ok {
		// One bound: the store follows only what the cache holds.
		if c.unhold, err = h.Hold(c.wants); err != nil {
			return nil, fmt.Errorf("instance: %w", err)
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.unwatch = store.Watch(func(cm varplane.Commit) {
		select {
		case c.work <- cm.Changes:
		default:
			// A full queue: the next pass confirms every document.
			c.stats.dropped.Add(1)
		}
	})
	c.wg.Add(2)
	go c.invalidationLoop()
	// The ticker exists before New returns, so a test clock moved right
	// after New fires it.
	go c.revalidateLoop(c.clock.NewTicker(o.RevalidateInterval))
	if _, err := c.loadRoot(ctx); err != nil && varplane.ErrorCode(err) != varplane.CodeNotReady {
		c.log.Warn("instance: the root could not be loaded at start; not ready until it is", "root", string(o.Root), "err", err)
	}
	for _, sc := range o.Prewarm {
		if _, err := c.Get(ctx, sc); err != nil && varplane.ErrorCode(err) != varplane.CodeNoHead {
			c.log.Warn("instance: prewarm failed; the scope loads on first need", "scope", string(sc), "err", err)
		}
	}
	c.syncRollouts(ctx)
	if o.InstanceID != "" {
		if hs, ok := store.(varplane.StatusWriter); ok {
			c.wg.Add(1)
			go c.heartbeatLoop(hs, c.clock.NewTicker(varplane.HeartbeatInterval))
		}
	}
	return c, nil
}

// Close stops the cache's loops.
func (c *Cache[T]) Close() error {
	c.cancel()
	c.unwatch()
	c.wg.Wait()
	c.unhold()
	return nil
}

// Ready reports whether the root document is installed; until it is every
// read answers not-ready. It is the /readyz check of a read replica.
func (c *Cache[T]) Ready() error {
	if c.ready.Load() {
		return nil
	}
	return c.notReady()
}

func (c *Cache[T]) notReady() error {
	return varplane.Errorf(varplane.CodeNotReady, "instance: the root document %q is not installed yet", c.opts.Root)
}

// errNoHead answers a scope the store says has no document.
func errNoHead(scope varplane.Scope) error {
	return varplane.Errorf(varplane.CodeNoHead, "scope %q has no active document", scope)
}

// Get returns the installed document of scope. An installed document is
// answered from memory without locks or allocation. A scope not installed
// is loaded from the store (or its fresh local copy), waiting at most
// ColdLoadTimeout. Errors: not-ready before the root exists, no-head when
// the store says scope has no document, document-failed, document-stale
// (a fail-closed scope whose document or the root lags), store-unavailable.
//
// While a rollout of scope runs and its step selects this instance, Get
// answers the rollout's revision as generation Base+1 (docs/rollouts.md);
// GetFor decides by an entity key instead.
func (c *Cache[T]) Get(ctx context.Context, scope varplane.Scope) (*Doc[T], error) {
	d, err := c.getHead(ctx, scope, true)
	if err != nil {
		return nil, err
	}
	return c.serving(d), nil
}

// getHead is Get without rollouts: the installed head; judge false leaves
// the fail-closed rule to the caller, which judges a whole request (view).
func (c *Cache[T]) getHead(ctx context.Context, scope varplane.Scope, judge bool) (*Doc[T], error) {
	if v, ok := c.entries.Load(scope); ok {
		e := v
		if !c.ready.Load() {
			return nil, c.notReady()
		}
		if ep := c.epoch.Load(); e.used.Load() != ep {
			e.used.Store(ep)
		}
		d := e.doc.Load()
		if d.err != nil {
			return nil, d.err
		}
		if judge && e.closed {
			if err := c.checkLag(scope); err != nil {
				return nil, err
			}
		}
		if d.Head == nil {
			return nil, errNoHead(scope)
		}
		return d, nil
	}
	if !c.ready.Load() {
		// A read before the root exists answers not-ready, but still
		// gives the root a chance to arrive.
		if _, err := c.loadRoot(ctx); err != nil {
			return nil, err
		}
	}
	return c.cold(ctx, scope, judge)
}

// Snapshot returns one immutable document per scope, all or nothing: what
// a request that reads several scopes holds for its whole duration. A
// scope named twice is the same document. When any scope is under a
// fail-closed prefix, the request is judged by the oldest document it
// reads and the root: document-stale if that one lags past
// FailClosedMaxLag. A scope with no document fails it with no-head.
func (c *Cache[T]) Snapshot(ctx context.Context, scopes ...varplane.Scope) ([]*Doc[T], error) {
	docs, err := c.view(ctx, scopes, true)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		if d.Head == nil {
			return nil, errNoHead(d.Scope)
		}
	}
	return docs, nil
}

// view is Snapshot with a scope that has no document answered as a Doc
// without a Head; with serve false, a scope under a rollout that selects
// this instance answers its head, not the rollout's revision.
func (c *Cache[T]) view(ctx context.Context, scopes []varplane.Scope, serve bool) ([]*Doc[T], error) {
	out := make([]*Doc[T], len(scopes))
	held := make(map[varplane.Scope]*Doc[T], len(scopes))
	judge := false
	for i, sc := range scopes {
		if d, ok := held[sc]; ok {
			out[i] = d
			continue
		}
		d, err := c.getHead(ctx, sc, false)
		switch {
		case err == nil && serve:
			d = c.serving(d)
		case err == nil:
		case varplane.ErrorCode(err) == varplane.CodeNoHead:
			d = &Doc[T]{Scope: sc, Generation: c.absentGeneration(sc)}
		default:
			return nil, err
		}
		held[sc], out[i] = d, d
		judge = judge || c.failClosed(sc)
	}
	if judge {
		if err := c.checkLag(scopes...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkLag answers document-stale when the oldest of the documents of
// scopes and the root lags past FailClosedMaxLag. A scope not installed
// (absent, or dropped since it was read) has nothing that lags.
func (c *Cache[T]) checkLag(scopes ...varplane.Scope) error {
	now := c.clock.Now().UnixNano()
	var lag int64
	oldest := c.opts.Root
	if r := c.root.Load(); r != nil {
		lag = now - r.confirmed.Load()
	}
	for _, sc := range scopes {
		if e, ok := c.entries.Load(sc); ok {
			if l := now - e.confirmed.Load(); l > lag {
				lag, oldest = l, sc
			}
		}
	}
	if lag > int64(c.opts.FailClosedMaxLag) {
		return varplane.Errorf(varplane.CodeDocumentStale, "instance: a request that reads a fail-closed scope is held to a lag of %v, and the oldest document it reads (scope %q) was last confirmed %v ago", c.opts.FailClosedMaxLag, oldest, time.Duration(lag).Round(time.Second))
	}
	return nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// loadRoot loads the root (once at a time) and sets readiness.
func (c *Cache[T]) loadRoot(ctx context.Context) (*Doc[T], error) {
	d, err := c.cold(ctx, c.opts.Root, true)
	if err != nil {
		if varplane.ErrorCode(err) == varplane.CodeNoHead {
			return nil, c.notReady()
		}
		return nil, err
	}
	return d, nil
}

// Follow makes the store underneath (a varplane.Holder) follow the scopes
// fn reports too, though the cache does not hold them: their commits reach
// the store's Watch listeners (a read replica's live streams, with
// push.Hub.Watching). The cache installs none of them, and drops each from
// the store's table once it is delivered, so they cost no memory between
// commits.
func (c *Cache[T]) Follow(fn func(varplane.Scope) bool) { c.follow.Store(&fn) }

// wants reports whether the store must follow scope (its varplane.Holder):
// the cache holds it, or a Follow function reports it.
func (c *Cache[T]) wants(scope varplane.Scope) bool {
	if c.holds(scope) {
		return true
	}
	f := c.follow.Load()
	return f != nil && (*f)(scope)
}

// holds reports whether the cache needs scope: the root, a scope
// installed, being loaded, or remembered as absent (whose first document
// the store must announce).
func (c *Cache[T]) holds(scope varplane.Scope) bool {
	if scope == c.opts.Root || scope == varplane.RolloutScope {
		return true
	}
	if _, ok := c.entries.Load(scope); ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.loads[scope]; ok {
		return true
	}
	_, ok := c.familyOf(scope).absent[scope]
	return ok
}

// familyOf returns the family of scope.
func (c *Cache[T]) familyOf(scope varplane.Scope) *family[T] {
	for _, f := range c.families {
		if scope == f.prefix || scope.IsDescendantOf(f.prefix) {
			return f
		}
	}
	return c.def
}

func (c *Cache[T]) failClosed(scope varplane.Scope) bool {
	return slices.ContainsFunc(c.opts.FailClosed, func(p varplane.Scope) bool {
		return scope == p || scope.IsDescendantOf(p)
	})
}

// cold loads scope, sharing one load per scope among concurrent readers.
func (c *Cache[T]) cold(ctx context.Context, scope varplane.Scope, judge bool) (*Doc[T], error) {
	if !scope.Valid() {
		_, err := varplane.ParseScope(string(scope))
		return nil, err
	}
	c.mu.Lock()
	if _, ok := c.entries.Load(scope); ok {
		c.mu.Unlock()
		if scope == c.opts.Root || c.ready.Load() {
			return c.getHead(ctx, scope, judge)
		}
		return nil, c.notReady()
	}
	if f := c.familyOf(scope); f != nil {
		if _, ok := f.absent[scope]; ok {
			c.mu.Unlock()
			c.stats.absentHits.Add(1)
			if !c.ready.Load() {
				return nil, c.notReady()
			}
			return nil, errNoHead(scope)
		}
	}
	l, ok := c.loads[scope]
	if !ok {
		l = &load[T]{done: make(chan struct{})}
		c.loads[scope] = l
		c.wg.Add(1)
		go c.runLoad(scope, l)
	}
	c.mu.Unlock()
	timer := c.clock.After(c.opts.ColdLoadTimeout)
	select {
	case <-l.done:
	case <-timer:
		c.stats.coldTimeouts.Add(1)
		return nil, varplane.Errorf(varplane.CodeStoreUnavailable, "instance: the cold load of scope %q did not finish within %v; the next read retries", scope, c.opts.ColdLoadTimeout)
	case <-ctx.Done():
		return nil, varplane.Unavailable(ctx.Err())
	}
	if l.err != nil {
		return nil, l.err
	}
	if scope != c.opts.Root && !c.ready.Load() {
		return nil, c.notReady()
	}
	if l.doc.err != nil {
		return nil, l.doc.err
	}
	if l.doc.Head == nil {
		return nil, errNoHead(scope)
	}
	return l.doc, nil
}

// runLoad reads scope from its local copy (when fresh) or the store, and
// installs it. A failed read installs nothing.
func (c *Cache[T]) runLoad(scope varplane.Scope, l *load[T]) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		delete(c.loads, scope)
		again := l.again
		c.mu.Unlock()
		close(l.done)
		if again {
			c.reread(scope)
		}
	}()
	c.stats.coldLoads.Add(1)
	if c.local != nil {
		rec, at, err := c.local.read(scope)
		if err != nil && !errors.Is(err, errNoLocal) {
			c.stats.localRefused.Add(1)
			c.log.Error("instance: the local copy of scope "+string(scope)+" is ignored; loading from the store",
				"scope", string(scope), "err", err)
		}
		if err == nil {
			age := c.clock.Now().Sub(at)
			if age >= 0 && age <= c.opts.LocalMaxAge {
				ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
				d := c.decode(ctx, scope, rec.gen, rec.head, true)
				cancel()
				// It counts as LocalMaxAge old until the store confirms it.
				l.doc = c.install(scope, d, c.clock.Now().Add(-c.opts.LocalMaxAge))
				c.stats.localLoads.Add(1)
				c.wg.Add(1)
				go func() {
					defer c.wg.Done()
					c.refresh(scope)
				}()
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
	defer cancel()
	st, err := c.store.State(ctx, scope)
	if err != nil {
		c.stats.readErrors.Add(1)
		if varplane.ErrorCode(err) == varplane.CodeDocumentFailed {
			// The store vouches for the failure (a vanished or undecodable
			// head): install it failed, so reads answer it without a
			// round trip and revalidation notices its return.
			l.doc = c.install(scope, &Doc[T]{Scope: scope, err: err}, c.clock.Now())
			return
		}
		l.err = err
		return
	}
	if st.Head == nil {
		l.doc = &Doc[T]{Scope: scope, Generation: st.Generation}
		c.remember(scope, st.Generation)
		return
	}
	l.doc = c.install(scope, c.decode(ctx, scope, st.Generation, st.Head, false), c.clock.Now())
}

// decode builds the Doc of head; a refusal makes a failed Doc.
func (c *Cache[T]) decode(ctx context.Context, scope varplane.Scope, gen varplane.Generation, head *varplane.Head, local bool) *Doc[T] {
	rec := &varplane.RevisionRecord{
		Scope: scope, Revision: head.Revision, Document: head.Document,
		SchemaID: head.SchemaID, SchemaVersion: head.SchemaVersion, Actor: head.Actor,
	}
	v, err := c.opts.Decode(ctx, rec)
	if err != nil {
		c.stats.decodeErrors.Add(1)
		c.log.Error("instance: the document cannot be decoded; failing closed until a decodable revision is published",
			"scope", string(scope), "revision", string(head.Revision), "generation", uint64(gen), "err", err)
		return &Doc[T]{Scope: scope, Generation: gen, Head: head, Local: local, err: &varplane.Error{
			Code:    varplane.CodeDocumentFailed,
			Message: fmt.Sprintf("the document of scope %q (revision %s) cannot be decoded", scope, head.Revision),
			Err:     err,
		}}
	}
	return &Doc[T]{Scope: scope, Generation: gen, Head: head, Value: v, Local: local}
}

// install puts d in place for scope, confirmed at at, and bounds the
// family. It returns the document now installed.
func (c *Cache[T]) install(scope varplane.Scope, d *Doc[T], at time.Time) *Doc[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.entries.Load(scope); ok {
		e := v
		cur := e.doc.Load()
		if d.err == nil && cur.err == nil && d.Generation < cur.Generation && !cur.Local {
			c.stats.regressions.Add(1)
			c.log.Error(fmt.Sprintf("instance: document of scope %s regressed from generation %d (revision %s) to generation %d (revision %s); installing what the store holds: publish the lost change again",
				scope, cur.Generation, revOf(cur), d.Generation, revOf(d)),
				"scope", string(scope))
		}
		e.doc.Store(d)
		e.confirmed.Store(at.UnixNano())
		c.stats.installs.Add(1)
		c.writeLocal(scope, d, at)
		return d
	}
	f := c.familyOf(scope)
	delete(f.absent, scope)
	e := &entry[T]{fam: f, pinned: scope == c.opts.Root, closed: c.failClosed(scope)}
	e.doc.Store(d)
	e.confirmed.Store(at.UnixNano())
	e.used.Store(c.epoch.Add(1))
	c.entries.Store(scope, e)
	if e.pinned {
		c.root.Store(e)
		if d.Head != nil || d.err != nil {
			c.ready.Store(true)
		}
	} else {
		f.members[scope] = e
		c.bound(f)
	}
	c.stats.installs.Add(1)
	c.writeLocal(scope, d, at)
	return d
}

func revOf[T any](d *Doc[T]) string {
	if d.Head == nil {
		return "none"
	}
	return string(d.Head.Revision)
}

// bound drops the least recently used members of f beyond its bound: a
// tenth of the bound at a time, so that one scan pays for many installs.
func (c *Cache[T]) bound(f *family[T]) {
	if len(f.members) <= f.max {
		return
	}
	type cand struct {
		scope varplane.Scope
		used  uint64
	}
	cs := make([]cand, 0, len(f.members))
	for sc, e := range f.members {
		cs = append(cs, cand{sc, e.used.Load()})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].used < cs[j].used })
	drop := len(f.members) - f.max + f.max/10
	if drop > len(cs) {
		drop = len(cs)
	}
	forget, _ := c.store.(varplane.Forgetter)
	for _, x := range cs[:drop] {
		delete(f.members, x.scope)
		c.entries.Delete(x.scope)
		c.stats.evictions.Add(1)
		if forget != nil {
			forget.Forget(x.scope)
		}
	}
}

// remember records that the store said scope has no document: at most
// MaxAbsentPerFamily per family, oldest first out; it never touches the
// installed documents. Only the store's answer lands here.
func (c *Cache[T]) remember(scope varplane.Scope, gen varplane.Generation) {
	if scope == c.opts.Root {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.familyOf(scope)
	if _, ok := f.absent[scope]; ok {
		return
	}
	if len(f.ring) >= MaxAbsentPerFamily {
		old := f.ring[0]
		f.ring = f.ring[1:]
		delete(f.absent, old)
	}
	f.ring = append(f.ring, scope)
	f.absent[scope] = gen
	if forget, ok := c.store.(varplane.Forgetter); ok {
		forget.Forget(scope)
	}
}

// absentGeneration is the generation of a scope remembered as absent.
func (c *Cache[T]) absentGeneration(scope varplane.Scope) varplane.Generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.familyOf(scope).absent[scope]
}

// forgetAbsent drops scope from the absent list (a document arrived).
func (c *Cache[T]) forgetAbsent(scope varplane.Scope) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgetAbsentLocked(scope)
}

// forgetAbsentLocked is forgetAbsent with c.mu held.
func (c *Cache[T]) forgetAbsentLocked(scope varplane.Scope) bool {
	f := c.familyOf(scope)
	if _, ok := f.absent[scope]; !ok {
		return false
	}
	delete(f.absent, scope)
	if i := slices.Index(f.ring, scope); i >= 0 {
		f.ring = slices.Delete(f.ring, i, i+1)
	}
	return true
}

// installed lists the installed scopes, sorted.
func (c *Cache[T]) installed() []varplane.Scope {
	var out []varplane.Scope
	c.entries.Range(func(k varplane.Scope, _ *entry[T]) bool {
		out = append(out, k)
		return true
	})
	slices.SortFunc(out, func(a, b varplane.Scope) int { return strings.Compare(string(a), string(b)) })
	return out
}
