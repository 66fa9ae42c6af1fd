// Package openfeature is an OpenFeature provider for Go over varplane's
// SDK (package client): flags are read from the client's live snapshot in
// memory, and change with it.
//
// A flag key names a scope and a JSON Pointer into its document, as on
// the server's OFREP routes (docs/openfeature.md): "agentic.lanes.vinci#/enabled"
// is the member enabled of the scope's document, "agentic.lanes.vinci" the
// whole document (an object flag). The variant is the revision served, the
// flag metadata the scope, generation and revision; the reason is STATIC
// for the server's head, CACHED for the last-known-good copy read before the
// server answered, DEFAULT for the client's static and default tiers.
//
// The provider emits PROVIDER_CONFIGURATION_CHANGED when a scope it holds
// changes (FlagChanges names the scope and the flags of it evaluated so
// far), PROVIDER_STALE when the client loses its server (values keep being
// served from memory) and PROVIDER_READY when it reaches it again; Init
// fails (the provider is then in ERROR) when the scopes of Options.Scopes
// are not served in time.
//
// This package is the only one that links the OpenFeature Go SDK: a
// program that uses package client alone does not.
package openfeature

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	of "github.com/open-feature/go-sdk/openfeature"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/internal/wire"
)

// Name is the provider's name in its metadata.
const Name = "varplane"

// Options configure a Provider. The zero value is usable.
type Options struct {
	// Scopes are registered with the client and fetched by Init, so the
	// flags of them read memory from the first evaluation.
	Scopes []varplane.Scope
	// InitTimeout bounds Init's wait for Scopes to be served (default
	// 10s). Past it Init fails and the provider is in ERROR until the
	// server answers.
	InitTimeout time.Duration
	// FetchTimeout bounds how long the first evaluation of a flag whose
	// scope the client does not hold yet waits for it (default 2s): the
	// scope is registered then, and read from memory afterwards. Past it
	// the evaluation answers FLAG_NOT_FOUND (the server reached, no head)
	// or GENERAL (the server away); so do the later ones at once until
	// the scope has a value.
	FetchTimeout time.Duration
	// MaxScopes bounds the scopes first met in evaluations that the
	// provider registers with the client (default 1,024): each is
	// followed from then on. Past it an evaluation of another scope
	// answers GENERAL.
	MaxScopes int
	// MaxFlagsPerScope bounds the flag keys remembered per scope for the
	// FlagChanges of change events (default 256); the scope's name is
	// always there.
	MaxFlagsPerScope int
}

// Provider is an OpenFeature provider over a varplane client. Build it with
// New and register it with openfeature.SetProviderAndWait (which calls
// Init); Shutdown stops the client.
type Provider struct {
	c    *client.Client
	opts Options

	events chan of.Event
	signal chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	ready     bool                               // Init succeeded, or the server was reached since
	connected bool                               // the client's last connection outcome
	stale     bool                               // STALE is the last state announced
	state     of.EventType                       // a state event to send ("" none)
	changed   map[varplane.Scope]struct{}        // scopes changed since the last change event
	flags     map[varplane.Scope]map[string]bool // flag keys evaluated, per scope
	tried     map[varplane.Scope]error           // scopes fetched by evaluations: nil, or why refused for good
	started   bool
	stopOnce  sync.Once
	cancelFn  func()
}

// New returns a provider over a new client of the server at serverURL
// with copts (see client.New). The provider chains copts.OnConnection to
// follow the server's presence; Init starts the client.
func New(serverURL string, copts client.Options, opts Options) (*Provider, error) {
	if opts.InitTimeout <= 0 {
		opts.InitTimeout = 10 * time.Second
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = 2 * time.Second
	}
	if opts.MaxScopes <= 0 {
		opts.MaxScopes = 1024
	}
	if opts.MaxFlagsPerScope <= 0 {
		opts.MaxFlagsPerScope = 256
	}
	p := &Provider{
		opts:    opts,
		events:  make(chan of.Event, 16),
		signal:  make(chan struct{}, 1),
		done:    make(chan struct{}),
		changed: map[varplane.Scope]struct{}{},
		flags:   map[varplane.Scope]map[string]bool{},
		tried:   map[varplane.Scope]error{},
	}
	user := copts.OnConnection
	copts.OnConnection = func(connected bool, err error) {
		p.onConnection(connected)
		if user != nil {
			user(connected, err)
		}
	}
	c, err := client.New(serverURL, copts)
	if err != nil {
		return nil, err
	}
	if err := c.Register(opts.Scopes...); err != nil {
		return nil, err
	}
	p.c = c
	return p, nil
}

