package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// MaxBatch is the most scopes one batch request names.
const MaxBatch = 256

type fetchReq struct {
	scope varplane.Scope
	// done receives the error that ends the fetch when the server refuses
	// the scope for good (401, 403, 404); buffered, written once.
	done chan error
}

// Refused reports whether err, Fetch's error, says the server refused the
// scope for good (the token is not accepted, may not read the scope, or
// the server has no such route): the client no longer follows it.
func Refused(err error) bool { return final(err) }

// final reports whether err, the server's answer to a read, ends a fetch
// at once instead of being retried: the token is not accepted, may not
// read the scope, or the server has no such route (a wrong base path).
// A scope without a head is not final: a fetch waits until it is served.
func final(err error) bool {
	switch varplane.ErrorCode(err) {
	case varplane.CodeUnauthorized, varplane.CodeForbidden, varplane.CodeNotFound:
		var ve *varplane.Error
		return errors.As(err, &ve)
	}
	return false
}

// Fetch registers scope and waits until the server serves a head for it
// ("retry until served"), logging a warning every Options.WarnEvery-th
// unserved attempt. The fetches of one tick (Options.BatchWindow) go out as
// one batch request. It returns at once for a scope already served or
// overridden, an error wrapping ctx's (naming the scope) when ctx ends
// first, ErrNotStarted before Start and ErrStopped after Stop.
func (c *Client) Fetch(ctx context.Context, scope varplane.Scope) (Value, error) {
	if err := c.Register(scope); err != nil {
		return Value{}, err
	}
	s := c.slot(scope)
	c.wmu.Lock()
	served := s.served
	c.wmu.Unlock()
	select {
	case <-served:
		v, _ := c.Value(scope)
		return v, nil
	default:
	}
	if !c.running.Load() {
		return Value{}, ErrNotStarted
	}
	req := &fetchReq{scope: scope, done: make(chan error, 1)}
	select {
	case c.fetchq <- req:
	case <-ctx.Done():
		return Value{}, ctx.Err()
	case <-c.ctx.Done():
		return Value{}, ErrStopped
	}
	select {
	case <-served:
		v, _ := c.Value(scope)
		return v, nil
	case err := <-req.done:
		return Value{}, fmt.Errorf("client: fetch %s: %w", scope, err)
	case <-ctx.Done():
		// ctx's error alone names neither the scope nor why it waited.
		return Value{}, fmt.Errorf("client: fetch %s: not served before the context ended (the scope has no head, or no server answered: the warnings logged say which): %w", scope, ctx.Err())
	case <-c.ctx.Done():
		return Value{}, ErrStopped
	}
}

type retryState struct {
	attempts int
	due      time.Time
	waiters  []chan error // the fetches waiting for the scope
}

// fail ends every fetch waiting for st's scope with err.
func (st *retryState) fail(err error) {
	for _, w := range st.waiters {
		w <- err
	}
	st.waiters = nil
}

// batcher gathers fetches into batch requests and retries the unserved.
func (c *Client) batcher() {
	pending := map[varplane.Scope]*retryState{}
	add := func(r *fetchReq) {
		st, ok := pending[r.scope]
		if !ok {
			st = &retryState{}
			pending[r.scope] = st
		}
		if r.done != nil {
			st.waiters = append(st.waiters, r.done)
		}
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		var wake <-chan time.Time
		if len(pending) > 0 {
			earliest := time.Time{}
			for _, st := range pending {
				if earliest.IsZero() || st.due.Before(earliest) {
					earliest = st.due
				}
			}
			retry.Reset(max(time.Until(earliest), 0))
			wake = retry.C
		}
		select {
		case <-c.ctx.Done():
			return
		case r := <-c.fetchq:
			add(r)
			window := time.NewTimer(c.opts.BatchWindow)
		gather:
			for {
				select {
				case r := <-c.fetchq:
					add(r)
				case <-window.C:
					break gather
				case <-c.ctx.Done():
					window.Stop()
					return
				}
			}
		case <-wake:
		}
		c.runBatch(pending)
	}
}

