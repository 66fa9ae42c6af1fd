// Package client is varplane's Go consumer SDK: it keeps an in-memory
// snapshot of the scopes an application reads, follows the server's live
// stream, and answers reads from memory.
//
// Reads (Value, Get) take no lock and do not allocate once a value has been
// decoded: every registered scope is a slot holding an atomic pointer to an
// immutable entry, which an update replaces whole, so a read sees a value
// either entirely before or entirely after a change, never a torn one.
// Values returned are shared: do not mutate them.
//
// Each scope resolves through tiers, first present wins, whole (tiers are not
// merged): the runtime head the server serves, then the static value the
// application supplied (Options.Static), then the default (Options.Defaults).
// A no-head from the server removes the runtime tier atomically, so reads fall
// back. A local override from the environment variable OverrideEnv(scope)
// replaces all tiers and bypasses the server for that scope.
//
// Updates are applied by the client's own goroutines, one at a time, and
// only a strictly newer generation replaces the held one, so duplicated or
// reordered deliveries are harmless. Every goroutine is started by Start and
// stopped by Stop; every HTTP request has a timeout, except the stream, whose
// liveness is watched by heartbeats and whose events are bounded in size.
//
// The client speaks the project's one wire layer: an error answer comes back
// as the full *varplane.Error the server sent (errors.Is(err,
// varplane.ErrConflict) and the details work across the wire), streams are
// read by its SSE reader and reconnects wait by its backoff.
package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/backoff"
	"github.com/varplane/varplane/internal/wire"
)

// Tier names where a resolved value came from.
type Tier uint8

// The tiers, from the strongest.
const (
	TierNone     Tier = iota // no tier has a value
	TierOverride             // the environment override
	TierRuntime              // the head the server serves
	TierStatic               // Options.Static
	TierDefault              // Options.Defaults
	// TierStale is the last-known-good copy on disk (Options.LastKnownGood):
	// what the client last installed from the server, served while the
	// server has not answered since the start. It ranks between the runtime
	// head and the static value; the numbering keeps the older tiers' values.
	TierStale
)

// String returns the tier's name.
func (t Tier) String() string {
	switch t {
	case TierOverride:
		return "override"
	case TierRuntime:
		return "runtime"
	case TierStatic:
		return "static"
	case TierDefault:
		return "default"
	case TierStale:
		return "stale"
	}
	return "none"
}

// Value is the resolved value of one scope.
type Value struct {
	Scope varplane.Scope
	// Raw is the document as JSON (for a key the document itself, for a
	// group the group document); nil when Tier is TierNone. Shared: do not
	// modify.
	Raw json.RawMessage
	// Tier says which tier Raw came from.
	Tier Tier
	// Generation and Revision identify the runtime head; zero for other
	// tiers. Generation is the last generation the client holds for the
	// scope even when the runtime tier is empty (after a no-head).
	Generation varplane.Generation
	Revision   varplane.Revision
}

// Transport selects how the client follows the server.
type Transport string

// Transports.
const (
	// TransportSSE streams GET {base}/watch (the default).
	TransportSSE Transport = "sse"
	// TransportPoll polls GET {base}?key=… with If-None-Match.
	TransportPoll Transport = "poll"
	// TransportNone follows nothing: values come from Fetch alone.
	TransportNone Transport = "none"
)

// OverridePrefix starts the environment variable of a local override.
const OverridePrefix = "VARPLANE_OVERRIDE_"