// Client returns the varplane client the provider reads.
func (p *Provider) Client() *client.Client { return p.c }

// Metadata names the provider.
func (p *Provider) Metadata() of.Metadata { return of.Metadata{Name: Name} }

// Hooks returns none.
func (p *Provider) Hooks() []of.Hook { return nil }

// EventChannel is the channel of the provider's events.
func (p *Provider) EventChannel() <-chan of.Event { return p.events }

// Init starts the client and waits until every scope of Options.Scopes is
// served, at most Options.InitTimeout.
func (p *Provider) Init(ec of.EvaluationContext) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.InitTimeout)
	defer cancel()
	return p.InitWithContext(ctx, ec)
}

// InitWithContext is Init bounded by ctx (and Options.InitTimeout).
func (p *Provider) InitWithContext(ctx context.Context, _ of.EvaluationContext) error {
	p.mu.Lock()
	if !p.started {
		p.started = true
		p.cancelFn = p.c.OnChange(p.onChange)
		p.wg.Add(1)
		go p.forward()
		p.c.Start()
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.opts.InitTimeout)
	defer cancel()
	for _, sc := range p.opts.Scopes {
		if _, err := p.c.Fetch(ctx, sc); err != nil {
			return fmt.Errorf("varplane: scope %s not served: %w", sc, err)
		}
	}
	p.mu.Lock()
	p.ready = true
	p.state = "" // Init's own answer says READY
	p.mu.Unlock()
	return nil
}

// Shutdown stops the client and the provider's events.
func (p *Provider) Shutdown() { _ = p.ShutdownWithContext(context.Background()) }

// ShutdownWithContext is Shutdown; it does not wait on ctx.
func (p *Provider) ShutdownWithContext(context.Context) error {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		cancel := p.cancelFn
		p.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		p.c.Stop()
		close(p.done)
		p.wg.Wait()
	})
	return nil
}

// onConnection follows the client's server: lost after READY is STALE,
// reached again is READY.
func (p *Provider) onConnection(connected bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected = connected
	switch {
	case connected && (!p.ready || p.stale):
		p.ready, p.stale = true, false
		p.state = of.ProviderReady
	case !connected && p.ready && !p.stale:
		p.stale = true
		p.state = of.ProviderStale
	default:
		return
	}
	p.kick()
}

// onChange runs on the client's goroutine: it must not block.
func (p *Provider) onChange(scope varplane.Scope, _, _ client.Value) {
	p.mu.Lock()
	p.changed[scope] = struct{}{}
	p.kick()
	p.mu.Unlock()
}

