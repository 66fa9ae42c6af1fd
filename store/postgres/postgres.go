package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
	"github.com/varplane/varplane/internal/replica"
)

// Defaults and bounds of Options and of the URL parameters.
const (
	DefaultSchema             = "varplane"
	DefaultRevalidateInterval = 10 * time.Second
	MinRevalidateInterval     = 10 * time.Millisecond
	MaxRevalidateInterval     = 5 * time.Minute
	DefaultCommandTimeout     = 5 * time.Second
	DefaultLagWarn            = 60 * time.Second
	DefaultLagEscalate        = 5 * time.Minute
	// DefaultMaxConns is the pool size when the URL has no pool_max_conns:
	// concurrent commits share the WAL flush of one another (group commit),
	// so more connections than cores pays off for durable writes.
	DefaultMaxConns = 32
)

// Options configure a Store. The zero value is valid: every field has a
// default. The URL parameters of the same name (see Open) override them.
type Options struct {
	// Logger receives the store's logs; nil discards them. Passwords are
	// never logged.
	Logger *slog.Logger
	// RevalidateInterval is how often every installed head is confirmed
	// with the database (default 10s). It bounds how long a lost
	// notification goes unnoticed, so it cannot be turned off: values
	// above 5 minutes and below 10ms are refused.
	RevalidateInterval time.Duration
	// CommandTimeout bounds every statement the store sends, and the
	// connection of a new pool connection (default 5s); a caller's earlier
	// deadline wins. It is what makes a write answer store-unavailable
	// promptly when the database does not answer.
	CommandTimeout time.Duration
	// LagWarn and LagEscalate are the lags past which an unconfirmed head
	// is logged at WARN and ERROR, at most once a minute per scope
	// (defaults 60s and 5m).
	LagWarn, LagEscalate time.Duration
	// ReadOnly makes a data-plane replica: it never writes nor migrates,
	// refuses a schema older than this binary's, and every mutation
	// returns a store-unsupported error. Its role needs only SELECT (see
	// docs/postgres.md).
	ReadOnly bool

	// noListen keeps the store from listening for notifications, so tests
	// can prove that revalidation alone converges.
	noListen bool
}

func (o Options) normalise() (Options, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.RevalidateInterval == 0:
		o.RevalidateInterval = DefaultRevalidateInterval
	case o.RevalidateInterval < MinRevalidateInterval || o.RevalidateInterval > MaxRevalidateInterval:
		return o, fmt.Errorf("postgres store: revalidate interval %v is outside [%v, %v]", o.RevalidateInterval, MinRevalidateInterval, MaxRevalidateInterval)
	}
	if o.CommandTimeout < 0 {
		return o, fmt.Errorf("postgres store: command timeout %v is negative", o.CommandTimeout)
	}
	if o.CommandTimeout == 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if o.LagWarn <= 0 {
		o.LagWarn = DefaultLagWarn
	}
	if o.LagEscalate <= 0 {
		o.LagEscalate = DefaultLagEscalate
	}
	o.LagEscalate = max(o.LagEscalate, o.LagWarn)
	return o, nil
}

// Store is the PostgreSQL store. It implements varplane.Store and
// varplane.Replayer.
type Store struct {
	pool    *pgxpool.Pool
	poolCfg *pgxpool.Config
	schema  string
	channel string
	opts    Options
	log     *slog.Logger
	addr    string // host:port/database for logs, without credentials

	entries *replica.Table[snapshot, *entry] // the installed heads

	// mu serialises installs and Watch deliveries, so listeners see
	// commits one at a time and in install order.
	mu       sync.Mutex
	watchers logstate.Watchers

	// follow queues notification payloads (handled by one goroutine),
	// remembers notified scopes whose read failed and asks for passes.
	follow *replica.Follower

	notes     chan string      // invalidations of own commits, sent by one goroutine
	calls     chan *commitCall // commit function calls waiting to be run
	lead      chan struct{}    // one token per batch that may run at once
	listening chan struct{}    // closed at the first successful LISTEN
	closed    atomic.Bool
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	stats counters
}

var (
	_ varplane.Store    = (*Store)(nil)
	_ varplane.Replayer = (*Store)(nil)
)

