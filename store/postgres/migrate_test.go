package postgres

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/store/storetest"
)

// TestMigrationsNumbered: the embedded migrations load, run 1, 2, … and
// the binary's version is the last one.
func TestMigrationsNumbered(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || SchemaVersion() != ms[len(ms)-1].version {
		t.Fatalf("migrations %v, SchemaVersion %d", ms, SchemaVersion())
	}
}

// TestConcurrentOpensMigrateOnce: several stores opened at once on a new
// schema all succeed (the advisory lock serialises them), and the schema
// records each migration exactly once.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	var wg sync.WaitGroup
	errs := make([]error, 4)
	stores := make([]*Store, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stores[i], errs[i] = Open(ctx, u, Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var n, max int
	if err := rawConn(t, u).QueryRow(context.Background(), "SELECT count(*), max(version) FROM schema_version").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != SchemaVersion() || max != SchemaVersion() {
		t.Errorf("schema_version has %d rows up to %d, want %d", n, max, SchemaVersion())
	}
	// And a commit through one is seen by the others' reads.
	rev := create(t, stores[0], "mig.k", 1)
	activate(t, stores[0], "mig.k", rev, 0)
	if st := state(t, stores[3], "mig.k"); st.Generation != 1 {
		t.Errorf("store 3 reads %+v", st)
	}
}

// TestNewerSchemaRefused: a schema migrated by a newer release is refused
// with a clear error, and nothing is changed.
func TestNewerSchemaRefused(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	rev := create(t, s, "new.k", 1)
	activate(t, s, "new.k", rev, 0)
	_ = s.Close()
	raw := rawConn(t, u)
	newer := SchemaVersion() + 1
	if _, err := raw.Exec(context.Background(), "INSERT INTO schema_version (version, name) VALUES ($1, 'from_the_future.sql')", newer); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{}, {ReadOnly: true}} {
		_, err := Open(context.Background(), u, opts)
		if err == nil {
			t.Fatalf("Open (read-only %v) of a newer schema succeeded", opts.ReadOnly)
		}
		if varplane.ErrorCode(err) != varplane.CodeStoreUnavailable || !strings.Contains(err.Error(), "newer than this binary") {
			t.Errorf("Open (read-only %v) = %v, want a store-unavailable error saying the schema is newer", opts.ReadOnly, err)
		}
	}
	var gen int64
	if err := raw.QueryRow(context.Background(), "SELECT generation FROM heads WHERE scope = 'new.k'").Scan(&gen); err != nil || gen != 1 {
		t.Errorf("head after the refused opens: generation %d, %v", gen, err)
	}
}

// TestReadOnly: a read-only replica refuses a schema that was never
// migrated, serves reads and follows commits, and refuses every mutation
// with store-unsupported.
func TestReadOnly(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	if _, err := Open(context.Background(), withParam(t, u, "read_only", "true"), Options{}); err == nil || !strings.Contains(err.Error(), "start a writer") {
		t.Fatalf("read-only Open of an empty schema = %v, want a refusal asking for a writer", err)
	}
	w := openStore(t, u, Options{})
	r := openStore(t, withParam(t, u, "read_only", "true"), Options{})
	rw := watchChan(t, r)
	rev := create(t, w, "ro.k", 1)
	activate(t, w, "ro.k", rev, 0)
	if c := nextCommit(t, rw, 5*time.Second); c.Changes[0].Head == nil || c.Changes[0].Head.Revision != rev {
		t.Fatalf("read-only replica got %+v", c)
	}
	ctx := context.Background()
	for name, err := range map[string]error{
		"create":     r.Append(ctx, storetest.CreatedEvent("ro.k", storetest.Doc(2)), 0),
		"activate":   r.Append(ctx, storetest.ActivatedEvent("ro.k", rev, 1), 1),
		"deactivate": r.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent("ro.k", 1), 1),
	} {
		if varplane.ErrorCode(err) != varplane.CodeStoreUnsupported {
			t.Errorf("%s on a read-only replica = %v, want store-unsupported", name, err)
		}
	}
	if h, err := r.History(ctx, "ro.k"); err != nil || kinds(h) != "revision-created,activated" {
		t.Errorf("history on the read-only replica = %s, %v", kinds(h), err)
	}
}

// TestEventsAppendOnly: the log refuses an UPDATE or DELETE of an event.
func TestEventsAppendOnly(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	create(t, s, "ao.k", 1)
	raw := rawConn(t, u)
	for _, sql := range []string{"UPDATE events SET body = '{}'", "DELETE FROM events"} {
		if _, err := raw.Exec(context.Background(), sql); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want the append-only refusal", sql, err)
		}
	}
	if h, err := s.History(context.Background(), "ao.k"); err != nil || len(h) != 1 {
		t.Errorf("history = %v, %v", h, err)
	}
}

