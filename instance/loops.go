package instance

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
)

// invalidationLoop installs what the store's Watch delivers, one commit at a
// time, for the scopes the cache holds or remembers as absent, and for the
// root. The head comes from the store (never from the local copy).
func (c *Cache[T]) invalidationLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case changes := <-c.work:
			for _, ch := range changes {
				c.apply(ch)
			}
		}
	}
}

// apply installs one change the store announced.
func (c *Cache[T]) apply(ch varplane.ScopeChange) {
	if ch.Scope == varplane.RolloutScope {
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
		defer cancel()
		c.syncRollouts(ctx)
		return
	}
	_, held := c.entries.Load(ch.Scope)
	wasAbsent := c.forgetAbsent(ch.Scope)
	if !held && !wasAbsent && ch.Scope != c.opts.Root {
		var loading bool
		if loading, held = c.overtakes(ch.Scope); loading {
			return // the load reads again once it has installed
		}
	}
	if !held && !wasAbsent && ch.Scope != c.opts.Root {
		// The store read it for a cache that has since dropped it, or
		// for a Follow function (and delivered it): its copy must not
		// outlive the cache's.
		if f, ok := c.store.(varplane.Forgetter); ok && !c.holds(ch.Scope) {
			f.Forget(ch.Scope)
		}
		return
	}
	c.stats.invalidations.Add(1)
	if ch.Head == nil {
		c.installAbsent(ch.Scope, ch.Generation)
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
	defer cancel()
	c.install(ch.Scope, c.decode(ctx, ch.Scope, ch.Generation, ch.Head, false), c.clock.Now())
}

// overtakes marks a cold load of scope in progress, whose read a change
// the store delivered may have overtaken, to read again once it has
// installed (reread), and reports whether there was one; without one, it
// reports whether a load that ended since the caller looked installed
// scope or remembered it absent (forgotten here), so that the change is
// applied over what it found.
func (c *Cache[T]) overtakes(scope varplane.Scope) (loading, found bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.loads[scope]; l != nil {
		l.again = true
		return true, false
	}
	_, found = c.entries.Load(scope)
	return false, found || c.forgetAbsentLocked(scope)
}

// reread reads scope again after a cold load that a delivered change
// overtook, and installs what the store holds now, as a revalidation
// pass would: the installed document is confirmed or replaced, and a
// scope remembered as absent that has a head now installs it.
func (c *Cache[T]) reread(scope varplane.Scope) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
	defer cancel()
	st, err := c.store.State(ctx, scope)
	if _, ok := c.entries.Load(scope); ok {
		c.confirmFrom(ctx, scope, st, err)
		return
	}
	if err != nil || st.Head == nil || !c.forgetAbsent(scope) {
		return // still absent, or dropped meanwhile; a failure is the next pass's
	}
	c.stats.invalidations.Add(1)
	c.install(scope, c.decode(ctx, scope, st.Generation, st.Head, false), c.clock.Now())
}

// installAbsent records that the store now has no document for scope (a
// deactivation): an installed document gives way to an absent one, which
// answers no-head; the root stays installed (and the cache ready).
func (c *Cache[T]) installAbsent(scope varplane.Scope, gen varplane.Generation) {
	if scope == c.opts.Root {
		c.install(scope, &Doc[T]{Scope: scope, Generation: gen}, c.clock.Now())
		return
	}
	c.mu.Lock()
	if v, ok := c.entries.Load(scope); ok {
		e := v
		delete(e.fam.members, scope)
		c.entries.Delete(scope)
	}
	c.mu.Unlock()
	c.remember(scope, gen)
}

// refresh reads scope from the store and installs what it holds. A failure
// keeps what is installed (its lag grows), except a failure the store
// vouches for (document-failed), which is installed.
func (c *Cache[T]) refresh(scope varplane.Scope) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
	defer cancel()
	c.pass.reads.Add(1)
	st, err := c.store.State(ctx, scope)
	c.pass.reads.Add(-1)
	c.confirmFrom(ctx, scope, st, err)
}

// confirmFrom installs or confirms scope from a store answer.
func (c *Cache[T]) confirmFrom(ctx context.Context, scope varplane.Scope, st *varplane.ScopeState, err error) {
	v, ok := c.entries.Load(scope)
	if !ok {
		// Dropped while the store read it: the read may have installed it
		// in the store's own copy again, which the bound must not miss.
		if f, ok := c.store.(varplane.Forgetter); ok {
			f.Forget(scope)
		}
		return
	}
	e := v
	cur := e.doc.Load()
	if err != nil {
		c.stats.confirmErrors.Add(1)
		if varplane.ErrorCode(err) == varplane.CodeDocumentFailed {
			c.install(scope, &Doc[T]{Scope: scope, Generation: cur.Generation, err: err}, c.clock.Now())
		}
		return
	}
	at := c.clock.Now()
	if cf, ok := c.store.(varplane.Confirmer); ok {
		if t, ok := cf.ConfirmedAt(scope); ok && t.Before(at) {
			at = t
		}
	}
	switch {
	case st.Head == nil && cur.Head != nil && st.Generation == 0:
		// The store has no trace of a document the cache installed: it
		// disappeared. Fail closed until one returns (logged once: the
		// failed document keeps its head, so later passes land here too).
		if cur.err != nil {
			break
		}
		c.stats.disappeared.Add(1)
		c.log.Error("instance: document of scope "+string(scope)+" disappeared from the store; failing closed",
			"scope", string(scope), "generation", uint64(cur.Generation), "revision", revOf(cur))
		c.install(scope, &Doc[T]{Scope: scope, Generation: cur.Generation, Head: cur.Head, err: &varplane.Error{
			Code:    varplane.CodeDocumentFailed,
			Message: "the document of scope " + string(scope) + " disappeared from the store after it was seen",
		}}, at)
	case st.Head == nil && cur.Head == nil && cur.err == nil:
		e.confirmed.Store(at.UnixNano())
	case st.Head == nil:
		c.installAbsent(scope, st.Generation)
	case cur.err == nil && !cur.Local && cur.Head != nil && cur.Generation == st.Generation && cur.Head.Revision == st.Head.Revision:
		e.confirmed.Store(at.UnixNano())
		c.stats.confirms.Add(1)
	default:
		c.stats.changed.Add(1)
		c.installDecoded(ctx, scope, st)
	}
	c.pass.progress.Store(c.clock.Now().UnixNano())
}

