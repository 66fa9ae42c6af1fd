package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/url"
	"time"

	"github.com/varplane/varplane"
)

// Stream is a transport the client follows the server with, given as
// Options.Stream instead of one of the built-in transports. Subpackages
// provide them, so that a program links what it uses: client/grpcwatch is
// the gRPC Watch transport (and the only part of the SDK that links
// grpc-go).
type Stream interface {
	// Follow keeps the scopes of f followed until ctx ends, applying what
	// the server sends to f; it reconnects by itself and returns only when
	// ctx ends (or after falling back to f.Poll, which does the same).
	Follow(ctx context.Context, f *Follower)
}

// Follower is what a Stream follows the server for: the client's server,
// credentials and bounds, the scopes it holds, and the entrances through
// which what the server sends reaches the held values. Its methods are
// safe for concurrent use.
type Follower struct{ c *Client }

// Server returns the URL of the server in use (New's, or one of
// Options.Servers after a failover), with the base path.
func (f *Follower) Server() *url.URL { u := *f.c.server(); return &u }

// Unreachable records that the server at u could not be reached (err): the
// next of Options.Servers is used from now on, and the loss is reported.
func (f *Follower) Unreachable(u *url.URL, err error) {
	f.c.failedOn(u, err)
	f.c.reached(false, err)
}

// Token returns the bearer token (Options.Token), "" for none.
func (f *Follower) Token() string { return f.c.opts.Token }

// TLS returns Options.TLS (nil: the system's roots).
func (f *Follower) TLS() *tls.Config { return f.c.opts.TLS }

// IdleTimeout returns Options.StreamIdleTimeout: a stream that delivers
// nothing for this long is reconnected.
func (f *Follower) IdleTimeout() time.Duration { return f.c.opts.StreamIdleTimeout }

// Logger returns the client's logger.
func (f *Follower) Logger() *slog.Logger { return f.c.log }

// Held returns the followed keys and groups, and the generation held of
// each (absent: none yet), to resume from.
func (f *Follower) Held() (keys, groups []varplane.Scope, gens map[varplane.Scope]varplane.Generation) {
	return f.c.held()
}

// Registered receives when the followed set changes (a scope was
// registered): the stream then follows the new scopes too.
func (f *Follower) Registered() <-chan struct{} { return f.c.kick }

// Backoff returns the wait before reconnection number attempt (0 for the
// first after a failure), within Options' bounds (internal/backoff).
func (f *Follower) Backoff(attempt int) time.Duration { return f.c.backoff(attempt) }

// SetConnected records whether the stream is established (Connected); an
// established stream reports the server reached.
func (f *Follower) SetConnected(ok bool) {
	f.c.connected.Store(ok)
	if ok {
		f.c.reached(true, nil)
	}
}

// ApplyHead applies a head of scope at generation gen: revision rev with
// its read values (the "values" member of the read body, as every
// transport carries it). Newer-only, as every transport's.
func (f *Follower) ApplyHead(scope varplane.Scope, gen varplane.Generation, rev varplane.Revision, values json.RawMessage) error {
	doc, err := decodeValues(scope, values)
	if err != nil {
		return err
	}
	f.c.applyHead(scope, gen, rev, `"`+string(rev)+`"`, doc)
	return nil
}

// ApplyNoHead applies that scope serves nothing at generation gen.
func (f *Follower) ApplyNoHead(scope varplane.Scope, gen varplane.Generation) {
	f.c.applyNoHead(scope, gen, false)
}

// Poll follows the server by polling until ctx's client stops: the
// fallback of a Stream that cannot reach the server at all.
func (f *Follower) Poll() { f.c.poll() }
