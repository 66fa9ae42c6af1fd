package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// controlPassInterval is how often each serve runs the control plane's
// maintenance passes (expiring changes, closing canary windows), each
// under a lease so that one replica at a time does it.
const controlPassInterval = time.Minute

// expiryLease is the lease the expiry pass runs under.
const expiryLease = "control:changes-expiry"

// runControlPasses starts serve's maintenance passes of the control plane
// (every controlPassInterval: an expiry pass under its lease, and a canary
// pass, which takes its own) and returns the function that stops them.
//
// The rollout pass runs on its own ticker, every rolloutEvery, so that a
// step's bake and gates are judged within seconds (docs/rollouts.md).
func runControlPasses(ctx context.Context, svc *control.Service, store varplane.Store, rolloutEvery time.Duration, log *slog.Logger) (stop func()) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	holder := "serve-" + hex.EncodeToString(b[:])
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	every := func(d time.Duration, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(d)
			defer t.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
					fn()
				}
			}
		}()
	}
	every(controlPassInterval, func() { controlPasses(pctx, svc, store, holder, log) })
	every(rolloutEvery, func() {
		if err := svc.RolloutPass(pctx, holder); err != nil {
			log.Error("control: rollout pass", "err", err)
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// controlPasses runs one expiry pass under its lease and one canary pass;
// a failure is logged and the next tick tries again.
func controlPasses(ctx context.Context, svc *control.Service, store varplane.Store, holder string, log *slog.Logger) {
	switch err := store.AcquireLease(ctx, expiryLease, holder, controlPassInterval); {
	case err == nil:
		if n, err := svc.ExpireDue(ctx); err != nil {
			log.Error("control: expiry pass", "err", err)
		} else if n > 0 {
			log.Info("control: changes expired", "count", n)
		}
		_ = store.ReleaseLease(context.WithoutCancel(ctx), expiryLease, holder)
	case !errors.Is(err, varplane.ErrLeaseHeld):
		log.Error("control: expiry lease", "err", err)
	}
	if err := svc.CanaryPass(ctx, holder); err != nil {
		log.Error("control: canary pass", "err", err)
	}
}
