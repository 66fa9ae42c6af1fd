package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/backoff"
	"github.com/varplane/varplane/internal/replica"
)

// subscribeLoop keeps the subscriber client subscribed to the invalidation
// channel. rueidis reconnects and resubscribes a Receive by itself when the
// connection breaks; every confirmed subscription after the first asks for
// a revalidation pass, which catches what was published while it was down.
func (s *Store) subscribeLoop() {
	defer s.wg.Done()
	var first sync.Once
	ctx := rueidis.WithOnSubscriptionHook(s.ctx, func(sub rueidis.PubSubSubscription) {
		if sub.Kind != "subscribe" {
			return
		}
		s.stats.subscriptions.Add(1)
		again := true
		first.Do(func() { again = false; close(s.subOnce) })
		if again {
			s.log.Info("redis store: resubscribed to invalidations; revalidating", "channel", sub.Channel)
			s.askPass()
		}
	})
	retry := backoff.Retry{Min: reconnectMin, Max: reconnectMax}
	for s.ctx.Err() == nil {
		err := s.sub.Receive(ctx, s.sub.B().Subscribe().Channel(s.keys.channel()).Build(), func(m rueidis.PubSubMessage) {
			s.stats.invalidations.Add(1)
			if !s.follow.Offer(m.Message) {
				s.stats.invalDropped.Add(1)
			}
		})
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("redis store: invalidation subscription failed; installed heads are served and revalidated until it is back", "err", err)
		if !retry.Wait(s.ctx) {
			return
		}
	}
}

// askPass requests a revalidation pass without blocking.
func (s *Store) askPass() { s.follow.AskPass() }

// invalidationLoop handles invalidation messages one at a time, in the order
// Redis published them.
func (s *Store) invalidationLoop() {
	defer s.wg.Done()
	s.follow.Serve(s.ctx, s.handleInvalidation)
}

// handleInvalidation reads from Redis every scope a message names whose
// installed head is not already the one the message announces (an own
// commit's echo is skipped), installs them and delivers the commit.
func (s *Store) handleInvalidation(payload string) {
	inv, ok := replica.ParseInvalidation(payload)
	if !ok || inv.All {
		s.log.Warn("redis store: malformed invalidation message ignored; revalidation will catch up")
		s.askPass()
		return
	}
	current := func(_ int, l replica.Line) bool {
		if !s.entries.Follows(l.Scope) {
			return true // a scope nobody here holds: nothing to install
		}
		return s.entries.ConfirmIf(l.Scope, func(sn *snapshot) bool { return sn.v == l.Version && sn.g == l.Generation })
	}
	read, err := s.follow.Handle(s.ctx, inv, current, func(ctx context.Context, _ varplane.EventKind, scopes ...varplane.Scope) error {
		return s.refresh(ctx, scopes...) // what changed is delivered, whatever the kind announced
	})
	s.stats.invalidationReads.Add(uint64(len(read)))
	if err != nil {
		s.log.Warn("redis store: reading an invalidated head failed; the next revalidation pass retries", "scope", string(read[0]), "err", err)
	}
}

// revalidateLoop runs one pass per interval (or sooner when asked), never two
// at once: a pass that outlasts the interval is followed by the next one
// right away, not by an extra one in parallel. The eviction policy is checked
// again after each pass.
func (s *Store) revalidateLoop() {
	defer s.wg.Done()
	lastEviction := time.Now()
	s.follow.RevalidateLoop(s.ctx, s.opts.RevalidateInterval, func() {
		s.revalidatePass()
		if time.Since(lastEviction) >= s.opts.RevalidateInterval {
			lastEviction = time.Now()
			_ = s.checkEviction(s.ctx, false)
		}
	})
}

// revalidatePass confirms every installed head with a conditional read,
// RevalidateConcurrency at a time, installs what changed, and logs lags.
func (s *Store) revalidatePass() {
	start := time.Now()
	s.stats.passes.Add(1)
	s.follow.RetryPending(func(sc varplane.Scope) error { return s.refresh(s.ctx, sc) })
	sem := make(chan struct{}, s.opts.RevalidateConcurrency)
	var wg sync.WaitGroup
	for _, sc := range s.installedScopes() {
		if s.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.confirm(sc)
		}()
	}
	wg.Wait()
	s.stats.lastPassNanos.Store(int64(time.Since(start)))
	s.logLags()
}