// OverrideEnv returns the name of the environment variable that overrides
// scope locally: OverridePrefix followed by the scope in upper case with
// every character other than A–Z and 0–9 replaced by '_'
// ("agentic.lanes.vinci" → "VARPLANE_OVERRIDE_AGENTIC_LANES_VINCI").
func OverrideEnv(scope varplane.Scope) string {
	var b strings.Builder
	b.WriteString(OverridePrefix)
	for _, r := range strings.ToUpper(string(scope)) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Options configure a Client. The zero value is usable.
type Options struct {
	// Base is the API base path on the server; "/vars" when empty.
	Base string
	// Token is sent as "Authorization: Bearer <Token>" when set.
	Token string
	// HTTPClient carries every request; when nil, the project's client
	// (bounded dial, handshake and header waits, no overall timeout). Its
	// Timeout must be zero (the stream is long-lived): per-request timeouts
	// come from RequestTimeout, bound through each request's context.
	HTTPClient *http.Client
	// TLS configures the project's client when HTTPClient is nil: the CAs
	// to trust and a client certificate to present (see TLSConfig).
	// Ignored with HTTPClient.
	TLS *tls.Config
	// RequestTimeout bounds every request except the stream. Default 10s.
	RequestTimeout time.Duration
	// Transport is TransportSSE (default), TransportPoll or TransportNone.
	// An SSE client whose server has no watch route (404, 405, 501) polls
	// instead, and tries the stream again after a minute.
	Transport Transport
	// Stream, when set, follows the server instead of Transport (which
	// must then be empty): a transport of a subpackage, such as
	// grpcwatch.Stream (one gRPC Watch stream for every scope, on the
	// server's port).
	Stream Stream
	// PollInterval is the period of ETag polling. Default 5s.
	PollInterval time.Duration
	// BatchWindow gathers the fetches requested within it into one batch
	// request. Default 5ms.
	BatchWindow time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff (full jitter)
	// between reconnects and fetch retries. Defaults 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// StreamIdleTimeout reconnects a stream that delivered nothing, not
	// even a heartbeat, for this long. Default 45s (three heartbeats).
	StreamIdleTimeout time.Duration
	// MaxEventBytes bounds one event of the stream: a larger one breaks the
	// connection (logged) and the client reconnects, rather than buffering
	// without end. Default wire.MaxEventBytes (8 MiB).
	MaxEventBytes int
	// WarnEvery logs a warning every WarnEvery-th unserved attempt of a
	// fetch. Default 5.
	WarnEvery int

	// Static values by scope: the tier below the runtime head.
	Static map[varplane.Scope]json.RawMessage
	// Defaults by scope (e.g. a schema's defaults): the last tier, also
	// filled into a local override.
	Defaults map[varplane.Scope]json.RawMessage
	// Validate checks a value before it is held (the runtime head and the
	// local override). A runtime value that fails keeps the previous one
	// and logs an error; an override that fails makes Register fail.
	Validate func(scope varplane.Scope, value json.RawMessage) error

	// LastKnownGood, when set, is a directory where the client keeps the
	// last runtime head of each scope (written atomically). A client that
	// starts while the server is unreachable serves it with TierStale until
	// the server answers, which replaces it (lkg.go).
	LastKnownGood string

	// Canary, when set, makes the client take part in the canary windows
	// of reviewed changes: a heartbeat, and a report of every open window
	// (canary.go).
	Canary *CanaryOptions

	// Servers are more servers of the same fleet (same base path, same
	// token), tried in order after New's when the one in use cannot be
	// reached (no connection, or 502, 503, 504), round and round.
	Servers []string
	// OnConnection, when set, is called each time the client reaches its
	// server after failing to, or fails to after reaching it (err then
	// says why); the first outcome is reported too. The client logs both
	// (a warning when it is lost, info when it is back). It runs on the
	// client's goroutines: return quickly.
	OnConnection func(connected bool, err error)

	// Logger receives warnings and errors; slog.Default when nil.
	Logger *slog.Logger
	// Getenv reads override variables; os.Getenv when nil.
	Getenv func(string) string
}

// ErrNoValue is returned by Get and Fetch-less reads of a scope that has no
// value in any tier (or was never registered). It matches varplane.ErrNoHead.
var ErrNoValue = &varplane.Error{Code: varplane.CodeNoHead, Message: "scope has no value in any tier"}

// ErrStopped is returned by Fetch on a stopped client.
var ErrStopped = errors.New("client: stopped")

// ErrNotStarted is returned by Fetch before Start.
var ErrNotStarted = errors.New("client: not started")

// Client is a consumer of one varplane server. Create it with New, Register
// the scopes to follow, Start it, and Stop it when done.
type Client struct {
	bases   []*url.URL    // New's server, then Options.Servers
	cur     atomic.Uint32 // index (mod len) of the one in use (reach.go)
	opts    Options
	http    *http.Client
	log     *slog.Logger
	getenv  func(string) string
	started sync.Once
	stopped sync.Once

	slots atomic.Pointer[map[varplane.Scope]*slot] // copy-on-write on Register

	wmu       sync.Mutex // serializes writers: Register, applies
	listeners atomic.Pointer[[]*listener]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{} // the followed set changed: reconnect the stream
	fetchq chan *fetchReq

	connected atomic.Bool
	running   atomic.Bool

	smu       sync.Mutex // guards the reach state below (reach.go)
	heard     bool       // reached was called once
	reachable bool
	downSince time.Time

	canary *canaryState // nil without Options.Canary
}

type listener struct {
	fn func(scope varplane.Scope, old, new Value)
}

type slot struct {
	scope    varplane.Scope
	cur      atomic.Pointer[entry]
	static   json.RawMessage
	def      json.RawMessage
	override bool

	// Guarded by Client.wmu.
	gen varplane.Generation
	// seen is the revision last offered at gen (applied or refused by
	// Options.Validate), "" when gen was a no-head.
	seen    varplane.Revision
	rev     varplane.Revision
	runtime json.RawMessage
	etag    string
	served  chan struct{} // closed while the runtime tier has a value
	// stale is the last-known-good value until the server answers.
	stale    json.RawMessage
	staleGen varplane.Generation
	staleRev varplane.Revision
	// refused: the server refused a fetch of the scope for good (401,
	// 403, 404), so the stream leaves it out until a fetch succeeds;
	// otherwise one refused scope would refuse the stream of all.
	refused bool
}

// entry is immutable once published.
type entry struct {
	val   Value
	typed atomic.Pointer[typedBox]
}

type typedBox struct{ v any }

// New returns a client of the server at serverURL ("http://host:8790").
// It returns an error for a URL that is not absolute http(s).
func New(serverURL string, opts Options) (*Client, error) {
	if opts.Base == "" {
		opts.Base = "/vars"
	}
	var bases []*url.URL
	for _, su := range append([]string{serverURL}, opts.Servers...) {
		u, err := parseServer(su, opts.Base)
		if err != nil {
			return nil, fmt.Errorf("client: server URL %q %v", su, err)
		}
		bases = append(bases, u)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.Stream != nil && opts.Transport != "" {
		return nil, fmt.Errorf("client: Stream and Transport %q both given", opts.Transport)
	}
	if opts.Transport == "" && opts.Stream == nil {
		opts.Transport = TransportSSE
	}
	switch opts.Transport {
	case TransportSSE, TransportPoll, TransportNone, "":
	default:
		return nil, fmt.Errorf("client: unknown transport %q", opts.Transport)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 5 * time.Second
	}
	if opts.BatchWindow <= 0 {
		opts.BatchWindow = 5 * time.Millisecond
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	if opts.StreamIdleTimeout <= 0 {
		opts.StreamIdleTimeout = 45 * time.Second
	}
	if opts.WarnEvery <= 0 {
		opts.WarnEvery = 5
	}
	if opts.MaxEventBytes <= 0 {
		opts.MaxEventBytes = wire.MaxEventBytes
	}
	c := &Client{bases: bases, opts: opts, http: opts.HTTPClient, log: opts.Logger, getenv: opts.Getenv,
		kick: make(chan struct{}, 1), fetchq: make(chan *fetchReq, 256)}
	if c.http == nil {
		c.http = wire.NewHTTPClient(opts.TLS, -1)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.getenv == nil {
		c.getenv = os.Getenv
	}
	if err := c.initCanary(); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.slots.Store(&map[varplane.Scope]*slot{})
	c.listeners.Store(&[]*listener{})
	return c, nil
}

// Register adds scopes to the set the client holds and follows. A scope
// with a local override is resolved from the environment now and never
// asked of the server. Registering a scope again is a no-op. It returns a
// bad-request error for an invalid scope and the Validate error of an
// override that does not fit.
func (c *Client) Register(scopes ...varplane.Scope) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	cur := *c.slots.Load()
	next := make(map[varplane.Scope]*slot, len(cur)+len(scopes))
	for k, v := range cur {
		next[k] = v
	}
	added := false
	for _, sc := range scopes {
		if _, err := varplane.ParseScope(string(sc)); err != nil {
			return err
		}
		if _, ok := next[sc]; ok {
			continue
		}
		s := &slot{scope: sc, static: c.opts.Static[sc], def: c.opts.Defaults[sc], served: make(chan struct{})}
		if raw := c.getenv(OverrideEnv(sc)); raw != "" {
			v, err := c.override(sc, raw)
			if err != nil {
				return err
			}
			s.override = true
			s.cur.Store(&entry{val: Value{Scope: sc, Raw: v, Tier: TierOverride}})
			close(s.served)
		} else {
			c.lkgLoad(s)
			s.cur.Store(&entry{val: s.resolve()})
			added = true
		}
		next[sc] = s
	}
	c.slots.Store(&next)
	if added {
		c.signalKick()
	}
	return nil
}

func (c *Client) override(sc varplane.Scope, raw string) (json.RawMessage, error) {
	if !json.Valid([]byte(raw)) {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "%s is not valid JSON", OverrideEnv(sc))
	}
	v := json.RawMessage(raw)
	if def := c.opts.Defaults[sc]; def != nil {
		merged, err := mergeDefaults(def, v)
		if err != nil {
			return nil, fmt.Errorf("client: fill defaults into %s: %w", OverrideEnv(sc), err)
		}
		v = merged
	}
	if c.opts.Validate != nil {
		if err := c.opts.Validate(sc, v); err != nil {
			return nil, fmt.Errorf("client: %s does not fit the schema of %q: %w", OverrideEnv(sc), sc, err)
		}
	}
	return v, nil
}

// mergeDefaults fills def into v: objects merge recursively with v winning,
// anything else in v replaces def.
func mergeDefaults(def, v json.RawMessage) (json.RawMessage, error) {
	var d, o any
	if err := json.Unmarshal(def, &d); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(v, &o); err != nil {
		return nil, err
	}
	return json.Marshal(merge(d, o))
}

func merge(def, v any) any {
	dm, ok1 := def.(map[string]any)
	vm, ok2 := v.(map[string]any)
	if !ok1 || !ok2 {
		return v
	}
	out := make(map[string]any, len(dm)+len(vm))
	for k, x := range dm {
		out[k] = x
	}
	for k, x := range vm {
		out[k] = merge(dm[k], x)
	}
	return out
}

// resolve computes the value of s from its tiers. Caller holds wmu (or s
// is not yet published).
func (s *slot) resolve() Value {
	v := Value{Scope: s.scope, Generation: s.gen}
	switch {
	case s.runtime != nil:
		v.Raw, v.Tier, v.Revision = s.runtime, TierRuntime, s.rev
	case s.stale != nil:
		v.Raw, v.Tier, v.Generation, v.Revision = s.stale, TierStale, s.staleGen, s.staleRev
	case s.static != nil:
		v.Raw, v.Tier = s.static, TierStatic
	case s.def != nil:
		v.Raw, v.Tier = s.def, TierDefault
	}
	return v
}

func (c *Client) slot(sc varplane.Scope) *slot { return (*c.slots.Load())[sc] }

// Value returns the resolved value of scope without locking or allocating;
// ok is false when the scope is not registered or no tier has a value.
func (c *Client) Value(scope varplane.Scope) (Value, bool) {
	s := (*c.slots.Load())[scope]
	if s == nil {
		return Value{}, false
	}
	e := s.cur.Load()
	return e.val, e.val.Tier != TierNone
}

// Get decodes the resolved value of scope into a T. The decoded value is
// cached with the entry, so repeated reads of an unchanged scope neither
// lock nor allocate; the result is shared (do not mutate maps or slices in
// it). It returns ErrNoValue when no tier has a value (or the scope is not
// registered) and the decoding error when the value is not a T.
func Get[T any](c *Client, scope varplane.Scope) (T, error) {
	var zero T
	s := (*c.slots.Load())[scope]
	if s == nil {
		return zero, ErrNoValue
	}
	e := s.cur.Load()
	if e.val.Tier == TierNone {
		return zero, ErrNoValue
	}
	if b := e.typed.Load(); b != nil {
		if v, ok := b.v.(T); ok {
			return v, nil
		}
	}
	var v T
	if err := json.Unmarshal(e.val.Raw, &v); err != nil {
		return zero, fmt.Errorf("client: decode %q: %w", scope, err)
	}
	e.typed.Store(&typedBox{v: v})
	return v, nil
}

// OnChange registers fn to be called after every change of a registered
// scope's resolved value, in the order changes are applied, on the client's
// goroutine: fn must not block (nor call Register or Fetch). The returned
// function unregisters fn.
func (c *Client) OnChange(fn func(scope varplane.Scope, old, new Value)) (cancel func()) {
	l := &listener{fn: fn}
	c.wmu.Lock()
	cur := *c.listeners.Load()
	next := append(append(make([]*listener, 0, len(cur)+1), cur...), l)
	c.listeners.Store(&next)
	c.wmu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.wmu.Lock()
			defer c.wmu.Unlock()
			cur := *c.listeners.Load()
			next := make([]*listener, 0, len(cur))
			for _, x := range cur {
				if x != l {
					next = append(next, x)
				}
			}
			c.listeners.Store(&next)
		})
	}
}

