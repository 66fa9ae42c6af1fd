package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// Issue 33 item 8: a publish whose statement reached the database, which
// committed it, and whose answer was lost answers outcome-unknown, not
// store-unavailable; the commit is there, and the publish repeated with
// its idempotency key answers its result.
func TestLostAnswerIsOutcomeUnknown(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	px := storetest.StartProxy(t, p.Host)
	p.Host = px.Addr()
	s := openStore(t, p.String(), Options{CommandTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	e := varplane.NewEngine(s, varplane.Options{})
	defer e.Close()
	const doc = `{"marker":"lost-answer-7f3a"}`
	pub := func(e *varplane.Engine) (varplane.PublishResult, error) {
		return e.Publish(ctx, varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(doc), IdempotencyKey: "k1"})
	}
	// The document travels in the statement's parameters (Bind), so the
	// proxy drops the answers from the moment the statement is sent.
	px.Arm([]byte("lost-answer-7f3a"), nil)
	if _, err := pub(e); !errors.Is(err, varplane.ErrOutcomeUnknown) || errors.Is(err, varplane.ErrUnavailable) {
		t.Fatalf("publish whose answer was lost: %v, want outcome-unknown", err)
	}
	direct := openStore(t, u, Options{})
	eventually(t, 5*time.Second, "the commit to be visible", func() bool {
		h, err := direct.History(ctx, "app.k")
		return err == nil && len(h) == 2
	})
	d := varplane.NewEngine(direct, varplane.Options{})
	defer d.Close()
	if res, err := pub(d); err != nil || res.Generation != 1 || !res.Created {
		t.Fatalf("the publish repeated with its key: %+v, %v; want its first result", res, err)
	}
}

// WriteReady follows what the server accepts: ready, not while it makes
// transactions read-only (a write is then refused by the server, changing
// nothing: store-unavailable), ready again after, not while it is down; a
// ReadOnly store never is.
func TestWriteReady(t *testing.T) {
	pg := startPrivatePG(t)
	u := freshSchema(t, pg.url())
	s := openStore(t, u, Options{CommandTimeout: 2 * time.Second})
	ro := openStore(t, u, Options{ReadOnly: true})
	ctx := context.Background()
	admin := rawConn(t, pg.url())
	set := func(sql string) {
		t.Helper()
		for _, q := range []string{sql, "SELECT pg_reload_conf()"} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := varplane.WriteReady(ctx, s); err != nil {
		t.Fatalf("running: WriteReady = %v", err)
	}
	if err := ro.WriteReady(ctx); varplane.ErrorCode(err) != varplane.CodeStoreUnsupported {
		t.Errorf("a ReadOnly store: WriteReady = %v, want store-unsupported", err)
	}
	set("ALTER SYSTEM SET default_transaction_read_only = on")
	eventually(t, 5*time.Second, "WriteReady to see the read-only default", func() bool {
		return errors.Is(s.WriteReady(ctx), varplane.ErrUnavailable)
	})
	if err := s.Append(ctx, storetest.CreatedEvent("app.k", storetest.Doc(1)), 0); !errors.Is(err, varplane.ErrUnavailable) {
		t.Errorf("a write while read-only: %v, want store-unavailable", err)
	}
	set("ALTER SYSTEM RESET default_transaction_read_only")
	eventually(t, 5*time.Second, "WriteReady to be ready again", func() bool { return s.WriteReady(ctx) == nil })
	pg.stop()
	if err := s.WriteReady(ctx); !errors.Is(err, varplane.ErrUnavailable) {
		t.Errorf("down: WriteReady = %v, want store-unavailable", err)
	}
}