// installDecoded decodes st's head and installs it. A pass waits for the
// decode at most StallTimeout: a longer one confirms its document when it
// ends, and the pass goes on to the next.
func (c *Cache[T]) installDecoded(ctx context.Context, scope varplane.Scope, st *varplane.ScopeState) {
	done := make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(done)
		// The decode outlives the pass's context: it runs to its end.
		dctx, cancel := context.WithTimeout(c.ctx, c.opts.StoreReadTimeout)
		defer cancel()
		c.install(scope, c.decode(dctx, scope, st.Generation, st.Head, false), c.clock.Now())
	}()
	select {
	case <-done:
	case <-c.clock.After(StallTimeout):
		c.stats.slowDecodes.Add(1)
	case <-ctx.Done():
	}
}

// passState is what the revalidation loop knows of the pass in flight.
type passState struct {
	reads    atomic.Int64 // store reads in flight
	progress atomic.Int64 // clock nanos of the pass's last confirmation
}

// revalidateLoop starts a pass every RevalidateInterval, one at a time: a
// pass that outlasts the interval is followed at once by the next; a pass
// that confirmed nothing for StallTimeout and has no read in flight is
// abandoned at the next tick and a new one starts.
func (c *Cache[T]) revalidateLoop(t Ticker) {
	defer c.wg.Done()
	defer t.Stop()
	var (
		done    chan struct{} // the pass in flight's; nil when none
		cancel  context.CancelFunc
		overrun bool
	)
	start := func() {
		overrun = false
		var ctx context.Context
		ctx, cancel = context.WithCancel(c.ctx)
		c.pass.progress.Store(c.clock.Now().UnixNano())
		mine := make(chan struct{})
		done = mine
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer close(mine)
			c.runPass(ctx)
		}()
	}
	for {
		select {
		case <-c.ctx.Done():
			if cancel != nil {
				cancel()
			}
			return
		case <-done:
			done = nil
			cancel()
			if overrun {
				start()
			}
		case <-t.C():
			if done == nil {
				start()
				continue
			}
			if c.clock.Now().UnixNano()-c.pass.progress.Load() >= int64(StallTimeout) && c.pass.reads.Load() == 0 {
				c.stats.abandoned.Add(1)
				c.log.Warn("instance: a revalidation pass confirmed nothing for 30s and has no read in flight; abandoning it")
				cancel()
				start()
				continue
			}
			overrun = true
		}
	}
}

// runPass confirms every installed document with the store,
// RevalidateConcurrency at a time, then logs lags.
func (c *Cache[T]) runPass(ctx context.Context) {
	began := c.clock.Now()
	c.stats.passes.Add(1)
	sem := make(chan struct{}, c.opts.RevalidateConcurrency)
	var wg sync.WaitGroup
	for _, sc := range c.installed() {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, ok := c.entries.Load(sc); !ok {
				return // dropped since the pass listed it
			}
			c.pass.reads.Add(1)
			st, err := c.store.State(ctx, sc)
			c.pass.reads.Add(-1)
			if ctx.Err() != nil {
				return
			}
			c.confirmFrom(ctx, sc, st, err)
		}()
	}
	wg.Wait()
	c.stats.lastPassNanos.Store(int64(c.clock.Now().Sub(began)))
	c.syncRollouts(ctx)
	c.logLags()
}

// logLags logs documents not confirmed for LagWarn (WARN) or LagEscalate
// (ERROR), at most once a minute per document, and records the lags.
func (c *Cache[T]) logLags() {
	now := c.clock.Now().UnixNano()
	var hist [len(LagBuckets) + 1]uint64
	var maxLag int64
	c.entries.Range(func(k varplane.Scope, v *entry[T]) bool {
		e := v
		lag := now - e.confirmed.Load()
		maxLag = max64(maxLag, lag)
		hist[bucketOf(time.Duration(lag))]++
		if time.Duration(lag) < c.opts.LagWarn || now-e.lagLogged.Load() < int64(time.Minute) {
			return true
		}
		e.lagLogged.Store(now)
		d := e.doc.Load()
		l := time.Duration(lag).Round(time.Second)
		name := string(k)
		if time.Duration(lag) >= c.opts.LagEscalate {
			c.log.Error("Document of scope "+name+" revision "+revOf(d)+" is stale: not confirmed for "+l.String()+".",
				"scope", name, "revision", revOf(d), "lag", l.String())
		} else {
			c.log.Warn("Document of scope "+name+" revision "+revOf(d)+" has not been confirmed for "+l.String()+".",
				"scope", name, "revision", revOf(d), "lag", l.String())
		}
		return true
	})
	c.stats.maxLag.Store(maxLag)
	for i := range hist {
		c.stats.lagHist[i].Store(hist[i])
	}
}

// LagBuckets are the upper bounds of the lag histogram in Stats.
var LagBuckets = [...]time.Duration{time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute}

func bucketOf(d time.Duration) int {
	for i, b := range LagBuckets {
		if d <= b {
			return i
		}
	}
	return len(LagBuckets)
}