// runBatch asks for every due scope of pending that is still unserved.
func (c *Client) runBatch(pending map[varplane.Scope]*retryState) {
	now := time.Now()
	var due []varplane.Scope
	for sc, st := range pending {
		if c.isServed(sc) {
			delete(pending, sc)
			continue
		}
		if !st.due.After(now) {
			due = append(due, sc)
		}
	}
	for len(due) > 0 {
		n := min(len(due), MaxBatch)
		chunk := due[:n]
		due = due[n:]
		served, err := c.batch(chunk)
		switch {
		case err == nil:
			c.reached(true, nil)
		case unreachable(err):
			c.reached(false, err)
		case final(err) && len(chunk) > 1:
			// One refused scope fails the whole batch: ask for each alone,
			// so that only the refused ones end.
			for _, sc := range chunk {
				one := []varplane.Scope{sc}
				served, err := c.batch(one)
				c.settle(pending, one, served, err)
			}
			continue
		}
		c.settle(pending, chunk, served, err)
	}
}

// settle records the outcome of a batch for chunk: served scopes leave
// pending; a scope refused for good (a single-scope batch answered 401,
// 403 or 404) ends its fetches with the server's error; the others are
// retried with backoff, with a warning every WarnEvery-th attempt.
func (c *Client) settle(pending map[varplane.Scope]*retryState, chunk []varplane.Scope, served map[varplane.Scope]bool, err error) {
	for _, sc := range chunk {
		st := pending[sc]
		if st == nil {
			continue
		}
		if len(chunk) == 1 && final(err) {
			c.log.Warn("varplane scope refused by the server; the fetch ends", "scope", string(sc), "err", err)
			c.refuse(sc)
			st.fail(err)
			delete(pending, sc)
			continue
		}
		if served[sc] || c.isServed(sc) {
			delete(pending, sc)
			continue
		}
		st.attempts++
		st.due = time.Now().Add(c.backoff(st.attempts - 1))
		if st.attempts%c.opts.WarnEvery == 0 {
			reason := "no head"
			if err != nil {
				reason = err.Error()
			}
			c.log.Warn("varplane scope not served yet; still trying", "scope", string(sc), "attempts", st.attempts, "reason", reason)
		}
	}
}

// refuse leaves sc out of the stream until a fetch of it succeeds.
func (c *Client) refuse(sc varplane.Scope) {
	c.wmu.Lock()
	s := c.slot(sc)
	kick := s != nil && !s.refused
	if kick {
		s.refused = true
	}
	c.wmu.Unlock()
	if kick {
		c.signalKick()
	}
}

func (c *Client) isServed(sc varplane.Scope) bool {
	s := c.slot(sc)
	if s == nil {
		return true
	}
	t := s.cur.Load().val.Tier
	return t == TierRuntime || t == TierOverride
}

type batchItem struct {
	Scope      varplane.Scope      `json:"scope"`
	Status     string              `json:"status"`
	Generation varplane.Generation `json:"generation"`
	Revision   varplane.Revision   `json:"revision"`
	Values     json.RawMessage     `json:"values"`
}