// Connected reports whether the live stream is currently established.
func (c *Client) Connected() bool { return c.connected.Load() }

// Start launches the follower (stream or poller) and the fetch batcher. It
// returns immediately; calling it again does nothing.
func (c *Client) Start() {
	c.started.Do(func() {
		c.running.Store(true)
		c.wg.Add(2)
		go func() { defer c.wg.Done(); c.batcher() }()
		go func() {
			defer c.wg.Done()
			switch c.opts.Transport {
			case TransportPoll:
				c.poll()
			case TransportSSE:
				c.follow()
			case "":
				c.opts.Stream.Follow(c.ctx, &Follower{c})
			}
		}()
		if c.canary != nil {
			c.wg.Add(1)
			go func() { defer c.wg.Done(); c.canaryLoop() }()
		}
	})
}

// Stop stops every goroutine of the client and waits for them. The held
// values stay readable. Calling it again does nothing.
func (c *Client) Stop() {
	c.stopped.Do(func() {
		c.cancel()
		c.wg.Wait()
		c.connected.Store(false)
	})
}

func (c *Client) signalKick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// applyHead installs a runtime head of sc when gen is newer than the one
// held, or the same with another revision: the store gives one
// generation one revision, but a read replica that a rollout's step
// selected serves the rollout's revision as the base's next generation,
// and after an abort the head's next publish takes that generation with
// another revision (docs/rollouts.md). The applied value is validated
// first.
func (c *Client) applyHead(sc varplane.Scope, gen varplane.Generation, rev varplane.Revision, etag string, doc json.RawMessage) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	s := c.slot(sc)
	if s == nil || s.override || gen < s.gen || (gen == s.gen && (s.seen == "" || rev == "" || rev == s.seen)) {
		return
	}
	s.gen, s.seen = gen, rev
	if s.refused {
		s.refused = false
		c.signalKick()
	}
	if c.opts.Validate != nil {
		if err := c.opts.Validate(sc, doc); err != nil {
			c.log.Error("varplane value does not fit its schema; keeping the previous value", "scope", string(sc), "generation", uint64(gen), "err", err)
			return
		}
	}
	s.runtime, s.rev, s.etag = doc, rev, etag
	s.stale = nil
	c.lkgSave(sc, gen, rev, doc)
	// Publish first: a Fetch woken by served reads the entry at once, and
	// must see this value, not the one before it.
	c.publish(s)
	select {
	case <-s.served:
	default:
		close(s.served)
	}
}

