package redis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/replica"
)

// Defaults and bounds of Options.
const (
	DefaultRevalidateInterval    = 10 * time.Second
	MaxRevalidateInterval        = 5 * time.Minute
	MinRevalidateInterval        = 10 * time.Millisecond
	DefaultRevalidateConcurrency = 4
	DefaultLagWarn               = 60 * time.Second
	DefaultLagEscalate           = 5 * time.Minute
	DefaultCommandTimeout        = 5 * time.Second
	DefaultPrefix                = "varplane"
)

// Eviction check modes for Options.EvictionCheck.
const (
	EvictionCheckFail = "fail"
	EvictionCheckWarn = "warn"
)

// Options configure a Store. The zero value is valid: every field has a
// default.
type Options struct {
	// Logger receives the store's logs; nil discards them. Credentials are
	// never logged.
	Logger *slog.Logger
	// RevalidateInterval is how often every installed head is confirmed
	// with Redis (default 10s). It bounds how long a lost invalidation
	// message goes unnoticed, so it cannot be turned off: values above 5
	// minutes are clamped to 5 minutes (with a warning); negative values
	// and values below 10ms are refused.
	RevalidateInterval time.Duration
	// RevalidateConcurrency bounds the conditional reads in flight during a
	// pass (default 4).
	RevalidateConcurrency int
	// EvictionCheck is "fail" (default: Open fails unless every node reports
	// maxmemory-policy noeviction) or "warn" (log and go on, for a managed
	// Redis that denies INFO and CONFIG).
	EvictionCheck string
	// LagWarn and LagEscalate are the lags past which an unconfirmed head is
	// logged at WARN and ERROR, at most once a minute per scope (defaults 60s
	// and 5m).
	LagWarn, LagEscalate time.Duration
	// CommandTimeout bounds every Redis command the store sends (default 5s);
	// a caller's earlier deadline wins.
	CommandTimeout time.Duration
	// ReadOnly makes a data-plane instance: it never writes to Redis, and
	// every mutation returns a store-unsupported error.
	ReadOnly bool

	// noSubscribe keeps the store from subscribing to invalidations, so tests
	// can prove that revalidation alone converges.
	noSubscribe bool
}

func (o Options) normalise() (Options, []string, error) {
	var warns []string
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.RevalidateInterval == 0:
		o.RevalidateInterval = DefaultRevalidateInterval
	case o.RevalidateInterval < MinRevalidateInterval:
		return o, nil, fmt.Errorf("redis store: revalidate interval %v is below %v", o.RevalidateInterval, MinRevalidateInterval)
	case o.RevalidateInterval > MaxRevalidateInterval:
		warns = append(warns, fmt.Sprintf("revalidate interval %v clamped to %v", o.RevalidateInterval, MaxRevalidateInterval))
		o.RevalidateInterval = MaxRevalidateInterval
	}
	switch {
	case o.RevalidateConcurrency == 0:
		o.RevalidateConcurrency = DefaultRevalidateConcurrency
	case o.RevalidateConcurrency < 0:
		return o, nil, fmt.Errorf("redis store: revalidate concurrency %d is negative", o.RevalidateConcurrency)
	}
	switch o.EvictionCheck {
	case "":
		o.EvictionCheck = EvictionCheckFail
	case EvictionCheckFail, EvictionCheckWarn:
	default:
		return o, nil, fmt.Errorf("redis store: eviction check %q is neither %q nor %q", o.EvictionCheck, EvictionCheckFail, EvictionCheckWarn)
	}
	if o.LagWarn <= 0 {
		o.LagWarn = DefaultLagWarn
	}
	if o.LagEscalate <= 0 {
		o.LagEscalate = DefaultLagEscalate
	}
	if o.LagEscalate < o.LagWarn {
		o.LagEscalate = o.LagWarn
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	return o, warns, nil
}

// Store is the Redis store. It implements varplane.Store and
// varplane.Replayer.
type Store struct {
	client rueidis.Client
	// sub is a client of its own for the invalidation subscription, so a
	// killed subscriber connection (CLIENT KILL TYPE pubsub) never breaks
	// commands in flight; rueidis resubscribes it when it reconnects.
	sub  rueidis.Client
	keys keys
	opts Options
	log  *slog.Logger
	addr string // host:port list for logs, without credentials

	entries *replica.Table[snapshot, *entry] // the installed heads
	// failLogged is scope → unix nanoseconds of its last failure log.
	failLogged sync.Map

	mu       sync.Mutex // serialises installs and ticket allocation
	nextTick uint64     // next delivery ticket, under mu

	dmu       sync.Mutex // guards served and listeners
	dcond     *sync.Cond
	served    uint64
	listeners map[uint64]func(varplane.Commit)
	nextLID   uint64

	// follow queues invalidation payloads (read by one goroutine),
	// remembers invalidated scopes whose read failed and asks for passes.
	follow  *replica.Follower
	closed  atomic.Bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	subOnce chan struct{} // closed at the first confirmed subscription

	evOK     atomic.Bool
	evDetail atomic.Pointer[string]

	stats counters
}

var (
	_ varplane.Store    = (*Store)(nil)
	_ varplane.Replayer = (*Store)(nil)
)

