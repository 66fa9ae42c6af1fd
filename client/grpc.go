package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/varplane/varplane"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// TransportGRPC follows the server over gRPC's Watch (on the server's one
// port): one stream per client carries a watch per followed scope, and a
// newly registered scope is one more create request on the open stream, not
// a reconnect.
const TransportGRPC Transport = "grpc"

// dialGRPC opens the client's gRPC connection to the server's host: h2c
// for an http:// server, TLS (Options.TLS, or the system's roots) for
// https://.
func (c *Client) dialGRPC() (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if c.base.Scheme == "https" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.opts.TLS != nil {
			cfg = c.opts.TLS.Clone()
		}
		creds = credentials.NewTLS(cfg)
	}
	return grpc.NewClient(c.base.Host, grpc.WithTransportCredentials(creds))
}

// followGRPC keeps a Watch stream open, reconnecting with backoff, and
// creates a watch for every followed scope (re-created with the
// generations held after a reconnect or a drop).
func (c *Client) followGRPC() {
	cc, err := c.dialGRPC()
	if err != nil {
		c.log.Error("varplane gRPC transport cannot dial; polling instead", "err", err)
		c.poll()
		return
	}
	defer cc.Close()
	pc := v1.NewPushServiceClient(cc)
	attempt := 0
	for c.ctx.Err() == nil {
		established, err := c.watchOnce(pc)
		c.connected.Store(false)
		if c.ctx.Err() != nil {
			return
		}
		if established {
			attempt = 0
		}
		d := c.backoff(attempt)
		attempt++
		c.log.Debug("varplane watch stream ended; reconnecting", "err", err, "in", d)
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// errWatchIdle: nothing, not even a progress response, for
// StreamIdleTimeout.
var errWatchIdle = errors.New("client: the watch stream went silent")

// watchOnce runs one Watch stream until it ends.
func (c *Client) watchOnce(pc v1.PushServiceClient) (established bool, err error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	if c.opts.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.opts.Token)
	}
	stream, err := pc.Watch(ctx)
	if err != nil {
		return false, fmt.Errorf("open watch stream: %w", err)
	}
	watched := map[varplane.Scope]int64{} // by the writer (this goroutine) only
	byID := map[int64]varplane.Scope{}
	var next int64
	create := func() error {
		keys, groups, gens := c.held()
		for _, sc := range append(keys, groups...) {
			if _, ok := watched[sc]; ok {
				continue
			}
			next++
			watched[sc], byID[next] = next, sc
			// share_responses: a commit that several watches of this
			// stream get alike comes once, naming them all (watch_ids).
			// With one watch per scope that is rare here, and it costs
			// nothing; a server that predates the field answers each
			// watch alone.
			req := &v1.WatchCreateRequest{WatchId: next, ShareResponses: true}
			if sc.IsGroup() {
				req.Groups = []string{string(sc)}
			} else {
				req.Keys = []string{string(sc)}
			}
			if g, ok := gens[sc]; ok {
				req.HeldGenerations = map[string]uint64{string(sc): uint64(g)}
			}
			if err := stream.Send(&v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: req}}); err != nil {
				return err
			}
		}
		return nil
	}
	// The reader hands what it received to this goroutine, which alone
	// touches watched and sends.
	type recv struct {
		m   *v1.WatchResponse
		err error
	}
	msgs := make(chan recv, 64)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case msgs <- recv{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	if err := create(); err != nil {
		return false, err
	}
	idle := time.NewTimer(c.opts.StreamIdleTimeout)
	defer idle.Stop()
	// retry re-creates the watches the server refused for a passing
	// reason (its store unreachable, its caps full), with backoff.
	var retry <-chan time.Time
	retries := 0
	for {
		select {
		case <-c.ctx.Done():
			return established, nil
		case <-idle.C:
			return established, errWatchIdle
		case <-retry:
			retry = nil
			if err := create(); err != nil {
				return established, err
			}
		case <-c.kick:
			if err := create(); err != nil {
				return established, err
			}
		case r := <-msgs:
			if r.err != nil {
				return established, r.err
			}
			idle.Reset(c.opts.StreamIdleTimeout)
			m := r.m
			if !established {
				established = true
				c.connected.Store(true)
			}
			switch {
			case m.GetCanceled():
				sc, ok := byID[m.GetWatchId()]
				delete(byID, m.GetWatchId())
				if ok {
					delete(watched, sc)
				}
				c.log.Warn("varplane watch canceled", "scope", string(sc), "code", m.GetCancelCode(), "reason", m.GetCancelReason())
				switch code := varplane.Code(m.GetCancelCode()); {
				case code == "slow-subscriber":
					// Dropped as slow: re-create it at once with the
					// generations held.
					if err := create(); err != nil {
						return established, err
					}
				case transientRefusal(code):
					if retry == nil {
						retry = time.After(c.backoff(retries))
						retries++
					}
				}
				// Any other refusal (forbidden, a bad scope) would loop:
				// it is re-created on the next reconnect or registration
				// only.
			case m.GetCreated():
				retries = 0
			case m.GetBatch() != nil:
				// One batch for every watch it names (watch_ids) or for
				// watch_id: its scopes are what it carries, so applying it
				// once serves them all.
				c.applyBatch(m.GetBatch())
			}
		}
	}
}

// transientRefusal reports whether a watch refused with code may be
// accepted later without any change on the client's side: the server's
// store was unreachable, or its subscriber caps were full.
func transientRefusal(code varplane.Code) bool {
	switch code {
	case varplane.CodeStoreUnavailable, varplane.CodeTooManyRequests, varplane.CodeNotReady:
		return true
	}
	return false
}

// applyBatch applies one SnapshotBatch of the Watch stream.
func (c *Client) applyBatch(b *v1.SnapshotBatch) {
	for _, h := range b.GetHeads() {
		sc := varplane.Scope(h.GetScope())
		doc, err := decodeValues(sc, h.GetValues())
		if err != nil {
			c.log.Error("varplane watch head is malformed", "scope", string(sc), "err", err)
			continue
		}
		rev := varplane.Revision(h.GetRevision())
		c.applyHead(sc, varplane.Generation(h.GetGeneration()), rev, `"`+string(rev)+`"`, doc)
	}
	for _, n := range b.GetNoHead() {
		c.applyNoHead(varplane.Scope(n.GetScope()), varplane.Generation(n.GetGeneration()), false)
	}
}
