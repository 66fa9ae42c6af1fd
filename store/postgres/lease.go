package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/varplane/varplane"
)

// Leases live in the leases table, each decided by one statement against
// the database's clock, so processes whose clocks disagree still exclude
// one another. A duration is sent in whole milliseconds, rounded up, so a
// lease never ends before the duration asked for.

// acquireLeaseSQL takes the lease when nobody holds it, when it expired,
// or when its holder re-takes it (for the full duration): one conditional
// upsert, so two acquirers racing on one name never both succeed.
const acquireLeaseSQL = `INSERT INTO leases AS l (name, holder, expires) VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires = EXCLUDED.expires
WHERE l.holder = EXCLUDED.holder OR l.expires <= now()`

// renewLeaseSQL extends the lease only while holder holds it and it has not
// expired (compare-and-expire).
const renewLeaseSQL = `UPDATE leases SET expires = now() + $3::bigint * interval '1 millisecond'
WHERE name = $1 AND holder = $2 AND expires > now()`

// releaseLeaseSQL deletes the lease only while holder holds it
// (compare-and-delete), so a holder whose lease expired and was taken never
// releases its successor's.
const releaseLeaseSQL = `DELETE FROM leases WHERE name = $1 AND holder = $2 AND expires > now()`

func leaseMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// AcquireLease takes the lease name for holder for d; see
// varplane.Store.AcquireLease. It returns varplane.ErrLeaseHeld when
// another holder holds it, errReadOnly on a ReadOnly store.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, d time.Duration) error {
	if err := varplane.CheckLease(name, holder, d); err != nil {
		return err
	}
	n, err := s.leaseExec(ctx, "acquire", name, acquireLeaseSQL, name, holder, leaseMillis(d))
	if err != nil {
		return err
	}
	if n != 1 {
		return varplane.ErrLeaseHeld
	}
	return nil
}

// RenewLease extends holder's lease on name to d from now; see
// varplane.Store.RenewLease. It returns varplane.ErrLeaseLost when holder
// does not hold it.
func (s *Store) RenewLease(ctx context.Context, name, holder string, d time.Duration) error {
	if err := varplane.CheckLease(name, holder, d); err != nil {
		return err
	}
	n, err := s.leaseExec(ctx, "renew", name, renewLeaseSQL, name, holder, leaseMillis(d))
	if err != nil {
		return err
	}
	if n != 1 {
		return varplane.ErrLeaseLost
	}
	return nil
}

// ReleaseLease deletes holder's lease on name; see
// varplane.Store.ReleaseLease. It returns varplane.ErrLeaseLost when holder
// does not hold it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := varplane.CheckLeaseHolder(name, holder); err != nil {
		return err
	}
	n, err := s.leaseExec(ctx, "release", name, releaseLeaseSQL, name, holder)
	if err != nil {
		return err
	}
	if n != 1 {
		return varplane.ErrLeaseLost
	}
	return nil
}

// leaseExec runs one lease statement and returns the rows it changed.
func (s *Store) leaseExec(ctx context.Context, op, name, sql string, args ...any) (int64, error) {
	if err := s.checkWritable(); err != nil {
		return 0, err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return 0, varplane.Unavailable(fmt.Errorf("postgres store: %s lease %q: %w", op, name, err))
	}
	return tag.RowsAffected(), nil
}