// confirm revalidates one installed head, or one scope remembered as
// absent: an unchanged head costs one read-only script call that transfers
// nothing, an absent scope one that answers its empty fields; a changed one
// (the first commit of an absent scope among them) is read, installed and
// delivered.
func (s *Store) confirm(scope varplane.Scope) {
	e := s.entry(scope)
	if e == nil {
		return
	}
	seq := e.Seq.Load()
	cur := e.Snap.Load()
	ctx, cancel := s.cmdCtx(s.ctx)
	defer cancel()
	res := confirmScript.Exec(ctx, s.client, []string{s.keys.head(scope), s.keys.floor(scope)}, []string{cur.confirmArg()})
	if n, err := res.AsInt64(); err == nil && n == 0 {
		s.stats.confirms.Add(1)
		e.confirmed.Store(time.Now().UnixNano())
		return
	}
	arr, err := res.ToArray()
	if err != nil {
		s.stats.confirmErrs.Add(1)
		if s.ctx.Err() == nil {
			if err := s.readFailure("head", scope, err); varplane.ErrorCode(err) == varplane.CodeDocumentFailed {
				s.installFailed(scope, cur, seq, err)
			}
		}
		return
	}
	h, err := parseHead(arr)
	if err != nil {
		s.stats.confirmErrs.Add(1)
		s.installFailed(scope, cur, seq, s.decodeFailure("head", scope, err))
		return
	}
	snap, err := s.snapshotFrom(ctx, scope, h, cur.rec)
	if err != nil {
		s.stats.confirmErrs.Add(1)
		if varplane.ErrorCode(err) == varplane.CodeDocumentFailed {
			s.installFailed(scope, cur, seq, err)
		}
		return
	}
	if snap.same(cur) {
		// A scope remembered as absent is still absent: its plain read
		// (it has no c to compare) found nothing, which confirms it.
		s.stats.confirms.Add(1)
		e.confirmed.Store(time.Now().UnixNano())
		return
	}
	s.stats.confirmChanged.Add(1)
	s.installAndDeliver([]installReq{{scope: scope, snap: snap, seq: seq}})
}

// installFailed replaces an installed head whose value in Redis can no
// longer be decoded by a failed snapshot: reads of the scope fail closed
// until Redis holds a readable head again (the next pass retries; the value
// itself is left in Redis). An outage never does this: it keeps the head.
func (s *Store) installFailed(scope varplane.Scope, cur *snapshot, seq uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries.ReplaceLocked(scope, seq, &snapshot{state: cur.state, err: err})
}

// logLags logs heads not confirmed for longer than LagWarn (WARN) or
// LagEscalate (ERROR), at most once a minute per scope.
func (s *Store) logLags() {
	s.entries.LogLags(s.opts.LagWarn, s.opts.LagEscalate, func(scope varplane.Scope, snap *snapshot, lag time.Duration, escalated bool) {
		attrs := []any{"scope", scope.String(), "generation", snap.g, "revision", snap.r, "lag", lag.Round(time.Millisecond).String()}
		if snap.absent() {
			attrs = append(attrs, "absent", true) // remembered as having nothing in Redis
		}
		if escalated {
			s.log.Error("redis store: installed head is stale: not confirmed by Redis", attrs...)
		} else {
			s.log.Warn("redis store: installed head has not been confirmed by Redis", attrs...)
		}
	})
}

// checkEviction reads maxmemory-policy on every node. At startup under
// "fail", a node that may evict, or whose policy cannot be read, fails Open;
// under "warn" an allkeys-* node still fails it.
// Later checks only update EvictionPolicyOK and log changes.
func (s *Store) checkEviction(ctx context.Context, startup bool) error {
	s.stats.evictionChecks.Add(1)
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var bad, unknown []string
	allkeys := false
	for _, a := range addrs {
		policy, err := s.readPolicy(ctx, nodes[a])
		switch {
		case err != nil:
			unknown = append(unknown, fmt.Sprintf("%s: maxmemory-policy cannot be read (%v)", a, err))
		case policy != "noeviction":
			bad = append(bad, fmt.Sprintf("%s: maxmemory-policy is %s, not noeviction", a, policy))
			allkeys = allkeys || strings.HasPrefix(policy, "allkeys-")
		}
	}
	ok, detail := true, "noeviction"
	switch {
	case len(bad) > 0:
		ok, detail = false, strings.Join(append(bad, unknown...), "; ")
	case len(unknown) > 0:
		ok = s.opts.EvictionCheck == EvictionCheckWarn
		detail = "unknown: " + strings.Join(unknown, "; ")
	}
	was := s.evOK.Load()
	prev := s.evDetail.Load()
	s.evOK.Store(ok)
	s.evDetail.Store(&detail)
	if startup {
		if len(bad) > 0 || len(unknown) > 0 {
			// An allkeys-* node may evict any document, which a later
			// cold load would read as absent: warn never accepts it.
			if s.opts.EvictionCheck == EvictionCheckFail || allkeys {
				return &varplane.Error{
					Code:    varplane.CodeStoreUnavailable,
					Message: "redis must run with maxmemory-policy noeviction (it is the store of record); set the eviction check to warn only for a managed Redis that denies INFO",
					Err:     errors.New(detail),
				}
			}
			s.log.Warn("!!! redis store: eviction policy not confirmed as noeviction; a document Redis evicts is lost", "detail", detail)
		}
		return nil
	}
	if prev != nil && (was != ok || *prev != detail) {
		if ok {
			s.log.Info("redis store: eviction policy check", "detail", detail)
		} else {
			s.log.Error("redis store: a node may evict keys; documents can be lost", "detail", detail)
		}
	}
	return nil
}

// readPolicy reads one node's maxmemory-policy from INFO memory, or from
// CONFIG GET when INFO does not show it.
func (s *Store) readPolicy(ctx context.Context, c rueidis.Client) (string, error) {
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
				return v, nil
			}
		}
	}
	m, cerr := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	if cerr != nil {
		if err != nil {
			return "", fmt.Errorf("INFO: %v; CONFIG GET: %v", err, cerr)
		}
		return "", fmt.Errorf("INFO has no maxmemory_policy; CONFIG GET: %v", cerr)
	}
	if v, ok := m["maxmemory-policy"]; ok {
		return v, nil
	}
	return "", errors.New("neither INFO nor CONFIG GET report maxmemory-policy")
}
