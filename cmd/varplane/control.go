package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

func init() {
	serveExtensions = append(serveExtensions, func() serveExtension { return &controlExtension{guard: control.NewGuard()} })
}

// controlPassInterval is how often each serve runs the control plane's
// maintenance passes (expiring changes, closing canary windows), each
// under a lease so that one replica at a time does it.
const controlPassInterval = time.Minute

// expiryLease is the lease the expiry pass runs under.
const expiryLease = "control:changes-expiry"

// controlExtension is serve's reviewed changes: the control API under
// {base}/control, the review policies enforced in the engine (a scope
// under one refuses direct writes with change-required), and the
// maintenance passes. It is on unless --control=false.
type controlExtension struct {
	enabled bool
	expire  time.Duration
	guard   *control.Guard
}

// RegisterFlags adds --control and --change-expiry.
func (e *controlExtension) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&e.enabled, "control", true, "serve the control API under {base}/control (reviewed changes, review policies, paged history, diff)")
	fs.DurationVar(&e.expire, "change-expiry", control.DefaultExpireAfter, "how long after it was proposed an open change request expires")
}

// Owners reserves the control records and the scopes under a review
// policy to the control subsystem (see control.Guard).
func (e *controlExtension) Owners() []varplane.Owner {
	if !e.enabled {
		return nil
	}
	return e.guard.Owners()
}

// Start mounts the control API on rt.Mux and starts the maintenance passes.
func (e *controlExtension) Start(ctx context.Context, rt *serveRuntime) (func(context.Context) error, error) {
	if !e.enabled {
		return nil, nil
	}
	if e.expire <= 0 {
		return nil, usagef("--change-expiry must be positive")
	}
	// Propagation and canary windows read the instances' heartbeats and
	// reports from the store of record; a store without them says so
	// (control.ErrNoHeartbeats) instead of counting 0 of 0.
	svc := control.New(rt.Engine, e.guard, control.Options{ExpireAfter: e.expire, Logger: rt.Logger, Instances: control.StoreInstances(rt.Engine)})
	// The policies record is written by the first policy, never at start:
	// a server that nobody configured stores nothing of its own.
	prefix := rt.Base + "/control"
	rt.Control = svc
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("control: holder token: %w", err)
	}
	holder := "serve-" + hex.EncodeToString(b[:])
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(controlPassInterval)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				runControlPasses(pctx, rt, svc, rt.Store, holder)
			}
		}
	}()
	rt.Logger.Info("control API served", "path", prefix+"/", "change-expiry", e.expire)
	return func(context.Context) error {
		cancel()
		wg.Wait()
		return nil
	}, nil
}

// runControlPasses runs one expiry pass under its lease and one canary
// pass (which takes its own); a failure is logged and the next tick tries
// again.
func runControlPasses(ctx context.Context, rt *serveRuntime, svc *control.Service, store varplane.Store, holder string) {
	switch err := store.AcquireLease(ctx, expiryLease, holder, controlPassInterval); {
	case err == nil:
		if n, err := svc.ExpireDue(ctx); err != nil {
			rt.Logger.Error("control: expiry pass", "err", err)
		} else if n > 0 {
			rt.Logger.Info("control: changes expired", "count", n)
		}
		_ = store.ReleaseLease(context.WithoutCancel(ctx), expiryLease, holder)
	case !errors.Is(err, varplane.ErrLeaseHeld):
		rt.Logger.Error("control: expiry lease", "err", err)
	}
	if err := svc.CanaryPass(ctx, holder); err != nil {
		rt.Logger.Error("control: canary pass", "err", err)
	}
}
