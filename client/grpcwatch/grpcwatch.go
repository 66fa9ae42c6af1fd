// Package grpcwatch is the gRPC transport of the Go SDK: a client.Stream
// that follows the server over PushService.Watch on the server's one port.
// One stream per client carries a watch per followed scope, and a newly
// registered scope is one more create request on the open stream, not a
// reconnect. It is the only part of the SDK that links grpc-go: a program
// that follows over Server-Sent Events (the default) or polling does not
// import it.
//
//	c, err := client.New(server, client.Options{Stream: grpcwatch.Stream{}})
package grpcwatch

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
	"github.com/varplane/varplane/client"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// Stream is the gRPC Watch transport (client.Options.Stream).
type Stream struct{}

// dial opens the client's gRPC connection to the server's host: h2c for an
// http:// server, TLS (the client's TLS, or the system's roots) for
// https://.
func dial(f *client.Follower) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	server := f.Server()
	if server.Scheme == "https" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if t := f.TLS(); t != nil {
			cfg = t.Clone()
		}
		creds = credentials.NewTLS(cfg)
	}
	return grpc.NewClient(server.Host, grpc.WithTransportCredentials(creds))
}

// Follow keeps a Watch stream open, reconnecting with backoff, and creates
// a watch for every followed scope (re-created with the generations held
// after a reconnect or a drop). A server it cannot dial is polled instead.
func (Stream) Follow(ctx context.Context, f *client.Follower) {
	attempt := 0
	var cc *grpc.ClientConn
	defer func() {
		if cc != nil {
			_ = cc.Close()
		}
	}()
	var host string
	for ctx.Err() == nil {
		// The server in use changes when one of several cannot be
		// reached (Options.Servers): follow it.
		server := f.Server()
		if cc == nil || server.Host != host {
			if cc != nil {
				_ = cc.Close()
			}
			var err error
			if cc, err = dial(f); err != nil {
				f.Logger().Error("varplane gRPC transport cannot dial; polling instead", "err", err)
				f.Poll()
				return
			}
			host = server.Host
		}
		established, err := watchOnce(ctx, f, v1.NewPushServiceClient(cc))
		f.SetConnected(false)
		if ctx.Err() != nil {
			return
		}
		if established {
			attempt = 0
		} else {
			f.Unreachable(server, err)
		}
		d := f.Backoff(attempt)
		attempt++
		f.Logger().Debug("varplane watch stream ended; reconnecting", "err", err, "in", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// errWatchIdle: nothing, not even a progress response, for
// StreamIdleTimeout.
var errWatchIdle = errors.New("client: the watch stream went silent")

// watchOnce runs one Watch stream until it ends.
func watchOnce(parent context.Context, f *client.Follower, pc v1.PushServiceClient) (established bool, err error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	if token := f.Token(); token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	stream, err := pc.Watch(ctx)
	if err != nil {
		return false, fmt.Errorf("open watch stream: %w", err)
	}
	watched := map[varplane.Scope]int64{} // by the writer (this goroutine) only
	byID := map[int64]varplane.Scope{}
	var next int64
	create := func() error {
		keys, groups, gens := f.Held()
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
	idle := time.NewTimer(f.IdleTimeout())
	defer idle.Stop()
	// retry re-creates the watches the server refused for a passing
	// reason (its store unreachable, its caps full), with backoff.
	var retry <-chan time.Time
	retries := 0
	for {
		select {
		case <-parent.Done():
			return established, nil
		case <-idle.C:
			return established, errWatchIdle
		case <-retry:
			retry = nil
			if err := create(); err != nil {
				return established, err
			}
		case <-f.Registered():
			if err := create(); err != nil {
				return established, err
			}
		case r := <-msgs:
			if r.err != nil {
				return established, r.err
			}
			idle.Reset(f.IdleTimeout())
			m := r.m
			if !established {
				established = true
				f.SetConnected(true)
			}
			switch {
			case m.GetCanceled():
				sc, ok := byID[m.GetWatchId()]
				delete(byID, m.GetWatchId())
				if ok {
					delete(watched, sc)
				}
				f.Logger().Warn("varplane watch canceled", "scope", string(sc), "code", m.GetCancelCode(), "reason", m.GetCancelReason())
				switch code := varplane.Code(m.GetCancelCode()); {
				case code == "slow-subscriber":
					// Dropped as slow: re-create it at once with the
					// generations held.
					if err := create(); err != nil {
						return established, err
					}
				case transientRefusal(code):
					if retry == nil {
						retry = time.After(f.Backoff(retries))
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
				applyBatch(f, m.GetBatch())
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
func applyBatch(f *client.Follower, b *v1.SnapshotBatch) {
	for _, h := range b.GetHeads() {
		sc := varplane.Scope(h.GetScope())
		if err := f.ApplyHead(sc, varplane.Generation(h.GetGeneration()), varplane.Revision(h.GetRevision()), h.GetValues()); err != nil {
			f.Logger().Error("varplane watch head is malformed", "scope", string(sc), "err", err)
		}
	}
	for _, n := range b.GetNoHead() {
		f.ApplyNoHead(varplane.Scope(n.GetScope()), varplane.Generation(n.GetGeneration()))
	}
}
