package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/varplane/varplane"
)

// notSent marks the error of a commit call given up before its statement
// was sent (its context ended while it waited for a batch).
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// statementNotRun reports an error after which the database certainly did
// not commit a commit function call: the server raised it (the
// transaction rolled back), the connection could not be made, or the
// statement was never sent (pgconn.SafeToRetry, notSent). Any other error
// (a timeout or a connection lost after the statement was sent, COMMIT
// included) leaves the outcome unknown.
func statementNotRun(err error) bool {
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	var ns notSent
	return errors.As(err, &pe) || errors.As(err, &ce) || errors.As(err, &ns) || pgconn.SafeToRetry(err)
}

// WriteReady reports whether the database accepts the store's writes now
// (varplane.WriteReadiness): one query, bounded by the command timeout, of
// whether the server is a standby (pg_is_in_recovery) or makes
// transactions read-only (default_transaction_read_only). Unreachable or
// read-only is store-unavailable; a store opened ReadOnly is
// store-unsupported.
func (s *Store) WriteReady(ctx context.Context) error {
	if err := s.checkWritable(); err != nil {
		return err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	var standby, readOnly bool
	if err := s.pool.QueryRow(cctx, "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')::bool").Scan(&standby, &readOnly); err != nil {
		return varplane.Unavailable(fmt.Errorf("postgres store: %s does not answer: %w", s.addr, err))
	}
	switch {
	case standby:
		return &varplane.Error{Code: varplane.CodeStoreUnavailable, Message: "the database is a standby: it accepts no writes"}
	case readOnly:
		return &varplane.Error{Code: varplane.CodeStoreUnavailable, Message: "the database makes every transaction read-only (default_transaction_read_only)"}
	}
	return nil
}