// applyNoHead removes the runtime tier of sc. force applies it without a
// generation (a poll answer of no-head).
func (c *Client) applyNoHead(sc varplane.Scope, gen varplane.Generation, force bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	s := c.slot(sc)
	if s == nil || s.override {
		return
	}
	if !force {
		if gen <= s.gen {
			return
		}
		s.gen, s.seen = gen, ""
	}
	c.lkgDrop(sc)
	if s.runtime == nil && s.stale == nil {
		return
	}
	s.stale = nil
	s.runtime, s.rev, s.etag = nil, "", ""
	s.served = make(chan struct{})
	c.publish(s)
}

// publish stores the re-resolved entry of s and tells the listeners.
// Caller holds wmu.
func (c *Client) publish(s *slot) {
	old := s.cur.Load().val
	nv := s.resolve()
	s.cur.Store(&entry{val: nv})
	for _, l := range *c.listeners.Load() {
		c.callListener(l, s.scope, old, nv)
	}
}

func (c *Client) callListener(l *listener, sc varplane.Scope, old, nv Value) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("varplane OnChange callback panicked", "scope", string(sc), "panic", fmt.Sprint(r))
		}
	}()
	l.fn(sc, old, nv)
}

// held returns the generations held for every followed scope.
func (c *Client) held() (keys, groups []varplane.Scope, gens map[varplane.Scope]varplane.Generation) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	gens = map[varplane.Scope]varplane.Generation{}
	for sc, s := range *c.slots.Load() {
		if s.override || s.refused {
			continue
		}
		if sc.IsGroup() {
			groups = append(groups, sc)
		} else {
			keys = append(keys, sc)
		}
		if s.gen > 0 {
			gens[sc] = s.gen
		}
	}
	return keys, groups, gens
}

// backoff returns the wait before retry number attempt (backoff.Duration: full
// jitter between the configured bounds).
func (c *Client) backoff(attempt int) time.Duration {
	return backoff.Duration(attempt, c.opts.MinBackoff, c.opts.MaxBackoff)
}

// newRequest builds a request for path under the base, with the query, a
// JSON body when body is not nil, and the token.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	u := *c.server()
	u.Path += path
	u.RawQuery = q.Encode()
	return wire.NewRequest(ctx, method, u.String(), c.opts.Token, body)
}

// do sends req; an error answer is the *varplane.Error the server sent.
// A server that cannot answer is left for the next of Options.Servers.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := wire.Do(c.http, req)
	if unreachable(err) && req.Context().Err() == nil {
		c.failedOn(req.URL, err)
	}
	return resp, err
}

// decodeValues extracts the document of sc from a read's values object:
// for a key values[sc], for a group the values object itself.
func decodeValues(sc varplane.Scope, values json.RawMessage) (json.RawMessage, error) {
	if sc.IsGroup() {
		return values, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(values, &m); err != nil {
		return nil, err
	}
	doc, ok := m[string(sc)]
	if !ok {
		return nil, fmt.Errorf("values has no member %q", sc)
	}
	return doc, nil
}
