// Package push fans the engine's commits out to live subscribers: a bounded
// hub (Hub), and the Server-Sent Events form of its updates (sse.go). It
// serves nothing itself: httpapi's watch route streams a subscription as
// Server-Sent Events, and package rpc as Connect and gRPC messages.
//
// Concurrency contract: the Hub hears every commit on the committing
// goroutine and only ever appends to a per-subscriber queue under that
// subscriber's own short mutex, then signals it without blocking, so a slow,
// stuck or malicious subscriber can never delay a commit or another
// subscriber. A queue keeps at most one pending update per scope (the newest
// replaces the older one: coalescing); a queue that grows past a bound is
// dropped and replaced by a fresh snapshot (resync); a subscriber that leaves
// its queue undrained for too long is disconnected with a reason. Hub methods
// are safe for concurrent use; a Subscription is consumed by one goroutine.
//
// Delivery contract: for every scope it matches, a subscriber receives the
// scope's final state, and never a generation older than or equal to one it
// already holds (the generations it declared when subscribing, then those it
// was sent). Intermediate generations may be skipped when it falls behind.
package push

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// Source is what the Hub follows: the engine's commit seam and the store it
// reads snapshots from. *varplane.Engine implements it.
type Source interface {
	// OnCommit registers fn for every accepted commit, called with the store
	// already updated; fn must not block.
	OnCommit(fn func(varplane.Commit)) (unsubscribe func())
	// Store returns the store snapshots are read from.
	Store() varplane.Store
}

var _ Source = (*varplane.Engine)(nil)

// Defaults of Options.
const (
	DefaultMaxSubscribers = 10000
	DefaultMaxPending     = 1024
	DefaultStallTimeout   = 30 * time.Second
	// DefaultTokenShare is the divisor of the default per-token cap: one
	// token holds at most a tenth of MaxSubscribers (1,000 of the default
	// 10,000), so that it takes at least ten tokens to fill the server. The
	// per-connection cap has the same default.
	DefaultTokenShare = 10
	// DefaultAddrShare is the divisor of the default per-address cap: one
	// client IP address holds at most a quarter of MaxSubscribers (2,500 of
	// the default 10,000). It is wider than a token's share because every
	// client behind a proxy or a NAT shares one address.
	DefaultAddrShare = 4
	// DefaultRecheckInterval is how often every subscription's authorization
	// is asked again (Options.RecheckInterval): the default revalidation
	// interval of the shared stores, so that a token revoked or expired
	// without a commit this server hears of loses its streams as soon as
	// the store would have told it.
	DefaultRecheckInterval = 10 * time.Second
	// recheckTimeout bounds one subscription's recheck.
	recheckTimeout = 5 * time.Second
	// SubscriptionCost is the memory one live subscription may cost the
	// server, its stream included, on the dearest transport: a gRPC
	// Subscribe stream (grpc-go's goroutines and buffers, the handler's
	// goroutine, the subscription) measured 44 KiB of RSS each, 51 KiB with
	// serve's default GC headroom, over 2,048 streams
	// (cmd/varplane TestAttackStreamBudget); an SSE stream or a watch of a
	// Watch stream costs less. It is the figure the caps are sized from
	// (serve --stream-memory-bytes, docs/limits.md): the default
	// MaxSubscribers is a budget of 625 MiB.
	SubscriptionCost = 64 << 10
)

