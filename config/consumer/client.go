// Package consumer is the Go consumer of component configuration: a Client
// shared by every component of a process, and a Configuration per component
// that resolves the component's configuration at start and follows it.
//
// A Configuration subscribes before it fetches, so no created object can fall
// between the two; the fetches of one tick from many components travel as
// one call (identical pairs share one request); while nothing is served it
// retries with the project's backoff (backoff.Duration: full jitter under a bound
// doubling from 1 s up to 10 s), logging rounds 1, 6, 11, …; secret references are substituted from the process environment; what it
// holds is what the service stored, whole (validated against the schema, never
// completed with schema defaults nor coerced); only a strictly newer created
// order replaces the held value, and a later value that does not fit the
// schema is logged and the previous one kept. The local override variable
// VARPLANE_CONFIGURATION_<NAMESPACE>_<NAME> replaces the service altogether.
//
// Concurrency: a Client and a Configuration are safe for concurrent use. The
// values a Configuration returns are shared and immutable: do not modify
// them. Each Client owns one goroutine that delivers created events; Close
// stops it.
package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/internal/backoff"
)

// Source answers fetches: the values service over HTTP (HTTP) or in process
// (ServiceSource).
type Source interface {
	// Fetch returns, in order, the configuration of each pair (JSON null when
	// none) with its created order.
	Fetch(ctx context.Context, pairs []config.Pair) ([]config.Fetched, error)
}

// Subscriber delivers created events.
type Subscriber interface {
	// Subscribe returns once every created event committed from now on will
	// reach onCreated. onCreated must not block. When the subscriber had to
	// re-establish its feed and may have missed events, it calls onResync
	// (nil allowed) once the feed is live again. cancel stops the feed.
	Subscribe(ctx context.Context, onCreated func(config.CreatedEvent), onResync func()) (cancel func(), err error)
}

// Update is one configuration value for a component and epoch.
type Update struct {
	Configuration json.RawMessage
	Created       uint64
}

// ClientOptions tune a Client. The zero value uses the documented defaults.
type ClientOptions struct {
	// Base and Max shape the retry backoff (backoff.Duration: a uniform draw up
	// to min(Base × 2^round, Max)); 1 s and 10 s when zero.
	Base, Max time.Duration
	// Warn: a retry is logged at attempts 1, 1+Warn, 1+2·Warn, …; 5 when 0.
	Warn int
	// Window is how long fetch requests gather before going out as one call
	// (one "tick"); 1 ms when 0.
	Window time.Duration
	// Timeout bounds one fetch call; 30 s when 0.
	Timeout time.Duration
	// Logger receives retries and dropped events; slog.Default when nil.
	Logger *slog.Logger
}

type listener struct{ fn func(Update) }

type call struct {
	done chan struct{}
	res  config.Fetched
	err  error
}

// Client is the one connection of a process to the values service: create
// one per process and hand it to every component's Open, so that their
// fetches share calls and their updates share one subscription.
type Client struct {
	src  Source
	sub  Subscriber
	opts ClientOptions
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	connectMu sync.Mutex
	connected bool
	unsub     func()

	mu        sync.Mutex
	pending   map[config.Pair]*call
	order     []config.Pair
	armed     bool
	listeners map[config.Pair]map[*listener]struct{}

	events chan config.CreatedEvent
	resync chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

// NewClient returns a Client fetching from src and following sub (nil: the
// client fetches but never hears of creates).
func NewClient(src Source, sub Subscriber, opts ClientOptions) *Client {
	if opts.Base <= 0 {
		opts.Base = time.Second
	}
	if opts.Max <= 0 {
		opts.Max = 10 * time.Second
	}
	if opts.Warn <= 0 {
		opts.Warn = 5
	}
	if opts.Window <= 0 {
		opts.Window = time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	c := &Client{
		src: src, sub: sub, opts: opts, log: opts.Logger,
		pending:   map[config.Pair]*call{},
		listeners: map[config.Pair]map[*listener]struct{}{},
		events:    make(chan config.CreatedEvent, 1024),
		resync:    make(chan struct{}, 1),
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.deliver()
	return c
}

// Connect establishes the subscription once; later calls return at once. It
// returns when created events reach the client, so a fetch made after it
// misses nothing.
func (c *Client) Connect(ctx context.Context) error {
	c.connectMu.Lock()
	defer c.connectMu.Unlock()
	if c.connected || c.sub == nil {
		return c.ctx.Err()
	}
	if err := c.ctx.Err(); err != nil {
		return errors.New("consumer: client is closed")
	}
	unsub, err := c.sub.Subscribe(ctx, c.onCreated, c.onResync)
	if err != nil {
		return fmt.Errorf("consumer: subscribe to created events: %w", err)
	}
	c.unsub, c.connected = unsub, true
	return nil
}

// onCreated runs on the subscriber's goroutine, which may be a commit's: it
// only queues. A full queue means events are lost, so the subscribed pairs
// are fetched again instead.
func (c *Client) onCreated(ev config.CreatedEvent) {
	select {
	case c.events <- ev:
	default:
		c.log.Warn("configuration events overflowed; fetching again", "component", ev.Component)
		c.onResync()
	}
}

func (c *Client) onResync() {
	select {
	case c.resync <- struct{}{}:
	default:
	}
}

func (c *Client) deliver() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case ev := <-c.events:
			c.dispatch(config.Pair{Component: ev.Component, Epoch: ev.Epoch}, Update{Configuration: ev.Configuration, Created: ev.Created})
		case <-c.resync:
			c.refetch()
		}
	}
}