// kick wakes the forwarder; p.mu is held.
func (p *Provider) kick() {
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// forward sends the pending events on the channel, the state first, then
// one change event for the scopes changed since the last one: however
// slowly the SDK reads, what is pending is bounded by the scopes held.
func (p *Provider) forward() {
	defer p.wg.Done()
	for {
		select {
		case <-p.done:
			return
		case <-p.signal:
		}
		p.mu.Lock()
		state := p.state
		p.state = ""
		var changes []string
		for sc := range p.changed {
			changes = append(changes, string(sc))
			for k := range p.flags[sc] {
				if k != string(sc) {
					changes = append(changes, k)
				}
			}
		}
		clear(p.changed)
		p.mu.Unlock()
		if state != "" && !p.send(of.Event{ProviderName: Name, EventType: state,
			ProviderEventDetails: of.ProviderEventDetails{Message: "varplane server " + stateWord(state)}}) {
			return
		}
		if len(changes) > 0 && !p.send(of.Event{ProviderName: Name, EventType: of.ProviderConfigChange,
			ProviderEventDetails: of.ProviderEventDetails{Message: "scopes changed", FlagChanges: changes}}) {
			return
		}
	}
}

func stateWord(t of.EventType) string {
	if t == of.ProviderStale {
		return "unreachable: serving the values held"
	}
	return "reached"
}

func (p *Provider) send(ev of.Event) bool {
	select {
	case p.events <- ev:
		return true
	case <-p.done:
		return false
	}
}

// resolve finds the flag's raw value and the detail of where it came from.
func (p *Provider) resolve(ctx context.Context, flag string) ([]byte, of.ProviderResolutionDetail) {
	fk, err := wire.ParseFlagKey(flag)
	if err != nil {
		return nil, failed(of.NewFlagNotFoundResolutionError(varplane.ErrorMessage(err)))
	}
	v, ok := p.c.Value(fk.Scope)
	if !ok {
		if v, err = p.fetch(ctx, fk.Scope); err != nil {
			return nil, failed(p.unserved(fk.Scope, err))
		}
	}
	p.remember(fk.Scope, flag)
	raw, err := wire.LookupFlag(v.Raw, fk.Tokens)
	if err != nil {
		return nil, failed(of.NewFlagNotFoundResolutionError("no such flag: the document has no value at its JSON Pointer"))
	}
	d := of.ProviderResolutionDetail{Reason: of.StaticReason}
	switch v.Tier {
	case client.TierStale:
		d.Reason = of.CachedReason
	case client.TierStatic, client.TierDefault:
		d.Reason = of.DefaultReason
	}
	d.FlagMetadata = of.FlagMetadata{"scope": string(v.Scope), "tier": v.Tier.String()}
	if v.Revision != "" {
		d.Variant = string(v.Revision)
		d.FlagMetadata["revision"] = string(v.Revision)
		d.FlagMetadata["generation"] = int64(v.Generation)
	}
	return raw, d
}

// fetch waits for a scope the client does not hold, once: a scope met for
// the first time is registered (at most Options.MaxScopes of them) and
// fetched for at most Options.FetchTimeout; later evaluations of a scope
// that was tried and still has no value answer at once, while the client
// keeps following it.
func (p *Provider) fetch(ctx context.Context, sc varplane.Scope) (client.Value, error) {
	p.mu.Lock()
	prev, tried := p.tried[sc]
	if !tried && len(p.tried) >= p.opts.MaxScopes {
		p.mu.Unlock()
		return client.Value{}, errTooManyScopes
	}
	if !tried {
		p.tried[sc] = nil
	}
	p.mu.Unlock()
	if tried {
		if prev == nil {
			prev = errNotServed
		}
		return client.Value{}, prev
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.FetchTimeout)
	defer cancel()
	v, err := p.c.Fetch(ctx, sc)
	if err != nil && client.Refused(err) {
		p.mu.Lock()
		p.tried[sc] = err // refused for good: the client follows it no more
		p.mu.Unlock()
	}
	return v, err
}

var (
	errNotServed     = errors.New("not served yet")
	errTooManyScopes = errors.New("too many scopes")
)

// unserved is the resolution error of a scope without a value: not found
// while the server answers, general while it is away or refuses.
func (p *Provider) unserved(sc varplane.Scope, err error) of.ResolutionError {
	switch {
	case err == errTooManyScopes:
		return of.NewGeneralResolutionError(fmt.Sprintf("the provider holds %d scopes already (Options.MaxScopes)", p.opts.MaxScopes))
	case client.Refused(err) && varplane.ErrorCode(err) != varplane.CodeNotFound:
		return of.NewGeneralResolutionError("the token may not read the flag's scope")
	}
	p.mu.Lock()
	connected := p.connected
	p.mu.Unlock()
	if connected {
		return of.NewFlagNotFoundResolutionError("no such flag: its scope " + string(sc) + " has no value")
	}
	return of.NewGeneralResolutionError("the flag's scope is not served: the server cannot be reached")
}

// remember records a flag evaluated, for the FlagChanges of change events.
func (p *Provider) remember(sc varplane.Scope, flag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.flags[sc]
	if m[flag] {
		return
	}
	if m == nil {
		m = map[string]bool{}
		p.flags[sc] = m
	}
	if len(m) < p.opts.MaxFlagsPerScope {
		m[flag] = true
	}
}

func failed(e of.ResolutionError) of.ProviderResolutionDetail {
	return of.ProviderResolutionDetail{ResolutionError: e, Reason: of.ErrorReason}
}

func mismatch(want string) of.ProviderResolutionDetail {
	return failed(of.NewTypeMismatchResolutionError("the flag's value is not " + want))
}

// BooleanEvaluation resolves a flag whose value is true or false.
func (p *Provider) BooleanEvaluation(ctx context.Context, flag string, def bool, _ of.FlattenedContext) of.BoolResolutionDetail {
	raw, d := p.resolve(ctx, flag)
	if raw == nil {
		return of.BoolResolutionDetail{Value: def, ProviderResolutionDetail: d}
	}
	switch string(raw) {
	case "true":
		return of.BoolResolutionDetail{Value: true, ProviderResolutionDetail: d}
	case "false":
		return of.BoolResolutionDetail{Value: false, ProviderResolutionDetail: d}
	}
	return of.BoolResolutionDetail{Value: def, ProviderResolutionDetail: mismatch("a boolean")}
}

// StringEvaluation resolves a flag whose value is a string.
func (p *Provider) StringEvaluation(ctx context.Context, flag string, def string, _ of.FlattenedContext) of.StringResolutionDetail {
	raw, d := p.resolve(ctx, flag)
	if raw == nil {
		return of.StringResolutionDetail{Value: def, ProviderResolutionDetail: d}
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return of.StringResolutionDetail{Value: def, ProviderResolutionDetail: mismatch("a string")}
	}
	return of.StringResolutionDetail{Value: s, ProviderResolutionDetail: d}
}

// FloatEvaluation resolves a flag whose value is a number.
func (p *Provider) FloatEvaluation(ctx context.Context, flag string, def float64, _ of.FlattenedContext) of.FloatResolutionDetail {
	raw, d := p.resolve(ctx, flag)
	if raw == nil {
		return of.FloatResolutionDetail{Value: def, ProviderResolutionDetail: d}
	}
	f, ok := number(raw)
	if !ok {
		return of.FloatResolutionDetail{Value: def, ProviderResolutionDetail: mismatch("a number")}
	}
	return of.FloatResolutionDetail{Value: f, ProviderResolutionDetail: d}
}

// IntEvaluation resolves a flag whose value is an integer: a number
// without a fraction within int64 (a stored document holds none that a
// double would change, so 1e3 is 1000 and 2.5 a type mismatch).
func (p *Provider) IntEvaluation(ctx context.Context, flag string, def int64, _ of.FlattenedContext) of.IntResolutionDetail {
	raw, d := p.resolve(ctx, flag)
	if raw == nil {
		return of.IntResolutionDetail{Value: def, ProviderResolutionDetail: d}
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return of.IntResolutionDetail{Value: n, ProviderResolutionDetail: d}
	}
	f, ok := number(raw)
	if !ok || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return of.IntResolutionDetail{Value: def, ProviderResolutionDetail: mismatch("an integer")}
	}
	return of.IntResolutionDetail{Value: int64(f), ProviderResolutionDetail: d}
}

// ObjectEvaluation resolves a flag of any JSON value, decoded as
// encoding/json decodes into an any (objects map[string]any, numbers
// float64); an object, an array or null. A boolean, string or number is a
// type mismatch: it has its own evaluation.
func (p *Provider) ObjectEvaluation(ctx context.Context, flag string, def any, _ of.FlattenedContext) of.InterfaceResolutionDetail {
	raw, d := p.resolve(ctx, flag)
	if raw == nil {
		return of.InterfaceResolutionDetail{Value: def, ProviderResolutionDetail: d}
	}
	switch raw[0] {
	case '{', '[', 'n':
	default:
		return of.InterfaceResolutionDetail{Value: def, ProviderResolutionDetail: mismatch("an object")}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return of.InterfaceResolutionDetail{Value: def, ProviderResolutionDetail: failed(of.NewParseErrorResolutionError(err.Error()))}
	}
	return of.InterfaceResolutionDetail{Value: v, ProviderResolutionDetail: d}
}

func number(raw []byte) (float64, bool) {
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return f, err == nil
}