// Options configure a Hub. The zero value selects the defaults.
type Options struct {
	// MaxSubscribers caps concurrent subscriptions; Subscribe past it fails
	// with a too-many-subscribers error. Default DefaultMaxSubscribers.
	MaxSubscribers int
	// MaxSubscribersPerToken caps the concurrent subscriptions of one bearer
	// token (counted under SubscribeOptions.Owner, across every transport
	// that shares the hub); Subscribe past it fails with a
	// too-many-subscribers error while other tokens still subscribe.
	// Default MaxSubscribers/DefaultTokenShare (at least 1); negative
	// disables the cap (a fleet that shares one token across more
	// processes than that). Requests without a token (Owner "") are bounded
	// by MaxSubscribers alone: without authorization the server cannot tell
	// their callers apart.
	MaxSubscribersPerToken int
	// MaxSubscribersPerAddr caps the concurrent subscriptions of one client
	// IP address (SubscribeOptions.Addr), and MaxSubscribersPerConn those
	// of one connection (SubscribeOptions.Conn: the watches of one gRPC
	// Watch stream, the streams of one HTTP/2 connection), refused the same
	// way as the per-token cap. Defaults MaxSubscribers/DefaultAddrShare and
	// MaxSubscribersPerToken's default; negative disables the cap. A
	// subscription without an address (or connection) is not counted by it.
	MaxSubscribersPerAddr int
	MaxSubscribersPerConn int
	// RecheckInterval is how often the hub asks every subscription's
	// SubscribeOptions.Recheck again: a subscription whose token is now
	// refused (forbidden, unauthorized) ends with ErrRevoked. Default
	// DefaultRecheckInterval; negative turns the periodic pass off (commits
	// selected by RecheckOn still start one).
	RecheckInterval time.Duration
	// RecheckOn, when set, selects the scopes whose commits change who may
	// subscribe (the access control's scope): a commit to one starts a
	// recheck pass at once, off the committing goroutine, so a revocation
	// ends its token's streams as soon as the store installs it.
	RecheckOn func(varplane.Scope) bool
	// MaxPending bounds the distinct scopes waiting in one subscriber's
	// queue. Past it the queue is discarded and the subscriber is resynced
	// with a fresh snapshot of what changed. Default DefaultMaxPending.
	MaxPending int
	// StallTimeout disconnects a subscriber whose queue has held undelivered
	// updates for this long (checked when a commit arrives for it). Default
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// Logger receives disconnects; slog.Default when nil.
	Logger *slog.Logger
	// Now is the clock for stall detection; time.Now when nil.
	Now func() time.Time
}

// ErrTooManySubscribers matches (errors.Is) the error Subscribe returns when
// the hub already serves Options.MaxSubscribers subscriptions, or the
// request's token already holds Options.MaxSubscribersPerToken. Its code,
// too-many-subscribers, maps to HTTP 503 (with Retry-After) and gRPC
// Unavailable; its Limit names the cap ("max-subscribers" or
// "max-subscribers-per-token").
var ErrTooManySubscribers = &varplane.Error{Code: varplane.CodeTooManyRequests}

// The Limit of a too-many-subscribers error: which cap refused it.
const (
	LimitSubscribers         = "max-subscribers"
	LimitSubscribersPerToken = "max-subscribers-per-token"
	LimitSubscribersPerAddr  = "max-subscribers-per-addr"
	LimitSubscribersPerConn  = "max-subscribers-per-connection"
)

// Reasons a Subscription ends, reported by Subscription.Err.
var (
	// ErrSlowSubscriber: the subscriber left updates undelivered for longer
	// than Options.StallTimeout.
	ErrSlowSubscriber = errors.New("push: subscriber did not drain its queue in time")
	// ErrHubClosed: the hub was closed (the server is shutting down). It is
	// a store-unavailable *varplane.Error, so that every transport answers
	// it through its one code table (HTTP 503, gRPC Unavailable) and the
	// client retries elsewhere or later.
	ErrHubClosed = &varplane.Error{Code: varplane.CodeStoreUnavailable, Message: "the server is shutting down"}
	// ErrUnsubscribed: the subscriber closed its subscription.
	ErrUnsubscribed = errors.New("push: unsubscribed")
	// ErrRevoked: a recheck of the subscription's authorization was denied
	// (its token was revoked, expired or narrowed). The error a
	// subscription ends with matches it and also carries the authorizer's
	// denial, so that varplane.ErrorCode gives forbidden or unauthorized:
	// a client must not reconnect with the same token.
	ErrRevoked = errors.New("push: the token no longer allows this subscription")
)

// revokedError is how a subscription ends when its recheck is denied.
type revokedError struct{ cause error }

func (e *revokedError) Error() string {
	return ErrRevoked.Error() + ": " + varplane.ErrorMessage(e.cause)
}

func (e *revokedError) Unwrap() []error { return []error{ErrRevoked, e.cause} }

// Reason returns the short machine-readable name of why a subscription
// ended, as sent to clients: "slow-subscriber", "shutdown", "unsubscribed",
// "revoked", or "error".
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrRevoked):
		return "revoked"
	case errors.Is(err, ErrSlowSubscriber):
		return "slow-subscriber"
	case errors.Is(err, ErrHubClosed):
		return "shutdown"
	case errors.Is(err, ErrUnsubscribed):
		return "unsubscribed"
	}
	return "error"
}

// Filter selects scopes. A key matches exactly; a group matches the group
// scope itself; a prefix P matches P and every scope below it (P.*); the
// empty prefix (wire.Everything, a watch's all=1) matches every scope.
type Filter struct {
	Keys     []varplane.Scope
	Groups   []varplane.Scope
	Prefixes []varplane.Scope
}

// MaxFilterScopes bounds the scopes one filter names: the bound of a batch
// or watch request of the HTTP API (wire.MaxBatchScopes).
const MaxFilterScopes = wire.MaxBatchScopes