// Open connects to the PostgreSQL database at rawURL, applies the embedded
// migrations (unless read-only) and returns a running Store.
//
// rawURL is postgres://[user[:password]@]host[:port]/database?params. The
// store's own parameters are
//
//	schema=NAME               the schema holding the tables (default varplane;
//	                          lowercase letters, digits, '_', at most 40)
//	command_timeout=DURATION  bound of every statement (default 5s)
//	revalidate_interval=DUR   revalidation pass period (default 10s)
//	read_only=true            a data-plane replica (Options.ReadOnly)
//	listen=false              no LISTEN: follow other replicas' commits by
//	                          revalidation alone (a hot standby cannot LISTEN)
//
// pgxpool's pool parameters (pool_max_conns, default 32; pool_min_conns,
// pool_min_idle_conns, pool_max_conn_lifetime, pool_max_conn_idle_time,
// pool_health_check_period, pool_max_conn_lifetime_jitter,
// pool_ping_timeout), libpq's connection parameters (connect_timeout,
// default the command timeout; sslmode, sslrootcert, target_session_attrs,
// …) and the session settings application_name, statement_timeout,
// lock_timeout, idle_in_transaction_session_timeout and jit (default off:
// see parseURL) are accepted; any
// other parameter is refused by name. Open returns a bad-request error for
// a malformed URL or option, a store-unavailable error when the database
// cannot be reached or its schema is newer than this binary's.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	cfg, opts, schema, addr, err := parseURL(rawURL, opts)
	if err != nil {
		return nil, &varplane.Error{Code: varplane.CodeBadRequest, Message: err.Error()}
	}
	opts, err = opts.normalise()
	if err != nil {
		return nil, &varplane.Error{Code: varplane.CodeBadRequest, Message: err.Error()}
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = opts.CommandTimeout
	}
	s := &Store{
		poolCfg:   cfg,
		schema:    schema,
		channel:   "varplane:" + schema,
		opts:      opts,
		log:       opts.Logger.With("store", "postgres", "addr", addr, "schema", schema),
		addr:      addr,
		follow:    replica.NewFollower(4096),
		listening: make(chan struct{}),
	}
	s.entries = s.newTable()
	s.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, varplane.Unavailable(fmt.Errorf("postgres store: connect to %s: %w", addr, err))
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	s.checkVacuum(ctx)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if !opts.noListen {
		s.wg.Add(2)
		go s.listenLoop()
		go s.notificationLoop()
		// The listener retries on its own; Open waits for its first
		// LISTEN a little longer than one attempt, so a loaded machine
		// does not fail a start that would succeed.
		bound := max(2*opts.CommandTimeout, 10*time.Second)
		wait := time.NewTimer(bound)
		defer wait.Stop()
		select {
		case <-s.listening:
		case <-wait.C:
			s.shutdown()
			return nil, varplane.Unavailable(fmt.Errorf("postgres store: no LISTEN on %s within %v", addr, bound))
		case <-ctx.Done():
			s.shutdown()
			return nil, varplane.Unavailable(ctx.Err())
		}
	}
	if !opts.ReadOnly {
		s.notes = make(chan string, 4096)
		s.calls = make(chan *commitCall, maxBatch*leaders)
		s.lead = make(chan struct{}, leaders)
		s.wg.Add(1)
		go s.notifyLoop()
	}
	s.wg.Add(1)
	go s.revalidateLoop()
	s.log.Info("postgres store opened", "readOnly", opts.ReadOnly, "revalidateInterval", opts.RevalidateInterval,
		"maxConns", cfg.MaxConns, "commandTimeout", opts.CommandTimeout)
	return s, nil
}

// checkVacuum warns when autovacuum will not look after the store's tables:
// it is off on the server (or track_counts is), or off on some of the
// tables. Nothing fails without it, but the tables are then never analyzed
// (the planner keeps its guesses for empty tables, and a replica's
// follow-up reads cost several times what they do with statistics) and the
// heads rows every commit rewrites are vacuumed by page pruning alone. A
// failed check is logged at debug level: it must not stop a start.
func (s *Store) checkVacuum(ctx context.Context) {
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	var on bool
	var off []string
	err := s.pool.QueryRow(ctx, `SELECT current_setting('autovacuum')::bool AND current_setting('track_counts')::bool,
	coalesce(array_agg(c.relname::text ORDER BY c.relname) FILTER (WHERE EXISTS (SELECT FROM unnest(c.reloptions) o
		WHERE split_part(o, '=', 1) = 'autovacuum_enabled' AND NOT split_part(o, '=', 2)::bool)), '{}')
FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r'`, s.schema).Scan(&on, &off)
	if err != nil {
		s.log.Debug("postgres store: cannot read the autovacuum settings", "err", err)
		return
	}
	if !on {
		s.log.Warn("postgres store: autovacuum is off on the server (autovacuum or track_counts): the store's tables are never analyzed or vacuumed, so query plans degrade as they grow; turn it on, or run ANALYZE and VACUUM on the schema's tables on a schedule")
	}
	if len(off) > 0 {
		s.log.Warn("postgres store: autovacuum_enabled is off on some of the store's tables: they are never analyzed or vacuumed; reset it on them", "tables", off)
	}
}

// validSchema is what a schema name may be: it is used unquoted in
// search_path and in the notification channel's name (at most 63 bytes).
var validSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// acceptedSettings are the session settings the URL may carry besides
// pgx's and libpq's own parameters; anything else that pgx would send to
// the server as a setting is refused, so a typo fails at start by name.
var acceptedSettings = map[string]bool{
	"application_name":                    true,
	"statement_timeout":                   true,
	"lock_timeout":                        true,
	"idle_in_transaction_session_timeout": true,
	"jit":                                 true,
}

