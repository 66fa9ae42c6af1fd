package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/internal/backoff"
	"github.com/varplane/varplane/internal/wire"
)

// ServiceSource fetches from a values service in the same process.
type ServiceSource struct{ Service *config.Service }

// Fetch calls the service's Fetch.
func (s ServiceSource) Fetch(ctx context.Context, pairs []config.Pair) ([]config.Fetched, error) {
	return s.Service.Fetch(ctx, pairs)
}

// EngineSubscriber follows the created events of an engine in the same
// process through its commit seam (embedded use and tests).
type EngineSubscriber struct{ Engine *varplane.Engine }

// Subscribe registers with the engine's OnCommit; it is live on return and
// never needs a resync.
func (s EngineSubscriber) Subscribe(_ context.Context, onCreated func(config.CreatedEvent), _ func()) (func(), error) {
	return s.Engine.OnCommit(func(c varplane.Commit) {
		for _, ev := range config.EventsFromCommit(c) {
			onCreated(ev)
		}
	}), nil
}

var (
	_ Source     = ServiceSource{}
	_ Subscriber = EngineSubscriber{}
	_ Source     = (*HTTP)(nil)
	_ Subscriber = (*HTTP)(nil)
)

// HTTP talks to the values service's routes: POST
// {BaseURL}/configuration/values:fetch and the event stream GET
// {BaseURL}/configuration/values:watch. It is both a Source and a
// Subscriber. It speaks the project's wire layer: an error answer is the
// *varplane.Error the service sent (errors.Is and the details work), the
// stream is read by wire.SSEReader within MaxEventBytes, and reconnects wait
// by backoff.Duration.
type HTTP struct {
	// BaseURL is the server's root, such as "http://127.0.0.1:8790".
	BaseURL string
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Client is the HTTP client; when nil, the project's client (bounded
	// dial, handshake and header waits, no overall timeout: each fetch is
	// bounded by its context). It should have no overall Timeout, which
	// would cut the event stream.
	Client *http.Client
	// Logger receives reconnections; slog.Default when nil.
	Logger *slog.Logger
	// Reconnect shapes the stream's reconnection backoff (backoff.Duration with
	// these); 100 ms and 5 s when zero.
	ReconnectBase, ReconnectMax time.Duration
	// MaxEventBytes bounds one event of the stream: a larger one breaks the
	// stream, which reconnects and fetches again. wire.MaxEventBytes when 0.
	MaxEventBytes int
}

// defaultClient carries the requests of every HTTP without a Client, so
// that they share connections.
var defaultClient = wire.NewHTTPClient(nil, -1)

func (h *HTTP) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return defaultClient
}

func (h *HTTP) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

func (h *HTTP) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	return wire.NewRequest(ctx, method, strings.TrimRight(h.BaseURL, "/")+path, h.Token, body)
}

// maxFetchBytes bounds a fetch answer: the configurations of one tick.
const maxFetchBytes = 64 << 20

// Fetch posts the pairs as one call. A refusal is the service's
// *varplane.Error.
func (h *HTTP) Fetch(ctx context.Context, pairs []config.Pair) ([]config.Fetched, error) {
	req, err := h.newRequest(ctx, http.MethodPost, "/configuration/values:fetch", pairs)
	if err != nil {
		return nil, err
	}
	resp, err := wire.Do(h.client(), req)
	if err != nil {
		return nil, fmt.Errorf("consumer: fetch: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxFetchBytes))
	if err != nil {
		return nil, fmt.Errorf("consumer: fetch: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("consumer: fetch: the service answered %s", resp.Status)
	}
	var out []config.Fetched
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("consumer: fetch: undecodable answer: %w", err)
	}
	return out, nil
}

// Subscribe opens the event stream and returns once the server reports it
// live (its "ready" event). When the stream breaks it reconnects with
// backoff and, once live again, calls onResync, since creates may have
// happened in between.
func (h *HTTP) Subscribe(ctx context.Context, onCreated func(config.CreatedEvent), onResync func()) (func(), error) {
	life, cancel := context.WithCancel(context.Background())
	body, err := h.open(ctx, life)
	if err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		base, maxWait := h.ReconnectBase, h.ReconnectMax
		if base <= 0 {
			base = 100 * time.Millisecond
		}
		if maxWait <= 0 {
			maxWait = 5 * time.Second
		}
		for {
			err := h.read(body, onCreated)
			body.Close()
			if life.Err() != nil {
				return
			}
			h.logger().Warn("configuration event stream ended, reconnecting", "err", err)
			for round := 0; ; round++ {
				t := time.NewTimer(backoff.Duration(round, base, maxWait))
				select {
				case <-life.Done():
					t.Stop()
					return
				case <-t.C:
				}
				if body, err = h.open(life, life); err == nil {
					break
				}
			}
			if onResync != nil {
				onResync()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}, nil
}

// open connects the stream and reads up to its ready event. ctx bounds the
// handshake only; the stream lives until life ends.
func (h *HTTP) open(ctx, life context.Context) (*streamBody, error) {
	sctx, cancel := context.WithCancel(life)
	req, err := h.newRequest(sctx, http.MethodGet, "/configuration/values:watch", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	wire.SetStreamHeaders(req)
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	resp, err := h.client().Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("consumer: watch: %w", err)
	}
	if err := wire.CheckStream(resp); err != nil {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("consumer: watch: %w", err)
	}
	sb := &streamBody{body: resp.Body, cancel: cancel, r: wire.NewSSEReader(resp.Body, h.MaxEventBytes)}
	ev, err := sb.next()
	if err != nil || ev.Name != "ready" {
		sb.Close()
		return nil, fmt.Errorf("consumer: watch: the stream did not report ready: %v", err)
	}
	if !stop() { // ctx ended during the handshake
		sb.Close()
		return nil, fmt.Errorf("consumer: watch: %w", ctx.Err())
	}
	return sb, nil
}

// streamBody is an SSE body with its own cancel.
type streamBody struct {
	body   io.ReadCloser
	cancel func()
	r      *wire.SSEReader
}

func (s *streamBody) Close() {
	s.cancel()
	_ = s.body.Close()
}

// next returns the next event, skipping heartbeats and retry fields.
func (s *streamBody) next() (wire.Event, error) {
	for {
		ev, err := s.r.Next()
		if err != nil || ev.Name != "" || ev.Data != "" {
			return ev, err
		}
	}
}

// read hands the stream's created events to onCreated until it breaks (an
// event over the bound breaks it too); a blocked read returns when the
// subscription's context ends.
func (h *HTTP) read(sb *streamBody, onCreated func(config.CreatedEvent)) error {
	for {
		ev, err := sb.next()
		if err != nil {
			return err
		}
		switch ev.Name {
		case "created":
			var ce config.CreatedEvent
			if err := json.Unmarshal([]byte(ev.Data), &ce); err != nil {
				h.logger().Error("undecodable configuration event", "err", err)
				continue
			}
			onCreated(ce)
		case "overflow":
			return errors.New("the server dropped this slow stream")
		}
	}
}

// Dial returns a Client that fetches from and follows the values service at
// baseURL over HTTP, sending token (when not empty). Make one per process.
func Dial(baseURL, token string, opts ClientOptions) *Client {
	h := &HTTP{BaseURL: baseURL, Token: token, Logger: opts.Logger}
	return NewClient(h, h, opts)
}