// TestCorruptRowFailsClosed: a head row edited by hand into something that
// cannot be decoded fails a cold read with an internal error (never an
// empty state), a replica that holds the head keeps serving the last good
// one while the other heads of its pass are installed, and the row is left
// in place.
func TestCorruptRowFailsClosed(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	rev := create(t, s, "bad.k", 1)
	activate(t, s, "bad.k", rev, 0)
	other := create(t, s, "bad.other", 2)
	activate(t, s, "bad.other", other, 0)
	watcher := openStore(t, u, Options{RevalidateInterval: 100 * time.Millisecond, noListen: true})
	state(t, watcher, "bad.k")
	state(t, watcher, "bad.other")
	raw := rawConn(t, u)
	// A hand-made edit: a new version, so that a pass reads the row.
	if _, err := raw.Exec(context.Background(), `UPDATE heads SET last_rejected = '"not an event"', version = version + 1 WHERE scope = 'bad.k'`); err != nil {
		t.Fatal(err)
	}
	// A pass that meets the corrupt row still installs the other rows of
	// its statement.
	r2 := create(t, s, "bad.other", 3)
	activate(t, s, "bad.other", r2, 1)
	eventually(t, 3*time.Second, "the pass to install bad.other", func() bool { return state(t, watcher, "bad.other").Generation == 2 })
	if st := state(t, watcher, "bad.k"); st.Generation != 1 || st.Head == nil {
		t.Errorf("the installed head of bad.k = %+v, want the last good one served", st)
	}
	fresh := openStore(t, u, Options{})
	_, err := fresh.State(context.Background(), "bad.k")
	var e *varplane.Error
	if !errors.As(err, &e) || e.Code != varplane.CodeInternal {
		t.Fatalf("State of a corrupt head = %v, want an internal error", err)
	}
	var n int
	if err := raw.QueryRow(context.Background(), "SELECT count(*) FROM heads WHERE scope = 'bad.k'").Scan(&n); err != nil || n != 1 {
		t.Errorf("the corrupt row was not left in place: %d, %v", n, err)
	}
}

// TestUpgradeFromVersion1: a schema written by a version-1 binary (here,
// its migration and commit functions called by hand) is brought to this
// binary's version on open, keeps its head, history and idempotency
// records, and takes publishes, leases and reclamation afterwards.
func TestUpgradeFromVersion1(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	_, _, schema, _, err := parseURL(u, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	raw := rawConn(t, u)
	for _, q := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
		ms[0].sql,
		"INSERT INTO schema_version (version, name) VALUES (1, '" + ms[0].name + "')",
	} {
		if _, err := raw.Exec(ctx, q); err != nil {
			t.Fatalf("version-1 schema: %v", err)
		}
	}
	const scope = varplane.Scope("up.k")
	c := storetest.CreatedEvent(scope, storetest.Doc(1))
	c.IdempotencyKey, c.RequestHash = "up-k1", "h1"
	rec := varplane.RevisionRecord{Scope: scope, Revision: c.Revision, Document: c.Document, SchemaID: c.SchemaID, Actor: c.Actor, CreatedAt: c.Timestamp}
	a := storetest.ActivatedEvent(scope, c.Revision, 0)
	recJ, _ := jsontext.Marshal(&rec)
	cJ, _ := jsontext.Marshal(c)
	aJ, _ := jsontext.Marshal(a)
	var st string
	if err := raw.QueryRow(ctx, "SELECT status FROM varplane_create($1, $2, $3, $4, $5, $6)", string(scope), string(c.Revision), recJ, cJ, "up-k1", "h1").Scan(&st); err != nil || st != "OK" {
		t.Fatalf("version-1 create: %q, %v", st, err)
	}
	if err := raw.QueryRow(ctx, "SELECT status FROM varplane_activate($1, 0, 1, $2, $3, NULL, '', false)", string(scope), string(c.Revision), aJ).Scan(&st); err != nil || st != "OK" {
		t.Fatalf("version-1 activate: %q, %v", st, err)
	}

	s := openStore(t, u, Options{})
	var n, max int
	if err := raw.QueryRow(ctx, "SELECT count(*), max(version) FROM schema_version").Scan(&n, &max); err != nil || n != SchemaVersion() || max != SchemaVersion() {
		t.Fatalf("schema_version after the upgrade: %d rows up to %d (%v), want %d", n, max, err, SchemaVersion())
	}
	if got := state(t, s, scope); got.Generation != 1 || got.Head == nil || got.Head.Revision != c.Revision {
		t.Fatalf("state after the upgrade = %+v", got)
	}
	if r, err := s.Idempotency(ctx, "up-k1"); err != nil || r.Event.Kind != varplane.EventRevisionCreated {
		t.Fatalf("idempotency record after the upgrade = %+v, %v", r, err)
	}
	if r, err := s.Revision(ctx, scope, c.Revision); err != nil || r.Revision != c.Revision {
		t.Fatalf("revision after the upgrade = %+v, %v", r, err)
	}
	// the activation written before the upgrade is found by the follow read
	var found int
	var record []byte
	if err := raw.QueryRow(ctx, "SELECT count(*), min(record::text) FROM varplane_follow($1, $2, $3)",
		[]string{string(scope)}, []int64{1}, []*string{nil}).Scan(&found, &record); err != nil || found != 1 || !bytes.Contains(record, []byte(c.Revision)) {
		t.Fatalf("varplane_follow of the version-1 activation: %d rows, record %s, %v", found, record, err)
	}
	p := storetest.CreatedEvent(scope, storetest.Doc(2))
	if created, err := s.AppendPublish(ctx, p, storetest.ActivatedEvent(scope, p.Revision, 1), 1); err != nil || !created {
		t.Fatalf("publish after the upgrade: created %v, %v", created, err)
	}
	if err := s.AcquireLease(ctx, "up", "h", time.Minute); err != nil {
		t.Fatalf("lease after the upgrade: %v", err)
	}
	h, err := s.History(ctx, scope)
	if err != nil || kinds(h) != "revision-created,activated,revision-created,activated" {
		t.Fatalf("history after the upgrade = %s, %v", kinds(h), err)
	}
	// The version-1 revision, encoded by encoding/json then, is reclaimed:
	// its event, re-encoded by this binary without the document, passes
	// the trigger's comparison, and nothing else of it changes.
	if n, err := s.ReclaimRevisions(ctx, scope, []varplane.Revision{c.Revision}); err != nil || n != 1 {
		t.Fatalf("reclaim of the version-1 revision = %d, %v", n, err)
	}
	after, err := s.History(ctx, scope)
	if err != nil || len(after) != 4 || after[0].Document != nil {
		t.Fatalf("history after reclaiming the version-1 revision = %+v, %v", after, err)
	}
	if a, b := after[0], h[0]; a.Revision != b.Revision || a.Actor != b.Actor || a.IdempotencyKey != b.IdempotencyKey || !a.Timestamp.Equal(b.Timestamp) {
		t.Errorf("the reclaimed event changed beyond its document: %+v, was %+v", a, b)
	}
	if _, err := s.Revision(ctx, scope, c.Revision); !errors.Is(err, varplane.ErrReclaimed) {
		t.Errorf("Revision of the reclaimed version-1 revision = %v, want revision-reclaimed", err)
	}
}