// Open connects to the Redis at rawURL and returns a running Store.
//
// rawURL is redis://[user:password@]host:port/db?prefix=name (rediss:// for
// TLS); prefix defaults to "varplane" and must not contain '{', '}' or
// whitespace. Other query parameters are those of rueidis.ParseURL. Open
// checks maxmemory-policy on every node (see Options.EvictionCheck),
// subscribes to the invalidation channel, and starts the revalidation loop.
// It returns a store-unavailable error when Redis cannot be reached, and a
// bad-request error for a malformed URL or option.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	prefix, copt, addr, opts, err := parseOptions(rawURL, opts)
	if err != nil {
		return nil, &varplane.Error{Code: varplane.CodeBadRequest, Message: err.Error()}
	}
	opts, warns, err := opts.normalise()
	if err != nil {
		return nil, &varplane.Error{Code: varplane.CodeBadRequest, Message: err.Error()}
	}
	copt.DisableCache = true // the store keeps its own snapshots
	// A read that fails must fail now: installed heads keep being served
	// from memory, and a cold read or a history read that waits out the
	// command timeout in retries only delays the 503 the caller needs.
	copt.DisableRetry = true
	if copt.ClientName == "" {
		copt.ClientName = "varplane"
	}
	if copt.Dialer.Timeout == 0 {
		copt.Dialer.Timeout = opts.CommandTimeout
	}
	client, err := rueidis.NewClient(copt)
	if err != nil {
		return nil, varplane.Unavailable(fmt.Errorf("redis store: connect to %s: %w", addr, err))
	}
	s := &Store{
		client:    client,
		keys:      keys{prefix: prefix},
		opts:      opts,
		log:       opts.Logger.With("store", "redis", "addr", addr, "prefix", prefix),
		addr:      addr,
		listeners: map[uint64]func(varplane.Commit){},
		follow:    replica.NewFollower(4096),
		subOnce:   make(chan struct{}),
	}
	s.dcond = sync.NewCond(&s.dmu)
	s.entries = s.newTable()
	for _, w := range warns {
		s.log.Warn("redis store: " + w)
	}
	if err := s.checkEviction(ctx, true); err != nil {
		client.Close()
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if !opts.noSubscribe {
		sopt := copt
		sopt.ClientName = copt.ClientName + "-sub"
		sopt.DisableRetry = false // the subscriber resubscribes by itself
		if s.sub, err = rueidis.NewClient(sopt); err != nil {
			s.shutdown()
			return nil, varplane.Unavailable(fmt.Errorf("redis store: connect the subscriber to %s: %w", addr, err))
		}
		s.wg.Add(2)
		go s.subscribeLoop()
		go s.invalidationLoop()
		wait := time.NewTimer(opts.CommandTimeout)
		defer wait.Stop()
		select {
		case <-s.subOnce:
		case <-wait.C:
			s.shutdown()
			return nil, varplane.Unavailable(fmt.Errorf("redis store: no subscription to %s within %v", s.keys.channel(), opts.CommandTimeout))
		case <-ctx.Done():
			s.shutdown()
			return nil, varplane.Unavailable(ctx.Err())
		}
	}
	s.wg.Add(1)
	go s.revalidateLoop()
	s.log.Info("redis store opened", "readOnly", opts.ReadOnly, "revalidateInterval", opts.RevalidateInterval)
	return s, nil
}

// parseURL is parseOptions with no Options: the prefix, the client's
// options and the address a URL names.
func parseURL(rawURL string) (prefix string, opt rueidis.ClientOption, addr string, err error) {
	prefix, opt, addr, _, err = parseOptions(rawURL, Options{})
	return prefix, opt, addr, err
}

// Name returns "redis".
func (s *Store) Name() string { return "redis" }

// ReadOnly reports whether the store is a data-plane replica that never
// writes (Options.ReadOnly).
func (s *Store) ReadOnly() bool { return s.opts.ReadOnly }

// Close stops the store's goroutines and closes its connections. Later
// calls of any method return varplane.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return varplane.ErrClosed
	}
	s.shutdown()
	s.log.Info("redis store closed")
	return nil
}

func (s *Store) shutdown() {
	s.closed.Store(true)
	if s.cancel != nil {
		s.cancel()
	}
	s.client.Close()
	if s.sub != nil {
		s.sub.Close()
	}
	s.wg.Wait()
}

// cmdCtx bounds one Redis command by the command timeout.
func (s *Store) cmdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.CommandTimeout)
}

// Watch registers fn for every commit that changes a head: commits through
// this store (before Append returns) and commits by other processes (after
// the invalidation message or a revalidation pass installed them). fn must
// not block nor call the store's mutations (a mutation would wait for its
// own delivery behind fn). The returned function unregisters fn.
func (s *Store) Watch(fn func(varplane.Commit)) (cancel func()) {
	s.dmu.Lock()
	id := s.nextLID
	s.nextLID++
	s.listeners[id] = fn
	s.dmu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.dmu.Lock()
			delete(s.listeners, id)
			s.dmu.Unlock()
		})
	}
}

// deliver calls the listeners with c once every commit with an earlier ticket
// has been delivered, so listeners see commits in install order without
// being called under the install mutex.
func (s *Store) deliver(ticket uint64, c *varplane.Commit) {
	s.dmu.Lock()
	for s.served != ticket {
		s.dcond.Wait()
	}
	fns := make([]func(varplane.Commit), 0, len(s.listeners))
	for _, fn := range s.listeners {
		fns = append(fns, fn)
	}
	s.dmu.Unlock()
	// Later tickets wait for served, so listeners still see commits one at a
	// time and in order, but may call Watch or its cancel function.
	for _, fn := range fns {
		fn(*c)
	}
	s.dmu.Lock()
	s.served++
	s.dcond.Broadcast()
	s.dmu.Unlock()
}

// EvictionPolicyOK reports whether every node was last seen with
// maxmemory-policy noeviction, with a detail for /readyz and logs. Under
// EvictionCheck "warn" a policy that cannot be read counts as OK with the
// detail "unknown: ...".
func (s *Store) EvictionPolicyOK() (bool, string) {
	d := ""
	if p := s.evDetail.Load(); p != nil {
		d = *p
	}
	return s.evOK.Load(), d
}