// Validate returns a bad-request error when the filter is empty, names more
// than MaxFilterScopes scopes, or names an invalid scope, by the rules of
// the HTTP API's key, group and prefix parameters (wire.CheckKind: a key
// contains a dot, a group does not), so that every transport refuses the
// same filters.
func (f Filter) Validate() error {
	switch n := len(f.Keys) + len(f.Groups) + len(f.Prefixes); {
	case n == 0:
		return wire.BadRequest("name at least one key, group or prefix")
	case n > MaxFilterScopes:
		return wire.BadRequest("at most %d scopes per subscription", MaxFilterScopes)
	}
	for _, list := range []struct {
		field  string
		scopes []varplane.Scope
	}{{"key", f.Keys}, {"group", f.Groups}, {"prefix", f.Prefixes}} {
		for _, s := range list.scopes {
			if list.field == "prefix" && s == "" {
				continue // the empty prefix: every scope
			}
			var err error
			if list.field == "prefix" {
				_, err = wire.ScopeField(list.field, string(s))
			} else {
				_, err = wire.CheckKind(list.field, string(s))
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Scopes returns every scope the filter names (keys, groups, prefixes), for
// authorization.
func (f Filter) Scopes() []varplane.Scope {
	out := make([]varplane.Scope, 0, len(f.Keys)+len(f.Groups)+len(f.Prefixes))
	out = append(out, f.Keys...)
	out = append(out, f.Groups...)
	return append(out, f.Prefixes...)
}

// Match reports whether the filter selects scope s.
func (f Filter) Match(s varplane.Scope) bool { return newMatcher(f).match(s) }

type matcher struct {
	exact    map[varplane.Scope]struct{}
	order    []varplane.Scope // exact scopes in request order, deduplicated
	prefixes []varplane.Scope
}

func newMatcher(f Filter) *matcher {
	m := &matcher{exact: make(map[varplane.Scope]struct{}, len(f.Keys)+len(f.Groups))}
	for _, list := range [][]varplane.Scope{f.Keys, f.Groups} {
		for _, s := range list {
			if _, dup := m.exact[s]; !dup {
				m.exact[s] = struct{}{}
				m.order = append(m.order, s)
			}
		}
	}
	for _, p := range f.Prefixes {
		if !slices.Contains(m.prefixes, p) {
			m.prefixes = append(m.prefixes, p)
		}
	}
	return m
}

func (m *matcher) match(s varplane.Scope) bool {
	if _, ok := m.exact[s]; ok {
		return true
	}
	for _, p := range m.prefixes {
		if p == "" || s == p || s.IsDescendantOf(p) {
			return true
		}
	}
	return false
}

// Update is the state of one scope: its generation and head, or no head
// (Head nil) after a deactivation or when it never had one.
type Update struct {
	Scope      varplane.Scope
	Generation varplane.Generation
	// Head is the scope's head; nil when it serves nothing.
	Head *varplane.Head

	enc *encoded // shared by every subscriber of one commit
}

// encoded caches transport encodings of an update computed once per commit
// rather than once per subscriber.
type encoded struct {
	slots [maxSharedSlots]sharedSlot
}

type sharedSlot struct {
	once sync.Once
	v    any
}

// Slots of Update.Shared. SlotSSE is used by SSEFrame (the watch route of
// httpapi), SlotRPC and SlotRPCBatch by package rpc.
const (
	SlotSSE = iota
	SlotRPC
	SlotRPCBatch
	maxSharedSlots = 4
)

// Shared returns build(u), computed at most once per commit for slot and
// shared by every subscriber that receives this update, so that a
// transport encodes a commit once rather than once per subscriber. Updates
// read for a snapshot are not shared and build runs every time. The result
// must be treated as immutable. slot must be below 4; SlotSSE, SlotRPC and
// SlotRPCBatch are taken.
func (u *Update) Shared(slot int, build func(*Update) any) any {
	if u.enc == nil {
		return build(u)
	}
	sl := &u.enc.slots[slot]
	sl.once.Do(func() { sl.v = build(u) })
	return sl.v
}

// Batch is what one Next call delivers: the first snapshot, a resync
// snapshot, or the updates of one or more commits (coalesced per scope).
type Batch struct {
	// Snapshot is true for the batch sent on subscribe and after a resync.
	// The first batch of every subscription is a snapshot, possibly empty.
	Snapshot bool
	Updates  []Update
}

// Stats are cumulative counters of a Hub.
type Stats struct {
	// Subscribers is the number of live subscriptions.
	Subscribers int64
	// Delivered counts updates handed to subscribers.
	Delivered uint64
	// Coalesced counts pending updates replaced by a newer one of the same
	// scope before delivery.
	Coalesced uint64
	// Dropped counts pending updates discarded by resyncs and disconnects.
	Dropped uint64
	// Resyncs counts queues replaced by a fresh snapshot.
	Resyncs uint64
	// Disconnects counts subscriptions ended by the hub (slow subscribers,
	// shutdown).
	Disconnects uint64
	// RefusedFull counts Subscribe calls refused because the hub served
	// Options.MaxSubscribers; RefusedPerToken those refused because their
	// token held Options.MaxSubscribersPerToken; RefusedPerAddr and
	// RefusedPerConn those refused by the per-address and per-connection
	// caps.
	RefusedFull, RefusedPerToken, RefusedPerAddr, RefusedPerConn uint64
	// Revoked counts subscriptions ended because a recheck of their
	// authorization was denied.
	Revoked uint64
}

// Hub fans commits out to subscribers. Create it with New; Close it when the
// server stops.
type Hub struct {
	store varplane.Store
	opts  Options
	log   *slog.Logger

	mu     sync.Mutex // guards changes to subs and closed
	subs   atomic.Pointer[[]*Subscription]
	closed bool
	unsub  func()

	// counts holds the live subscriptions per capped key (capKey: an
	// owner, an address, a connection); guarded by mu.
	counts map[capKey]int

	recheckNow chan struct{} // a pass is wanted (Recheck); buffered 1
	stopCheck  context.CancelFunc
	checkDone  chan struct{}

	subscribers                                            atomic.Int64
	delivered, coalesced, dropped, resyncs, disconnections atomic.Uint64
	refusedFull, refusedToken, refusedAddr, refusedConn    atomic.Uint64
	revoked                                                atomic.Uint64
}

// New returns a Hub following src. It registers one commit listener and
// starts the recheck loop (Options.RecheckInterval), which Close removes
// and stops.
func New(src Source, opts Options) *Hub {
	if opts.MaxSubscribers <= 0 {
		opts.MaxSubscribers = DefaultMaxSubscribers
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	if opts.MaxSubscribersPerToken == 0 {
		opts.MaxSubscribersPerToken = max(1, opts.MaxSubscribers/DefaultTokenShare)
	}
	if opts.MaxSubscribersPerAddr == 0 {
		opts.MaxSubscribersPerAddr = max(1, opts.MaxSubscribers/DefaultAddrShare)
	}
	if opts.MaxSubscribersPerConn == 0 {
		opts.MaxSubscribersPerConn = max(1, opts.MaxSubscribers/DefaultTokenShare)
	}
	if opts.RecheckInterval == 0 {
		opts.RecheckInterval = DefaultRecheckInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Hub{store: src.Store(), opts: opts, log: opts.Logger, counts: map[capKey]int{},
		recheckNow: make(chan struct{}, 1), checkDone: make(chan struct{})}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.subs.Store(&[]*Subscription{})
	ctx, cancel := context.WithCancel(context.Background())
	h.stopCheck = cancel
	go h.recheckLoop(ctx)
	h.unsub = src.OnCommit(h.onCommit)
	return h
}

// Recheck asks for a pass over every subscription's
// SubscribeOptions.Recheck now, off the caller's goroutine (it never
// blocks): call it when the tokens the authorizer accepts have changed.
// Passes run one at a time; a request during a pass starts one more after
// it.
func (h *Hub) Recheck() {
	select {
	case h.recheckNow <- struct{}{}:
	default:
	}
}

// recheckLoop runs the recheck passes until ctx ends (Close).
func (h *Hub) recheckLoop(ctx context.Context) {
	defer close(h.checkDone)
	var tick <-chan time.Time
	if h.opts.RecheckInterval > 0 {
		t := time.NewTicker(h.opts.RecheckInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-h.recheckNow:
		}
		h.recheckPass(ctx)
	}
}

// recheckPass asks every subscription with a Recheck whether its token
// still allows it, one after the other: a denial ends it with ErrRevoked;
// any other failure (the authorizer cannot read its store) leaves it open
// until the next pass, so that a store's blip does not cut every stream.
func (h *Hub) recheckPass(ctx context.Context) {
	var revoked, failed int
	var lastErr error
	for _, s := range *h.subs.Load() {
		if s.recheck == nil || ctx.Err() != nil {
			continue
		}
		select {
		case <-s.done:
			continue
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, recheckTimeout)
		err := s.recheck(cctx)
		cancel()
		if err == nil {
			continue
		}
		switch varplane.ErrorCode(err) {
		case varplane.CodeForbidden, varplane.CodeUnauthorized:
			revoked++
			h.revoked.Add(1)
			s.fail(&revokedError{cause: err}, true)
		default:
			failed++
			lastErr = err
		}
	}
	if revoked > 0 {
		h.log.Info("push subscriptions ended: their token no longer allows them", "subscriptions", revoked)
	}
	if failed > 0 {
		h.log.Warn("push: a recheck of subscriptions failed; they stay open until the next pass", "subscriptions", failed, "err", lastErr)
	}
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	return Stats{
		Subscribers: h.subscribers.Load(),
		Delivered:   h.delivered.Load(),
		Coalesced:   h.coalesced.Load(),
		Dropped:     h.dropped.Load(),
		Resyncs:     h.resyncs.Load(),
		Disconnects: h.disconnections.Load(),

		RefusedFull:     h.refusedFull.Load(),
		RefusedPerToken: h.refusedToken.Load(),
		RefusedPerAddr:  h.refusedAddr.Load(),
		RefusedPerConn:  h.refusedConn.Load(),
		Revoked:         h.revoked.Load(),
	}
}

// Close stops following commits and ends every subscription with
// ErrHubClosed. Later Subscribe calls fail with ErrHubClosed.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	h.unsub()
	h.stopCheck()
	<-h.checkDone
	for _, s := range *h.subs.Load() {
		s.fail(ErrHubClosed, true)
	}
}

// onCommit runs on the committing goroutine: it must never block.
func (h *Hub) onCommit(c varplane.Commit) {
	if len(c.Changes) == 0 {
		return
	}
	ups := make([]Update, len(c.Changes))
	for i, ch := range c.Changes {
		ups[i] = Update{Scope: ch.Scope, Generation: ch.Generation, Head: ch.Head, enc: &encoded{}}
	}
	now := h.opts.Now()
	for _, s := range *h.subs.Load() {
		s.offer(ups, now)
	}
	if h.opts.RecheckOn != nil {
		for _, ch := range c.Changes {
			if h.opts.RecheckOn(ch.Scope) {
				h.Recheck()
				break
			}
		}
	}
}

// Subscribe registers a subscription for the scopes f selects. held gives
// the generations the subscriber already holds (nil for none); the first
// batch is a snapshot that includes a scope only when its current
// generation is newer than held, and for a requested key or group it does
// not hold, its state even without a head. Prefix scopes without a head are
// included only when held names them at an older generation.
//
// It returns a bad-request error for an invalid filter, a too-many-subscribers
// error (errors.Is ErrTooManySubscribers) past Options.MaxSubscribers or a
// per-token, per-address or per-connection cap, ErrHubClosed after Close,
// and the store's error when the snapshot cannot be read. The caller must
// Close the subscription.
func (h *Hub) Subscribe(ctx context.Context, f Filter, held map[varplane.Scope]varplane.Generation) (*Subscription, error) {
	return h.SubscribeWith(ctx, f, held, SubscribeOptions{})
}

// SubscribeOptions tune SubscribeWith. The zero value is Subscribe.
type SubscribeOptions struct {
	// Notify, when set, replaces the Ready channel: it is called wherever a
	// value would be sent on Ready (a batch may be available, the
	// subscription ended, Wake), and Ready never receives. It lets one
	// goroutine serve many subscriptions (a connection writer) without a
	// goroutine or a channel receive per subscription. It may be called
	// before SubscribeWith returns, from the committing goroutine and from
	// the consumer's own TryNext, so it must be safe for concurrent use,
	// must not block and must not call back into the subscription.
	Notify func()
	// Owner is the key the per-token cap counts the subscription under:
	// TokenKey of the request's bearer token. "" (no token) is counted by
	// the global cap only. Never the raw token: the hub keeps the key for
	// the subscription's lifetime.
	Owner string
	// Addr is the client's IP address (wire.AddrHost of the request's
	// remote address), counted by Options.MaxSubscribersPerAddr; Conn names
	// the connection the subscription is served on (its remote address
	// with the port, unique while the connection is open), counted by
	// Options.MaxSubscribersPerConn. "" is not counted.
	Addr, Conn string
	// Recheck, when set, asks the authorizer again whether the
	// subscription's token still allows it, as the transport asked before
	// subscribing; the hub calls it on every recheck pass (see
	// Options.RecheckInterval and RecheckOn) from its own goroutine, never
	// concurrently for one subscription. A forbidden or unauthorized error
	// ends the subscription with ErrRevoked.
	Recheck func(ctx context.Context) error
}

// tokenKeySecret keys TokenKey: random per process, so that a key seen in
// memory cannot be tested against guessed tokens elsewhere.
var tokenKeySecret = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics instead)
	return b
}()

// TokenKey returns the non-reversible key a bearer token is counted under
// by the per-token cap (SubscribeOptions.Owner): an HMAC-SHA-256 of the
// token under a per-process random key, hex-encoded, or "" for no token.
// Every transport of one hub must derive owners with it, so that a token
// counts the same over SSE, Connect and gRPC.
func TokenKey(token string) string {
	if token == "" {
		return ""
	}
	m := hmac.New(sha256.New, tokenKeySecret)
	m.Write([]byte(token))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// SubscribeWith is Subscribe with options.
func (h *Hub) SubscribeWith(ctx context.Context, f Filter, held map[varplane.Scope]varplane.Generation, opts SubscribeOptions) (*Subscription, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &Subscription{
		hub:       h,
		keys:      capKeys(opts),
		recheck:   opts.Recheck,
		m:         newMatcher(f),
		ready:     make(chan struct{}, 1),
		notify:    opts.Notify,
		done:      make(chan struct{}),
		pending:   map[varplane.Scope]int{},
		delivered: make(map[varplane.Scope]sentHead, len(held)),
	}
	for sc, g := range held {
		if s.m.match(sc) {
			s.delivered[sc] = sentHead{gen: g}
		}
	}
	// Register before reading the snapshot so that no commit falls between
	// the two; updates seen twice are filtered by generation.
	if err := h.add(s); err != nil {
		return nil, err
	}
	snap, err := h.snapshot(ctx, s)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("push: read snapshot: %w", err)
	}
	s.mu.Lock()
	s.first, s.hasFirst = snap, true
	s.mu.Unlock()
	s.signal()
	return s, nil
}

// capKey is one key a subscription is counted under by a cap: the cap's
// kind and the key (a token's TokenKey, an address, a connection).
type capKey struct {
	kind byte // 't' token, 'a' address, 'c' connection
	key  string
}

// capKeys returns the keys opts counts a subscription under.
func capKeys(opts SubscribeOptions) []capKey {
	var keys []capKey
	for _, k := range []capKey{{'t', opts.Owner}, {'a', opts.Addr}, {'c', opts.Conn}} {
		if k.key != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// limit returns the cap of a key's kind (0 or less: none), its Limit
// name, what it counts and the counter of its refusals.
func (h *Hub) limit(kind byte) (int, string, string, *atomic.Uint64) {
	switch kind {
	case 't':
		return h.opts.MaxSubscribersPerToken, LimitSubscribersPerToken, "this token", &h.refusedToken
	case 'a':
		return h.opts.MaxSubscribersPerAddr, LimitSubscribersPerAddr, "this client address", &h.refusedAddr
	default:
		return h.opts.MaxSubscribersPerConn, LimitSubscribersPerConn, "this connection", &h.refusedConn
	}
}

// Reserve counts a stream the hub does not feed (the values service's
// created events) under the same caps and rechecks as SubscribeWith: it
// returns a subscription that matches no scope and never delivers a batch,
// whose Done is closed when the hub ends it (its token revoked: Err
// matches ErrRevoked; the hub closed). It returns the refusals of
// SubscribeWith. The caller must Close it when the stream ends.
func (h *Hub) Reserve(opts SubscribeOptions) (*Subscription, error) {
	s := &Subscription{hub: h, keys: capKeys(opts), recheck: opts.Recheck, m: newMatcher(Filter{}),
		ready: make(chan struct{}, 1), notify: opts.Notify, done: make(chan struct{}),
		pending: map[varplane.Scope]int{}, delivered: map[varplane.Scope]sentHead{}}
	if err := h.add(s); err != nil {
		return nil, err
	}
	return s, nil
}

func (h *Hub) add(s *Subscription) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrHubClosed
	}
	cur := *h.subs.Load()
	if len(cur) >= h.opts.MaxSubscribers {
		h.refusedFull.Add(1)
		return &varplane.Error{Code: varplane.CodeTooManyRequests, Limit: LimitSubscribers,
			Message: fmt.Sprintf("the server already serves its maximum of %d subscribers", h.opts.MaxSubscribers)}
	}
	for _, k := range s.keys {
		max, name, who, refused := h.limit(k.kind)
		if max > 0 && h.counts[k] >= max {
			refused.Add(1)
			return &varplane.Error{Code: varplane.CodeTooManyRequests, Limit: name,
				Message: fmt.Sprintf("%s already holds its maximum of %d subscriptions; close one first", who, max)}
		}
	}
	next := make([]*Subscription, len(cur), len(cur)+1)
	copy(next, cur)
	next = append(next, s)
	h.subs.Store(&next)
	h.subscribers.Add(1)
	for _, k := range s.keys {
		h.counts[k]++
	}
	return nil
}

func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := *h.subs.Load()
	i := slices.Index(cur, s)
	if i < 0 {
		return
	}
	next := make([]*Subscription, 0, len(cur)-1)
	next = append(next, cur[:i]...)
	next = append(next, cur[i+1:]...)
	h.subs.Store(&next)
	h.subscribers.Add(-1)
	for _, k := range s.keys {
		if n := h.counts[k] - 1; n > 0 {
			h.counts[k] = n
		} else {
			delete(h.counts, k) // the map holds live keys only
		}
	}
}

// snapshot reads the current state of every scope s selects and keeps those
// newer than what s holds, recording them as delivered.
func (h *Hub) snapshot(ctx context.Context, s *Subscription) ([]Update, error) {
	var states []Update
	exact := make(map[varplane.Scope]bool, len(s.m.order))
	for _, sc := range s.m.order {
		st, err := h.store.State(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("scope %q: %w", sc, err)
		}
		states = append(states, Update{Scope: sc, Generation: st.Generation, Head: st.Head})
		exact[sc] = true
	}
	if len(s.m.prefixes) > 0 {
		all, err := h.store.Scopes(ctx)
		if err != nil {
			return nil, fmt.Errorf("list scopes: %w", err)
		}
		for _, sc := range all {
			if exact[sc] || !s.m.match(sc) {
				continue
			}
			st, err := h.store.State(ctx, sc)
			if err != nil {
				return nil, fmt.Errorf("scope %q: %w", sc, err)
			}
			states = append(states, Update{Scope: sc, Generation: st.Generation, Head: st.Head})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := states[:0]
	for _, u := range states {
		_, held := s.delivered[u.Scope]
		switch {
		case !s.news(u):
			continue
		case !held && u.Head == nil && !exact[u.Scope]:
			continue // nothing to say about a prefix scope the client never saw
		}
		s.sent(u)
		out = append(out, u)
	}
	return out, nil
}

// Subscription is one subscriber's bounded queue. Consume it from one
// goroutine with Next (or Ready + TryNext) and Close it when done.
type Subscription struct {
	hub     *Hub
	keys    []capKey                        // what the caps count it under
	recheck func(ctx context.Context) error // SubscribeOptions.Recheck
	m       *matcher
	ready   chan struct{}
	notify  func() // replaces sends on ready when set (SubscribeOptions.Notify)
	done    chan struct{}

	mu           sync.Mutex
	queue        []Update
	spare        []Update               // the buffer handed out by the previous TryNext
	pending      map[varplane.Scope]int // scope → index in queue
	pendingSince time.Time
	first        []Update
	hasFirst     bool
	resync       bool
	delivered    map[varplane.Scope]sentHead
	err          error
}

// sentHead is what a subscriber holds of a scope: the generation, and the
// revision of the head it was sent at it ("" when it was sent none, or
// declared the generation itself).
type sentHead struct {
	gen varplane.Generation
	rev varplane.Revision
}

// news reports whether u tells s something: a newer generation than it
// holds, or the one it was sent with another revision (a read replica
// that a rollout's step selected sent the rollout's revision at the
// base's next generation, which a later publish takes with another one;
// docs/rollouts.md). Caller holds s.mu.
func (s *Subscription) news(u Update) bool {
	d, held := s.delivered[u.Scope]
	switch {
	case !held || u.Generation > d.gen:
		return true
	case u.Generation < d.gen || u.Head == nil:
		return false
	}
	return d.rev != "" && u.Head.Revision != d.rev
}

// sent records u as delivered to s. Caller holds s.mu.
func (s *Subscription) sent(u Update) {
	d := sentHead{gen: u.Generation}
	if u.Head != nil {
		d.rev = u.Head.Revision
	}
	s.delivered[u.Scope] = d
}

// Ready receives a value when a batch may be available for TryNext, when
// the subscription has ended (Done is closed), and after Wake. A consumer
// can therefore wait on Ready alone: a receive on one channel costs less
// than a select over several, which matters when one commit wakes
// thousands of consumers.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Wake makes Ready receive a value without blocking, so that a consumer
// waiting on Ready alone also notices its own events (its context ending, a
// heartbeat timer). Safe for concurrent use.
func (s *Subscription) Wake() { s.signal() }

// Done is closed when the subscription has ended; Err says why.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns why the subscription ended (ErrSlowSubscriber, ErrHubClosed,
// ErrUnsubscribed), or nil while it is live.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription and releases its queue. It is idempotent.
func (s *Subscription) Close() { s.fail(ErrUnsubscribed, false) }

// Held returns a copy of the generations the subscriber holds: those it
// declared and those it has been sent.
func (s *Subscription) Held() map[varplane.Scope]varplane.Generation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[varplane.Scope]varplane.Generation, len(s.delivered))
	for k, v := range s.delivered {
		out[k] = v.gen
	}
	return out
}

func (s *Subscription) signal() {
	if s.notify != nil {
		s.notify()
		return
	}
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *Subscription) fail(err error, byHub bool) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	n := len(s.queue)
	s.queue, s.pending, s.first = nil, nil, nil
	s.mu.Unlock()
	close(s.done)
	s.signal()
	s.hub.remove(s)
	if n > 0 {
		s.hub.dropped.Add(uint64(n))
	}
	if byHub {
		s.hub.disconnections.Add(1)
		if !errors.Is(err, ErrHubClosed) && !errors.Is(err, ErrRevoked) { // a pass logs its revocations once
			s.hub.log.Warn("push subscriber disconnected", "reason", Reason(err), "dropped", n)
		}
	}
}

// offer enqueues the updates of one commit that s selects. It never blocks
// beyond s's own short critical section.
func (s *Subscription) offer(ups []Update, now time.Time) {
	h := s.hub
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	matched := false
	wasEmpty := len(s.queue) == 0 && !s.resync
	for _, u := range ups {
		if !s.m.match(u.Scope) {
			continue
		}
		matched = true
		if i, ok := s.pending[u.Scope]; ok {
			if u.Generation >= s.queue[i].Generation {
				s.queue[i] = u // the later of one generation is the store's (or the replica's) last word
			}
			h.coalesced.Add(1)
			continue
		}
		s.pending[u.Scope] = len(s.queue)
		s.queue = append(s.queue, u)
	}
	if !matched {
		s.mu.Unlock()
		return
	}
	if wasEmpty {
		s.pendingSince = now
	} else if now.Sub(s.pendingSince) > h.opts.StallTimeout {
		s.mu.Unlock()
		s.fail(ErrSlowSubscriber, true)
		return
	}
	if len(s.queue) > h.opts.MaxPending {
		h.dropped.Add(uint64(len(s.queue)))
		h.resyncs.Add(1)
		s.queue = s.queue[:0:0]
		clear(s.pending)
		s.resync = true
	}
	s.mu.Unlock()
	s.signal()
}

// TryNext returns the next batch without waiting: ok is false when nothing
// is pending. The batch's Updates slice is valid until the next call. After a resync it reads a fresh snapshot from the store with
// ctx. It returns Err() once the subscription has ended.
func (s *Subscription) TryNext(ctx context.Context) (b Batch, ok bool, err error) {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return Batch{}, false, err
	}
	if s.hasFirst {
		b = Batch{Snapshot: true, Updates: s.first}
		s.first, s.hasFirst = nil, false
		more := len(s.queue) > 0 || s.resync
		s.mu.Unlock()
		if more {
			s.signal()
		}
		s.hub.delivered.Add(uint64(len(b.Updates)))
		return b, true, nil
	}
	if s.resync {
		s.resync = false
		more := len(s.queue) > 0
		s.mu.Unlock()
		snap, err := s.hub.snapshot(ctx, s)
		if err != nil {
			s.mu.Lock()
			s.resync = true // try again on the next call
			s.mu.Unlock()
			return Batch{}, false, fmt.Errorf("push: resync snapshot: %w", err)
		}
		if more {
			s.signal()
		}
		s.hub.delivered.Add(uint64(len(snap)))
		return Batch{Snapshot: true, Updates: snap}, true, nil
	}
	if len(s.queue) == 0 {
		s.mu.Unlock()
		return Batch{}, false, nil
	}
	q := s.queue
	// The batch handed out last time is done with (one consumer), so its
	// buffer becomes the next queue.
	s.queue, s.spare = s.spare[:0], q
	clear(s.pending)
	out := q[:0]
	for _, u := range q {
		if !s.news(u) {
			continue
		}
		s.sent(u)
		out = append(out, u)
	}
	s.mu.Unlock()
	if len(out) == 0 {
		return Batch{}, false, nil
	}
	s.hub.delivered.Add(uint64(len(out)))
	return Batch{Updates: out}, true, nil
}

// Next waits for the next batch. It returns ctx's error when ctx ends and
// Err() when the subscription ends. It is for subscriptions without
// SubscribeOptions.Notify, whose Ready it waits on.
func (s *Subscription) Next(ctx context.Context) (Batch, error) {
	for {
		b, ok, err := s.TryNext(ctx)
		if err != nil || ok {
			return b, err
		}
		select {
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		case <-s.done:
		case <-s.ready:
		}
	}
}
