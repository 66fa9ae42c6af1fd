package rpc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// DefaultMaxWatches is the most watches one Watch stream holds at once; a
// create past it is canceled with too-many-subscribers. Each watch is also
// a subscription of the hub, counted by its caps (--max-subscribers, per
// token).
const DefaultMaxWatches = 4096

// watchRequests is how many requests the reader hands ahead to the writer:
// past it the reader stops reading, and HTTP/2 flow control stops the
// client, so a client that floods requests without reading its responses
// holds a bounded amount of the server's memory.
const watchRequests = 16

// watchAhead bounds what the server reads of a Watch stream's request body
// before the watcher has consumed it (see GRPCServer.ServeHTTP): room for
// two requests of the largest size, so that a whole request always fits.
const watchAhead = 2 * maxRequestBody

// meterKey carries a Watch request's meteredBody to the watcher.
type meterKey struct{}

// meteredBody lets its reader (grpc-go's body-reading goroutine) read at
// most max bytes ahead of what consumed has given back; past that, Read
// waits, the server stops returning HTTP/2 window, and the client's
// requests wait at the client.
type meteredBody struct {
	body       io.ReadCloser
	mu         sync.Mutex
	cond       *sync.Cond
	ahead, max int64
	closed     bool
}

func newMeteredBody(body io.ReadCloser, max int64) *meteredBody {
	m := &meteredBody{body: body, max: max}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (m *meteredBody) Read(p []byte) (int, error) {
	m.mu.Lock()
	for m.ahead >= m.max && !m.closed {
		m.cond.Wait()
	}
	if m.closed {
		m.mu.Unlock()
		return 0, io.EOF
	}
	if room := m.max - m.ahead; int64(len(p)) > room {
		p = p[:room]
	}
	m.mu.Unlock()
	n, err := m.body.Read(p)
	m.mu.Lock()
	m.ahead += int64(n)
	m.mu.Unlock()
	return n, err
}

// consumed gives n bytes of room back.
func (m *meteredBody) consumed(n int) {
	m.mu.Lock()
	if m.ahead -= int64(n); m.ahead < 0 {
		m.ahead = 0
	}
	m.mu.Unlock()
	m.cond.Broadcast()
}

func (m *meteredBody) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cond.Broadcast()
	return m.body.Close()
}

// Watch implements PushService.Watch on grpc-go.
func (s *grpcService) Watch(stream grpc.BidiStreamingServer[v1.WatchRequest, v1.WatchResponse]) error {
	ctx := stream.Context()
	recv := stream.Recv
	if m, ok := ctx.Value(meterKey{}).(*meteredBody); ok {
		stop := context.AfterFunc(ctx, func() { _ = m.Close() })
		defer stop()
		recv = func() (*v1.WatchRequest, error) {
			req, err := stream.Recv()
			if req != nil {
				m.consumed(proto.Size(req) + 5) // the message and its gRPC prefix
			}
			return req, err
		}
	}
	deadline := s.writeDeadline(ctx)
	send := func(m *v1.WatchResponse) error { return deadline.send(func() error { return stream.Send(m) }) }
	w := &watcher{hub: s.hub, authorize: s.authorize, token: bearerOf(ctx), max: s.opts.MaxWatches,
		heartbeat: s.opts.Heartbeat, hold: s.opts.RequestTimeout, count: &s.watches, recv: recv, send: send}
	err := w.run(ctx, s.ctx)
	if errors.Is(err, errNoWatch) {
		s.requestTimeouts.Add(1)
		return status.Error(codes.DeadlineExceeded, errNoWatch.Error())
	}
	return ended(ctx, toGRPC(ctx, err))
}

// Watch implements PushService.Watch on the Connect handler (HTTP/2 only,
// as every bidirectional Connect stream).
func (s *service) Watch(ctx context.Context, stream *connect.BidiStream[v1.WatchRequest, v1.WatchResponse]) error {
	// A peer that stops reading is cut after WriteTimeout, as on grpc-go
	// (connect-go runs the handler on the request's goroutine, so the
	// controller is used directly).
	send := stream.Send
	if rc, ok := ctx.Value(controllerKey{}).(*http.ResponseController); ok {
		deadline := wire.NewStreamDeadline(rc, s.opts.WriteTimeout)
		send = func(m *v1.WatchResponse) error {
			deadline.Arm(time.Now())
			return stream.Send(m)
		}
	}
	w := &watcher{hub: s.hub, authorize: s.authorize, token: wire.Bearer(stream.RequestHeader().Get("Authorization")),
		max: DefaultMaxWatches, heartbeat: s.opts.Heartbeat, hold: s.opts.RequestTimeout, count: new(atomic.Int64),
		recv: stream.Receive, send: send}
	err := w.run(ctx, context.Background())
	switch {
	case errors.Is(err, errNoWatch):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case err != nil:
		return toConnect(err)
	}
	return nil
}

// errNoWatch ends a Watch stream that held no watch for its request
// timeout (HandlerOptions.RequestTimeout, GRPCOptions.RequestTimeout).
var errNoWatch = errors.New("no watch held within the request timeout")