// TestHostileRowsFailClosed: rows edited by hand into hostile shapes that
// the database itself accepts (a document nested past the reader's depth
// bound, a revision record or head event that is not one) fail a cold read
// with an internal error, never a crash or an empty state, and are left in
// place.
func TestHostileRowsFailClosed(t *testing.T) {
	deep := strings.Repeat("[", varplane.MaxDepthCeiling+varplane.EnvelopeDepth+1) + strings.Repeat("]", varplane.MaxDepthCeiling+varplane.EnvelopeDepth+1)
	for _, tc := range []struct {
		name, sql string
		args      []any
	}{
		{"record with a document past the depth bound", `UPDATE revisions SET record = json_build_object('scope', scope, 'revision', revision, 'document', $1::json, 'createdAt', '2026-12-02T00:00:00Z') WHERE scope = 'bad.k'`, []any{deep}},
		{"head event past the depth bound", `UPDATE heads SET event = json_build_object('kind', 'activated', 'scope', scope, 'revision', revision, 'generation', generation, 'x', $1::json), version = version + 1 WHERE scope = 'bad.k'`, []any{deep}},
		{"record that is not an object", `UPDATE revisions SET record = '[1]' WHERE scope = 'bad.k'`, nil},
		{"head event with a fractional generation", `UPDATE heads SET event = json_build_object('kind', 'activated', 'scope', scope, 'revision', revision, 'generation', 1.5), version = version + 1 WHERE scope = 'bad.k'`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := freshSchema(t, sharedURL(t))
			s := openStore(t, u, Options{})
			rev := create(t, s, "bad.k", 1)
			activate(t, s, "bad.k", rev, 0)
			raw := rawConn(t, u)
			ctx := context.Background()
			if _, err := raw.Exec(ctx, tc.sql, tc.args...); err != nil {
				t.Fatal(err)
			}
			var before string
			if err := raw.QueryRow(ctx, "SELECT md5(h.event::text || r.record::text) FROM heads h JOIN revisions r USING (scope) WHERE scope = 'bad.k'").Scan(&before); err != nil {
				t.Fatal(err)
			}
			fresh := openStore(t, u, Options{})
			_, err := fresh.State(ctx, "bad.k")
			var e *varplane.Error
			if !errors.As(err, &e) || e.Code != varplane.CodeInternal {
				t.Fatalf("State of a hostile row = %v, want an internal error", err)
			}
			var after string
			if err := raw.QueryRow(ctx, "SELECT md5(h.event::text || r.record::text) FROM heads h JOIN revisions r USING (scope) WHERE scope = 'bad.k'").Scan(&after); err != nil || after != before {
				t.Errorf("the rows changed: %s -> %s (%v)", before, after, err)
			}
		})
	}
}