// parseURL splits the store's own parameters off rawURL, applies them to
// opts, and hands the rest to pgxpool. addr is safe to log.
func parseURL(rawURL string, opts Options) (*pgxpool.Config, Options, string, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse echoes the URL, password included: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, opts, "", "", fmt.Errorf("postgres store: bad URL: %v", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, opts, "", "", fmt.Errorf("postgres store: URL scheme %q is not postgres://", u.Scheme)
	}
	q := u.Query()
	schema := DefaultSchema
	if q.Has("schema") {
		schema = q.Get("schema")
	}
	if !validSchema.MatchString(schema) {
		return nil, opts, "", "", fmt.Errorf("postgres store: schema %q must be 1 to 40 lowercase letters, digits or '_', not starting with a digit", schema)
	}
	for _, p := range []struct {
		name string
		dst  *time.Duration
	}{{"command_timeout", &opts.CommandTimeout}, {"revalidate_interval", &opts.RevalidateInterval}} {
		if !q.Has(p.name) {
			continue
		}
		d, err := time.ParseDuration(q.Get(p.name))
		if err != nil || d <= 0 {
			return nil, opts, "", "", fmt.Errorf("postgres store: %s=%q is not a positive duration such as 5s", p.name, q.Get(p.name))
		}
		*p.dst = d
	}
	if q.Has("read_only") {
		b, err := strconv.ParseBool(q.Get("read_only"))
		if err != nil {
			return nil, opts, "", "", fmt.Errorf("postgres store: read_only=%q is not true or false", q.Get("read_only"))
		}
		opts.ReadOnly = opts.ReadOnly || b
	}
	if q.Has("listen") {
		b, err := strconv.ParseBool(q.Get("listen"))
		if err != nil {
			return nil, opts, "", "", fmt.Errorf("postgres store: listen=%q is not true or false", q.Get("listen"))
		}
		opts.noListen = opts.noListen || !b
	}
	hasMaxConns := q.Has("pool_max_conns")
	for _, k := range []string{"schema", "command_timeout", "revalidate_interval", "read_only", "listen"} {
		q.Del(k)
	}
	if q.Has("search_path") {
		return nil, opts, "", "", errors.New("postgres store: search_path is set by the store from the schema parameter; use schema=NAME")
	}
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		// pgconn's parse errors carry the connection string with the
		// password masked; keep only the reason anyway.
		return nil, opts, "", "", fmt.Errorf("postgres store: bad URL: %v", unwrapAll(err))
	}
	var unknown []string
	for k := range cfg.ConnConfig.RuntimeParams {
		if !acceptedSettings[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, opts, "", "", fmt.Errorf("postgres store: unknown URL parameter(s) %s (the store takes schema, command_timeout, revalidate_interval, read_only, listen, pgxpool's pool_* and libpq's connection parameters, and the settings %s)",
			strings.Join(unknown, ", "), strings.Join(sortedKeys(acceptedSettings), ", "))
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "varplane"
	}
	// Every statement of the store is a short OLTP one, but the planner's
	// estimates for the set-based commit functions (unnest and
	// generate_subscripts over a batch's arrays) can pass jit_above_cost,
	// and PostgreSQL then compiles them with LLVM on each call: a cost of
	// milliseconds for statements that run in microseconds. jit=on in the
	// URL restores the server's own choice.
	if _, ok := cfg.ConnConfig.RuntimeParams["jit"]; !ok {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if !hasMaxConns {
		cfg.MaxConns = DefaultMaxConns
	}
	addr := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	return cfg, opts, schema, addr, nil
}

// unwrapAll returns the innermost error of err's chain, which for a pgconn
// parse error is the reason without the connection string.
func unwrapAll(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Name returns "postgres".
func (s *Store) Name() string { return "postgres" }

// Schema returns the schema the store's tables live in.
func (s *Store) Schema() string { return s.schema }

// ReadOnly reports whether the store is a data-plane replica that refuses
// every mutation (Options.ReadOnly or read_only=true).
func (s *Store) ReadOnly() bool { return s.opts.ReadOnly }

// RevalidateInterval is the period of the store's revalidation passes.
func (s *Store) RevalidateInterval() time.Duration { return s.opts.RevalidateInterval }

// Close stops the store's goroutines and closes its connections. Later
// calls of any method return varplane.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return varplane.ErrClosed
	}
	s.shutdown()
	s.log.Info("postgres store closed")
	return nil
}

func (s *Store) shutdown() {
	s.closed.Store(true)
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.pool.Close()
}

// cmdCtx bounds one statement by the command timeout.
func (s *Store) cmdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.CommandTimeout)
}

// Watch registers fn for every commit that changes a head: commits through
// this store (before Append returns) and commits by other processes (after
// the notification or a revalidation pass installed them). fn must not
// block nor call the store's mutations (a mutation waits for the delivery
// mutex fn runs under). The returned function unregisters fn.
func (s *Store) Watch(fn func(varplane.Commit)) (cancel func()) {
	return s.watchers.Add(fn)
}

func (s *Store) checkOpen() error { return replica.CheckOpen(&s.closed) }

func checkScope(scope varplane.Scope) error { return replica.CheckScope(scope) }
