package logstate

import (
	"context"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// Leases is the lease table of a store whose writes all go through one
// process (memory, and file, which its lock file makes single-process): the
// leases live in that process's memory only, so they are gone after a
// restart, which only frees them early. Stores embed it and call
// InitLeases before use. Every method is safe for concurrent use.
type Leases struct {
	reads *Reads
	now   func() time.Time

	mu    sync.Mutex
	table map[string]lease
}

type lease struct {
	holder  string
	expires time.Time
}

// InitLeases makes l answer ErrClosed once r is shut, and read the time
// from now (time.Now when nil; tests pass a fake clock).
func (l *Leases) InitLeases(r *Reads, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	l.reads, l.now, l.table = r, now, map[string]lease{}
}

func (l *Leases) usable(ctx context.Context) error {
	if l.reads.IsShut() {
		return varplane.ErrClosed
	}
	return ctx.Err()
}

// AcquireLease implements varplane.Store.AcquireLease.
func (l *Leases) AcquireLease(ctx context.Context, name, holder string, d time.Duration) error {
	if err := varplane.CheckLease(name, holder, d); err != nil {
		return err
	}
	if err := l.usable(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if cur, ok := l.table[name]; ok && cur.holder != holder && now.Before(cur.expires) {
		return varplane.ErrLeaseHeld
	}
	l.table[name] = lease{holder: holder, expires: now.Add(d)}
	return nil
}

// RenewLease implements varplane.Store.RenewLease.
func (l *Leases) RenewLease(ctx context.Context, name, holder string, d time.Duration) error {
	if err := varplane.CheckLease(name, holder, d); err != nil {
		return err
	}
	if err := l.usable(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if cur, ok := l.table[name]; !ok || cur.holder != holder || !now.Before(cur.expires) {
		return varplane.ErrLeaseLost
	}
	l.table[name] = lease{holder: holder, expires: now.Add(d)}
	return nil
}

// ReleaseLease implements varplane.Store.ReleaseLease.
func (l *Leases) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := varplane.CheckLeaseHolder(name, holder); err != nil {
		return err
	}
	if err := l.usable(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, ok := l.table[name]
	if !ok || cur.holder != holder || !l.now().Before(cur.expires) {
		return varplane.ErrLeaseLost
	}
	delete(l.table, name)
	return nil
}