// batch sends one GET {base}/batch for scopes and applies what it answers.
func (c *Client) batch(scopes []varplane.Scope) (map[varplane.Scope]bool, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
	defer cancel()
	q := url.Values{}
	for _, sc := range scopes {
		if sc.IsGroup() {
			q.Add("group", string(sc))
		} else {
			q.Add("key", string(sc))
		}
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/batch", q, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, fmt.Errorf("batch read: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("batch read: the server answered %s", resp.Status)
	}
	var body struct {
		Items []batchItem `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("batch read: decode: %w", err)
	}
	served := make(map[varplane.Scope]bool, len(body.Items))
	for _, it := range body.Items {
		if it.Status != "ok" {
			continue
		}
		doc, err := decodeValues(it.Scope, it.Values)
		if err != nil {
			c.log.Error("varplane batch item is malformed", "scope", string(it.Scope), "err", err)
			continue
		}
		c.applyHead(it.Scope, it.Generation, it.Revision, `"`+string(it.Revision)+`"`, doc)
		served[it.Scope] = true
	}
	return served, nil
}

// errNoWatch: the server has no stream route, so the client polls.
var errNoWatch = errors.New("client: the server offers no watch stream")

// errKicked: the followed set changed; reconnect at once.
var errKicked = errors.New("client: followed scopes changed")

// follow keeps an SSE stream open, reconnecting with backoff, and falls
// back to polling when the server has no stream.
func (c *Client) follow() {
	attempt := 0
	for c.ctx.Err() == nil {
		// The set read below holds every change signalled so far: a kick
		// left from before would only cut the stream about to open.
		select {
		case <-c.kick:
		default:
		}
		keys, groups, gens := c.held()
		if len(keys)+len(groups) == 0 {
			select {
			case <-c.ctx.Done():
				return
			case <-c.kick:
			}
			continue
		}
		server := c.server()
		established, err := c.stream(keys, groups, gens)
		c.connected.Store(false)
		if !established && c.ctx.Err() == nil && !errors.Is(err, errNoWatch) && !errors.Is(err, errKicked) {
			if unreachable(err) {
				c.failedOn(server, err)
				c.reached(false, err)
			} else {
				// Reached, and refused (a token that may not read a
				// scope, say): the held values stay, and the reason is
				// worth a warning on each retry.
				c.log.Warn("varplane stream refused; retrying", "err", err)
			}
		}
		switch {
		case c.ctx.Err() != nil:
			return
		case errors.Is(err, errNoWatch):
			c.log.Warn("varplane server has no watch stream; polling with ETags", "interval", c.opts.PollInterval, "retry_stream_in", streamRetry)
			c.pollFor(streamRetry)
			continue
		case errors.Is(err, errKicked):
			attempt = 0
			continue
		}
		if established {
			attempt = 0
		}
		d := c.backoff(attempt)
		attempt++
		if errors.Is(err, wire.ErrEventTooLarge) {
			c.log.Warn("varplane stream sent an event over the client's bound; reconnecting", "max_event_bytes", c.opts.MaxEventBytes, "in", d)
		} else {
			c.log.Debug("varplane stream ended; reconnecting", "err", err, "in", d)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick: // a new scope: reconnect now
		case <-time.After(d):
		}
	}
}

// stream runs one SSE connection until it ends. established reports that
// the server accepted it.
func (c *Client) stream(keys, groups []varplane.Scope, gens map[varplane.Scope]varplane.Generation) (established bool, err error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	q := url.Values{}
	for _, k := range keys {
		q.Add("key", string(k))
	}
	for _, g := range groups {
		q.Add("group", string(g))
	}
	for sc, g := range gens {
		q.Add("since", string(sc)+"@"+strconv.FormatUint(uint64(g), 10))
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/watch", q, nil)
	if err != nil {
		return false, err
	}
	wire.SetStreamHeaders(req)
	connectTimer := time.AfterFunc(c.opts.RequestTimeout, cancel)
	resp, err := c.http.Do(req)
	connectTimer.Stop()
	if err != nil {
		return false, fmt.Errorf("connect stream: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return false, errNoWatch
	}
	if err := wire.CheckStream(resp); err != nil {
		if errors.Is(err, wire.ErrNotEventStream) {
			return false, errNoWatch
		}
		return false, fmt.Errorf("connect stream: %w", err)
	}
	c.connected.Store(true)
	c.reached(true, nil)

	var kicked atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-c.kick:
			kicked.Store(true)
			cancel()
		case <-ctx.Done():
		}
	}()
	defer wg.Wait()
	defer cancel()
	idle := time.AfterFunc(c.opts.StreamIdleTimeout, cancel)
	defer idle.Stop()

	err = c.readEvents(resp.Body, func() { idle.Reset(c.opts.StreamIdleTimeout) })
	if kicked.Load() {
		return true, errKicked
	}
	return true, err
}

// readEvents reads an event stream (wire.SSEReader, each event bounded by
// Options.MaxEventBytes) and applies its events; alive is called on every
// frame received, heartbeats included. It returns the error that ends the
// stream: io.ErrUnexpectedEOF at its end, wire.ErrEventTooLarge for an event
// over the bound, or the error of a close event.
func (c *Client) readEvents(r io.Reader, alive func()) error {
	sr := wire.NewSSEReader(r, c.opts.MaxEventBytes)
	for {
		ev, err := sr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		alive()
		if ev.Name == "" && ev.Data == "" {
			continue // a heartbeat or a retry field
		}
		if err := c.dispatch(ev.Name, ev.Data); err != nil {
			return err
		}
	}
}

type headEvent struct {
	Scope      varplane.Scope      `json:"scope"`
	Generation varplane.Generation `json:"generation"`
	Revision   varplane.Revision   `json:"revision"`
	Values     json.RawMessage     `json:"values"`
}

// dispatch applies one event; an error ends the stream.
func (c *Client) dispatch(event, data string) error {
	switch event {
	case "head":
		var h headEvent
		if err := json.Unmarshal([]byte(data), &h); err != nil {
			c.log.Error("varplane head event is malformed", "err", err)
			return nil
		}
		doc, err := decodeValues(h.Scope, h.Values)
		if err != nil {
			c.log.Error("varplane head event is malformed", "scope", string(h.Scope), "err", err)
			return nil
		}
		c.applyHead(h.Scope, h.Generation, h.Revision, `"`+string(h.Revision)+`"`, doc)
	case "no-head":
		var h headEvent
		if err := json.Unmarshal([]byte(data), &h); err != nil {
			c.log.Error("varplane no-head event is malformed", "err", err)
			return nil
		}
		c.applyNoHead(h.Scope, h.Generation, false)
	case "close":
		return fmt.Errorf("server closed the stream: %s", data)
	}
	return nil
}

// streamRetry is how long a client whose server had no stream polls before
// it tries the stream again (the server may have been upgraded).
const streamRetry = time.Minute

// poll follows every registered scope with conditional reads until Stop.
func (c *Client) poll() { c.pollFor(0) }

// pollFor polls for d (forever when d is 0) or until Stop.
func (c *Client) pollFor(d time.Duration) {
	var until time.Time
	if d > 0 {
		until = time.Now().Add(d)
	}
	for {
		if !until.IsZero() && time.Now().After(until) {
			return
		}
		for sc, s := range *c.slots.Load() {
			if s.override {
				continue
			}
			if c.ctx.Err() != nil {
				return
			}
			c.pollOne(sc, s)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		case <-time.After(c.opts.PollInterval):
		}
	}
}

func (c *Client) pollOne(sc varplane.Scope, s *slot) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
	defer cancel()
	q := url.Values{}
	if sc.IsGroup() {
		q.Set("group", string(sc))
	} else {
		q.Set("key", string(sc))
	}
	req, err := c.newRequest(ctx, http.MethodGet, "", q, nil)
	if err != nil {
		return
	}
	c.wmu.Lock()
	etag := s.etag
	c.wmu.Unlock()
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	clearETag := func() {
		c.wmu.Lock()
		s.etag = ""
		c.wmu.Unlock()
	}
	resp, err := c.do(req)
	if err != nil {
		clearETag()
		if errors.Is(err, varplane.ErrNoHead) {
			c.reached(true, nil)
			c.applyNoHead(sc, 0, true)
			return
		}
		if unreachable(err) && c.ctx.Err() == nil {
			c.reached(false, err)
		}
		c.log.Debug("varplane poll failed", "scope", string(sc), "err", err)
		return
	}
	c.reached(true, nil)
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
	case http.StatusOK:
		var h headEvent
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			clearETag()
			return
		}
		doc, err := decodeValues(sc, h.Values)
		if err != nil {
			clearETag()
			return
		}
		c.applyHead(sc, h.Generation, h.Revision, resp.Header.Get("ETag"), doc)
	default:
		clearETag()
		c.log.Debug("varplane poll answered an unexpected status", "scope", string(sc), "status", resp.StatusCode)
	}
}