func (c *Client) dispatch(p config.Pair, u Update) {
	c.mu.Lock()
	ls := make([]*listener, 0, len(c.listeners[p]))
	for l := range c.listeners[p] {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	for _, l := range ls {
		l.fn(u)
	}
}

// refetch asks once for every subscribed pair and hands what is served to
// the listeners, which keep only what is newer than they hold.
func (c *Client) refetch() {
	c.mu.Lock()
	pairs := make([]config.Pair, 0, len(c.listeners))
	for p := range c.listeners {
		pairs = append(pairs, p)
	}
	c.mu.Unlock()
	for _, p := range pairs {
		c.wg.Add(1) // deliver, itself counted, is running: Close waits for these too
		go func() {
			defer c.wg.Done()
			f, err := c.fetchOnce(c.ctx, p)
			if err != nil || isNull(f.Configuration) {
				return
			}
			c.dispatch(p, Update{Configuration: f.Configuration, Created: f.Created})
		}()
	}
}

// Subscribe registers fn for the updates of component at epoch. fn runs on
// the client's delivery goroutine, one update at a time. The returned
// function unregisters it.
func (c *Client) Subscribe(component, epoch string, fn func(Update)) (cancel func()) {
	p := config.Pair{Component: component, Epoch: epoch}
	l := &listener{fn: fn}
	c.mu.Lock()
	if c.listeners[p] == nil {
		c.listeners[p] = map[*listener]struct{}{}
	}
	c.listeners[p][l] = struct{}{}
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			delete(c.listeners[p], l)
			if len(c.listeners[p]) == 0 {
				delete(c.listeners, p)
			}
			c.mu.Unlock()
		})
	}
}

// Fetch returns the configuration of component at epoch, asking again with
// backoff until one is served; it fails only when ctx ends or the client is
// closed. Fetches of the same tick share one call to the source.
func (c *Client) Fetch(ctx context.Context, component, epoch string) (Update, error) {
	p := config.Pair{Component: component, Epoch: epoch}
	for round := 0; ; round++ {
		f, err := c.fetchOnce(ctx, p)
		if err == nil && !isNull(f.Configuration) {
			return Update{Configuration: f.Configuration, Created: f.Created}, nil
		}
		if ctx.Err() != nil || c.ctx.Err() != nil {
			return Update{}, fmt.Errorf("consumer: fetch configuration of %s: %w", component, errors.Join(ctx.Err(), c.ctx.Err()))
		}
		attempt := round + 1
		wait := backoff.Duration(round, c.opts.Base, c.opts.Max)
		if (attempt-1)%c.opts.Warn == 0 {
			attrs := []any{"component", component, "epoch", epoch, "attempt", attempt, "retryIn", wait.String()}
			if err != nil {
				attrs = append(attrs, "err", err)
			}
			c.log.Warn("configuration not served yet, retrying", attrs...)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-c.ctx.Done():
			t.Stop()
		}
	}
}

// fetchOnce joins p to the current tick's call (or starts one) and waits.
func (c *Client) fetchOnce(ctx context.Context, p config.Pair) (config.Fetched, error) {
	c.mu.Lock()
	cl, ok := c.pending[p]
	if !ok {
		cl = &call{done: make(chan struct{})}
		c.pending[p] = cl
		c.order = append(c.order, p)
	}
	if !c.armed {
		c.armed = true
		time.AfterFunc(c.opts.Window, c.flush)
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		return config.Fetched{}, ctx.Err()
	case <-c.ctx.Done():
		return config.Fetched{}, c.ctx.Err()
	}
}

// flush sends the tick's pairs as one fetch.
func (c *Client) flush() {
	c.mu.Lock()
	pending, order := c.pending, c.order
	c.pending, c.order, c.armed = map[config.Pair]*call{}, nil, false
	c.mu.Unlock()
	if len(order) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.Timeout)
	defer cancel()
	res, err := c.src.Fetch(ctx, order)
	if err == nil && len(res) != len(order) {
		err = fmt.Errorf("consumer: fetch answered %d results for %d pairs", len(res), len(order))
	}
	for i, p := range order {
		cl := pending[p]
		if err != nil {
			cl.err = err
		} else {
			cl.res = res[i]
		}
		close(cl.done)
	}
}

// Close stops the subscription and the delivery goroutine. Fetches in
// progress fail.
func (c *Client) Close() {
	c.closed.Do(func() {
		c.connectMu.Lock()
		if c.unsub != nil {
			c.unsub()
		}
		c.connectMu.Unlock()
		c.cancel()
		c.wg.Wait()
	})
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
