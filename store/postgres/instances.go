package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/varplane/varplane"
)

// The status heartbeats and canary reports of data-plane instances
// (docs/instances.md, docs/control.md), in the tables instance_status and
// canary_reports (migration 0003). They are not documents: no event is
// logged, each write replaces the writer's previous row, and rows expire
// by the database's clock. Like the Redis store, a ReadOnly store writes
// them (they are the one thing a data-plane instance writes), when its
// database role may.

// The lifetimes of the rows, the Redis store's: a status lives an hour
// after its last write (varplane.StatusLifetime; a reader that counts live
// instances ignores it after a minute, by its writtenAt), a report eight
// days.
const (
	StatusTTL = varplane.StatusLifetime
	ReportTTL = 8 * 24 * time.Hour
)

// writeStatusSQL replaces the instance's status and, in the same
// statement, drops the statuses that expired.
const writeStatusSQL = `WITH gone AS (DELETE FROM instance_status WHERE expires <= now() AND id <> $1)
INSERT INTO instance_status AS s (id, value, expires) VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, expires = EXCLUDED.expires`

// writeReportSQL replaces the instance's report of the window and drops the
// window's expired reports.
const writeReportSQL = `WITH gone AS (DELETE FROM canary_reports WHERE window_id = $1 AND expires <= now() AND id <> $2)
INSERT INTO canary_reports AS r (window_id, id, value, expires) VALUES ($1, $2, $3, now() + $4::bigint * interval '1 millisecond')
ON CONFLICT (window_id, id) DO UPDATE SET value = EXCLUDED.value, expires = EXCLUDED.expires`

// checkInstance refuses an empty instance id, and checkWindow a window id
// the Redis store could not hold (empty or with a brace), so that every
// store takes the same ids.
func checkInstance(id string) error {
	if id == "" {
		return varplane.Errorf(varplane.CodeBadRequest, "postgres store: an instance id is required")
	}
	return nil
}

func checkWindow(window string) error {
	if window == "" || strings.ContainsAny(window, "{}") {
		return varplane.Errorf(varplane.CodeBadRequest, "postgres store: canary window %q: want a non-empty id without braces", window)
	}
	return nil
}

// WriteStatus writes instance id's status value (instance.Status as JSON),
// replacing its previous one; it expires StatusTTL after this write.
func (s *Store) WriteStatus(ctx context.Context, id string, value []byte) error {
	if err := checkInstance(id); err != nil {
		return err
	}
	return s.beatExec(ctx, fmt.Sprintf("write the status of instance %q", id), writeStatusSQL, id, value, leaseMillis(StatusTTL))
}

// DeleteStatus deletes instance id's status row (nothing when it has none).
func (s *Store) DeleteStatus(ctx context.Context, id string) error {
	if err := checkInstance(id); err != nil {
		return err
	}
	return s.beatExec(ctx, fmt.Sprintf("delete the status of instance %q", id), `DELETE FROM instance_status WHERE id = $1`, id)
}

// ListInstance only checks the store is open: the status row itself lists
// its instance for as long as it lives.
func (s *Store) ListInstance(_ context.Context, id string, _ time.Time) error {
	if err := checkInstance(id); err != nil {
		return err
	}
	return s.checkOpen()
}

// InstanceStatuses returns every unexpired status value by instance id. It
// does not judge their age beyond expiry: a caller that counts live
// instances ignores a status whose writtenAt is more than a minute old.
func (s *Store) InstanceStatuses(ctx context.Context) (map[string][]byte, error) {
	return s.beatQuery(ctx, "instance statuses", `SELECT id, value FROM instance_status WHERE expires > now()`)
}

// WriteCanaryReport writes instance id's report of window (instance.Report
// as JSON), replacing its previous one; it expires ReportTTL after this
// write.
func (s *Store) WriteCanaryReport(ctx context.Context, window, id string, value []byte) error {
	if err := checkWindow(window); err != nil {
		return err
	}
	if err := checkInstance(id); err != nil {
		return err
	}
	return s.beatExec(ctx, fmt.Sprintf("write the canary report of instance %q", id), writeReportSQL, window, id, value, leaseMillis(ReportTTL))
}

// CanaryReports returns the unexpired report of window of every instance
// that wrote one, by the instance id it was filed under.
func (s *Store) CanaryReports(ctx context.Context, window string) (map[string][]byte, error) {
	if err := checkWindow(window); err != nil {
		return nil, err
	}
	return s.beatQuery(ctx, "canary reports", `SELECT id, value FROM canary_reports WHERE window_id = $1 AND expires > now()`, window)
}

func (s *Store) beatExec(ctx context.Context, what, sql string, args ...any) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
		return varplane.Unavailable(fmt.Errorf("postgres store: %s: %w", what, err))
	}
	return nil
}

func (s *Store) beatQuery(ctx context.Context, what, sql string, args ...any) (map[string][]byte, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.readFailure(what, "", err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var id string
		var v []byte
		if err := rows.Scan(&id, &v); err != nil {
			return nil, s.readFailure(what, "", err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		return nil, s.readFailure(what, "", err)
	}
	return out, nil
}
