// Package pgtest gives tests outside store/postgres a private schema on the
// shared PostgreSQL server (VARPLANE_POSTGRES_URL, or the machine's
// 127.0.0.1:5432), with the one skip rule every integration test follows:
// skip with a message when the server does not answer, fail instead when
// VARPLANE_REQUIRE_SERVICES is set.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server the tests use when VARPLANE_POSTGRES_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// SchemaURL returns a store URL for a new schema named prefix_<random> on
// the shared server, with params added to its query; the schema is dropped
// when the test ends.
func SchemaURL(tb testing.TB, prefix string, params url.Values) string {
	tb.Helper()
	base := os.Getenv("VARPLANE_POSTGRES_URL")
	if base == "" {
		base = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			tb.Fatalf("postgres at VARPLANE_POSTGRES_URL is required and unreachable: %v", err)
		}
		tb.Skipf("postgres not reachable (set VARPLANE_POSTGRES_URL; VARPLANE_REQUIRE_SERVICES makes this fail): %v", err)
	}
	_ = conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := prefix + "_" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("VARPLANE_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("schema", schema)
	for k, vs := range params {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