// watcher serves one Watch stream. A reader goroutine hands the client's
// requests to the writer (run's goroutine), which alone creates and
// cancels watches and sends every response, so that responses need no lock
// and a client that does not read holds back only its own requests.
// Subscriptions signal readiness through SubscribeOptions.Notify into one
// list, so a thousand watches on a stream cost no goroutine each.
type watcher struct {
	hub       *push.Hub
	authorize varplane.Authorizer
	token     string
	max       int
	heartbeat time.Duration
	hold      time.Duration // the longest the stream may hold no watch
	count     *atomic.Int64 // the server's open watches
	recv      func() (*v1.WatchRequest, error)
	send      func(*v1.WatchResponse) error

	watches map[int64]*watch
	nextID  int64
	groups  []sharedGroup // deliver's, reused from pass to pass

	mu    sync.Mutex
	ready []*watch
	wake  chan struct{}
}

// watch is one watch of a stream.
type watch struct {
	id     int64
	sub    *push.Subscription
	share  bool // created with share_responses
	queued bool // in watcher.ready; guarded by watcher.mu
}

// sharedGroup is the watches of one delivery pass that get the same
// shared batch, answered by one response.
type sharedGroup struct {
	batch *v1.SnapshotBatch
	ids   []int64
}

func (w *watcher) notify(wt *watch) {
	w.mu.Lock()
	if !wt.queued {
		wt.queued = true
		w.ready = append(w.ready, wt)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run serves the stream until it ends. It authenticates the token first
// (kind identify), before reading a request or starting a goroutine, so a
// stream without an accepted token holds nothing; and it ends the stream
// with errNoWatch once it has held no watch for w.hold.
func (w *watcher) run(ctx, server context.Context) error {
	if w.authorize != nil {
		if _, err := varplane.Authorize(ctx, w.authorize, varplane.Access{Kind: varplane.KindIdentify, Token: w.token}); err != nil {
			return err
		}
	}
	w.watches = map[int64]*watch{}
	w.wake = make(chan struct{}, 1)
	defer func() {
		for _, wt := range w.watches {
			wt.sub.Close()
		}
		w.count.Add(-int64(len(w.watches)))
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqs := make(chan *v1.WatchRequest, watchRequests)
	readErr := make(chan error, 1)
	go func() {
		defer close(reqs)
		for {
			m, err := w.recv()
			if err != nil {
				readErr <- err
				return
			}
			select {
			case reqs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	timer := time.NewTimer(w.heartbeat)
	defer timer.Stop()
	// hold runs while the stream holds no watch; progress requests do not
	// reset it.
	hold := time.NewTimer(w.hold)
	defer hold.Stop()
	holding := false
	held := func() {
		switch n := len(w.watches); {
		case n > 0 && !holding:
			hold.Stop()
			holding = true
		case n == 0 && holding:
			hold.Reset(w.hold)
			holding = false
		}
	}
	lastSend := time.Now()
	send := func(m *v1.WatchResponse) error {
		lastSend = time.Now()
		return w.send(m)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-server.Done():
			return errShutdown
		case m, ok := <-reqs:
			if !ok {
				if err := <-readErr; err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
					return err
				}
				return nil // the client closed its side: so does the server
			}
			if err := w.handle(ctx, m, send); err != nil {
				return err
			}
			held()
		case <-w.wake:
			if err := w.deliver(ctx, send); err != nil {
				if errors.Is(err, errSendFailed) {
					return nil // the client is gone
				}
				return err
			}
			held()
		case <-hold.C:
			return errNoWatch
		case <-timer.C:
			if idle := time.Since(lastSend); idle < w.heartbeat {
				timer.Reset(w.heartbeat - idle)
				continue
			}
			if err := send(&v1.WatchResponse{Progress: true}); err != nil {
				return nil
			}
			timer.Reset(w.heartbeat)
		}
	}
}

// errSendFailed ends a stream whose client is gone.
var errSendFailed = errors.New("rpc: send failed")

// handle serves one request.
func (w *watcher) handle(ctx context.Context, m *v1.WatchRequest, send func(*v1.WatchResponse) error) error {
	var out *v1.WatchResponse
	switch r := m.GetRequest().(type) {
	case *v1.WatchRequest_Create:
		out = w.create(ctx, r.Create, send)
		if out == nil {
			return nil
		}
	case *v1.WatchRequest_Cancel:
		id := r.Cancel.GetWatchId()
		wt, ok := w.watches[id]
		out = &v1.WatchResponse{WatchId: id, Canceled: true}
		if ok {
			w.drop(wt)
		} else {
			out.CancelCode, out.CancelReason = string(varplane.CodeNotFound), "no such watch on this stream"
		}
	case *v1.WatchRequest_Progress:
		out = &v1.WatchResponse{Progress: true}
	default:
		return &varplane.Error{Code: varplane.CodeBadRequest, Message: "a watch request must hold create, cancel or progress"}
	}
	if err := send(out); err != nil {
		return nil
	}
	return nil
}

// create starts a watch and sends its created response; it returns the
// response of a refusal instead.
func (w *watcher) create(ctx context.Context, c *v1.WatchCreateRequest, send func(*v1.WatchResponse) error) *v1.WatchResponse {
	id := c.GetWatchId()
	refuse := func(code varplane.Code, msg string) *v1.WatchResponse {
		return &v1.WatchResponse{WatchId: id, Canceled: true, CancelCode: string(code), CancelReason: msg}
	}
	switch {
	case id < 0:
		return refuse(varplane.CodeBadRequest, "watch_id must not be negative")
	case id > 0 && w.watches[id] != nil:
		return refuse(varplane.CodeBadRequest, "watch_id is already in use on this stream")
	case len(w.watches) >= w.max:
		return refuse(varplane.CodeTooManyRequests, "this stream holds the most watches it may")
	}
	if id == 0 {
		for w.nextID++; w.watches[w.nextID] != nil; w.nextID++ {
		}
		id = w.nextID
	}
	wt := &watch{id: id, share: c.GetShareResponses()}
	req := &v1.SubscribeRequest{Keys: c.GetKeys(), Groups: c.GetGroups(), Prefixes: c.GetPrefixes(), HeldGenerations: c.GetHeldGenerations()}
	sub, err := subscribe(ctx, w.hub, w.authorize, req, w.token, push.SubscribeOptions{Notify: func() { w.notify(wt) }})
	if err != nil {
		return refuse(varplane.ErrorCode(err), varplane.ErrorMessage(err))
	}
	wt.sub = sub
	w.watches[id] = wt
	w.count.Add(1)
	if err := send(&v1.WatchResponse{WatchId: id, Created: true}); err != nil {
		return nil
	}
	return nil
}

// drop ends a watch (its subscription too).
func (w *watcher) drop(wt *watch) {
	wt.sub.Close()
	delete(w.watches, wt.id)
	w.count.Add(-1)
}

// deliver sends what every ready watch has. A watch created with
// share_responses whose batch is a commit's shared one (the same message
// for every watch of that scope, see streamBatch) is not answered alone:
// the pass collects the ids of every such watch per batch and sends one
// response for each batch with the ids in watch_ids, so a commit to the
// hundred watches of a stream is one message (one encoding, one write)
// instead of a hundred. Each watch gets at most one batch per pass, so its
// responses keep their order whichever way they leave.
func (w *watcher) deliver(ctx context.Context, send func(*v1.WatchResponse) error) error {
	w.mu.Lock()
	ready := w.ready
	w.ready = nil
	for _, wt := range ready {
		wt.queued = false
	}
	w.mu.Unlock()
	groups := w.groups[:0]
	for _, wt := range ready {
		if w.watches[wt.id] != wt {
			continue // canceled meanwhile
		}
		b, ok, err := wt.sub.TryNext(ctx)
		if err != nil {
			if serr := wt.sub.Err(); serr != nil {
				w.drop(wt)
				// A revoked token's watch is canceled with the authorizer's
				// code (forbidden, unauthorized), which a client does not
				// retry; the hub's other reasons are retried.
				code, reason := push.Reason(serr), "the server ended this watch"
				if errors.Is(serr, push.ErrRevoked) {
					code, reason = string(varplane.ErrorCode(serr)), "the token no longer allows this watch"
				}
				if send(&v1.WatchResponse{WatchId: wt.id, Canceled: true, CancelCode: code, CancelReason: reason}) != nil {
					return errSendFailed
				}
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !ok {
			continue
		}
		msg := streamBatch(b)
		if wt.share && !b.Snapshot && len(b.Updates) == 1 {
			groups = addToGroup(groups, msg, wt.id)
			continue
		}
		if send(&v1.WatchResponse{WatchId: wt.id, Batch: msg}) != nil {
			return errSendFailed
		}
	}
	for i, g := range groups {
		out := &v1.WatchResponse{Batch: g.batch}
		if len(g.ids) == 1 {
			out.WatchId = g.ids[0]
		} else {
			out.WatchIds = g.ids
		}
		err := send(out)
		groups[i] = sharedGroup{ids: g.ids[:0]} // keep the ids' array, drop the batch
		if err != nil {
			return errSendFailed
		}
	}
	w.groups = groups[:0]
	return nil
}

// addToGroup adds id to the group of batch (a commit touches a handful of
// scopes, so the groups of one pass are few and a scan finds them).
func addToGroup(groups []sharedGroup, batch *v1.SnapshotBatch, id int64) []sharedGroup {
	for i := range groups {
		if groups[i].batch == batch {
			groups[i].ids = append(groups[i].ids, id)
			return groups
		}
	}
	if len(groups) < cap(groups) {
		groups = groups[:len(groups)+1]
		g := &groups[len(groups)-1]
		g.batch, g.ids = batch, append(g.ids[:0], id)
		return groups
	}
	return append(groups, sharedGroup{batch: batch, ids: []int64{id}})
}
