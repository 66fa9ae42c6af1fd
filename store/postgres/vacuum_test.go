package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/varplane/varplane/internal/syncbuf"
)

// TestAutovacuumWarning checks that Open warns exactly when autovacuum will
// not look after the store's tables: as the server is configured (read
// independently here), then with autovacuum turned off on one table.
func TestAutovacuumWarning(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	open := func() string {
		var buf syncbuf.Buffer
		s := openStore(t, u, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		_ = s.Close()
		return buf.String()
	}
	c := rawConn(t, u)
	var serverOn bool
	if err := c.QueryRow(context.Background(), `SELECT current_setting('autovacuum')::bool AND current_setting('track_counts')::bool`).Scan(&serverOn); err != nil {
		t.Fatal(err)
	}
	logs := open()
	if got := strings.Contains(logs, "autovacuum is off on the server"); got == serverOn {
		t.Fatalf("server autovacuum on = %v, warning logged = %v:\n%s", serverOn, got, logs)
	}
	if strings.Contains(logs, "autovacuum_enabled is off") {
		t.Fatalf("warned of tables with autovacuum_enabled off before any was:\n%s", logs)
	}
	if _, err := c.Exec(context.Background(), "ALTER TABLE heads SET (autovacuum_enabled = off)"); err != nil {
		t.Fatal(err)
	}
	if logs := open(); !strings.Contains(logs, "autovacuum_enabled is off on some of the store's tables") || !strings.Contains(logs, "tables=[heads]") {
		t.Fatalf("no warning naming heads with autovacuum_enabled off on it:\n%s", logs)
	}
}
