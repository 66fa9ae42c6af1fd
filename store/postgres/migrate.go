package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/varplane/varplane"
)

// migrationFiles are the schema's migrations, NNNN_name.sql, applied in
// order and never edited once released: a change is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one embedded migration.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in order, checking that
// their versions run 1, 2, 3… without a gap.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]migration, 0, len(names))
	for i, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("postgres store: migration %s is not numbered %04d", base, i+1)
		}
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	return out, nil
}

// SchemaVersion is the schema version this binary's migrations reach.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// lockKey is the advisory lock that serialises migrations of one schema
// across every process sharing the database.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("varplane-migrate:" + schema))
	return int64(h.Sum64())
}

// migrate brings the schema to this binary's version under an advisory
// lock, or, for a read-only store, checks that it is there. A schema newer
// than the binary is refused: migrations are forward-only, and an older
// binary cannot know what a newer schema requires of its writers.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].version
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return varplane.Unavailable(fmt.Errorf("postgres store: connect to %s: %w", s.addr, err))
	}
	defer conn.Release()
	c := conn.Conn()
	if s.opts.ReadOnly {
		cur, err := s.currentVersion(ctx, c)
		if err != nil {
			return err
		}
		switch {
		case cur > latest:
			return s.newerSchema(cur, latest)
		case cur < latest:
			return &varplane.Error{Code: varplane.CodeStoreUnavailable,
				Message: fmt.Sprintf("the schema %q is at version %d and this read-only replica needs version %d: start a writer of this release first, which migrates it", s.schema, cur, latest)}
		}
		return nil
	}
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey(s.schema)); err != nil {
		return varplane.Unavailable(fmt.Errorf("postgres store: take the migration lock: %w", err))
	}
	defer func() {
		// A lock that cannot be released is released with the session:
		// the connection is then closed rather than returned to the pool.
		uctx, cancel := s.cmdCtxBackground()
		defer cancel()
		if _, err := c.Exec(uctx, "SELECT pg_advisory_unlock($1)", lockKey(s.schema)); err != nil {
			_ = c.Close(uctx)
		}
	}()
	ident := pgx.Identifier{s.schema}.Sanitize()
	if _, err := c.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident); err != nil {
		return s.migrationFailure("create the schema", err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+ident+`.schema_version (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return s.migrationFailure("create the schema_version table", err)
	}
	cur, err := s.currentVersion(ctx, c)
	if err != nil {
		return err
	}
	if cur > latest {
		return s.newerSchema(cur, latest)
	}
	for _, m := range ms[cur:] {
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+ident+".schema_version (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return s.migrationFailure("apply migration "+m.name, err)
		}
		s.log.Info("postgres store: migration applied", "version", m.version, "name", m.name)
	}
	return nil
}

func (s *Store) cmdCtxBackground() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.CommandTimeout)
}

// currentVersion reads the schema's version; 0 when it has no
// schema_version table yet.
func (s *Store) currentVersion(ctx context.Context, c *pgx.Conn) (int, error) {
	var v int
	err := c.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+pgx.Identifier{s.schema, "schema_version"}.Sanitize()).Scan(&v)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") { // undefined table or schema
		return 0, nil
	}
	if err != nil {
		return 0, s.migrationFailure("read the schema version", err)
	}
	return v, nil
}

func (s *Store) newerSchema(cur, latest int) error {
	return &varplane.Error{Code: varplane.CodeStoreUnavailable,
		Message: fmt.Sprintf("the schema %q is at version %d, newer than this binary's version %d: run a varplane release that knows version %d (migrations are forward-only and are never undone)", s.schema, cur, latest, cur)}
}

// migrationFailure reports a failed migration step: unavailable when the
// database could not be reached, internal (with the server's message) when
// it refused the statement, such as a role without CREATE on the database.
func (s *Store) migrationFailure(what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &varplane.Error{Code: varplane.CodeStoreUnavailable,
			Message: fmt.Sprintf("postgres store: %s in schema %q: %s (SQLSTATE %s)", what, s.schema, pe.Message, pe.Code), Err: err}
	}
	return varplane.Unavailable(fmt.Errorf("postgres store: %s: %w", what, err))
}
