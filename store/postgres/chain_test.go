package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/store/storetest"
)

// TestUpgradeFromVersion6KeepsChainsSound: a schema written by a version-6
// binary (its migrations and commit functions run by hand) is migrated on
// open; its events stay as they were, without links, and each scope's chain
// starts at seq 1 with its next event. A commit function of version 6
// called afterwards (a replica of the previous release still running) is
// refused, writing nothing, rather than appending an event without a link.
func TestUpgradeFromVersion6KeepsChainsSound(t *testing.T) {
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
	} {
		if _, err := raw.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range ms[:6] {
		if _, err := raw.Exec(ctx, m.sql); err != nil {
			t.Fatalf("migration %s: %v", m.name, err)
		}
		if _, err := raw.Exec(ctx, "INSERT INTO schema_version (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			t.Fatal(err)
		}
	}
	const scope = varplane.Scope("up6.k")
	// version 6's publish and rejection, as its binary called them
	publishV6 := func(doc int, expected int64) error {
		c := storetest.CreatedEvent(scope, canonicalDoc(doc))
		a := storetest.ActivatedEvent(scope, c.Revision, varplane.Generation(expected))
		rec := varplane.RevisionRecord{Scope: scope, Revision: c.Revision, Document: c.Document, SchemaID: c.SchemaID, Actor: c.Actor, CreatedAt: c.Timestamp}
		recJ, _ := jsontext.Marshal(&rec)
		cJ, _ := jsontext.Marshal(c)
		aJ, _ := jsontext.Marshal(a)
		var st string
		err := raw.QueryRow(ctx, "SELECT status FROM varplane_publish($1, $2, $3, $4, $5, $6, $7, $8, NULL, '')",
			string(scope), expected, expected+1, string(c.Revision), recJ, cJ, aJ, aJ).Scan(&st)
		if err == nil && st != "OK" {
			err = errors.New(st)
		}
		return err
	}
	if err := publishV6(1, 0); err != nil {
		t.Fatalf("version-6 publish: %v", err)
	}
	rej, _ := jsontext.Marshal(&varplane.Event{Kind: varplane.EventRejected, Scope: scope, RejectionReason: "no", Timestamp: storetest.CreatedEvent(scope, nil).Timestamp})
	if _, err := raw.Exec(ctx, "SELECT varplane_reject($1, $2, NULL, '')", string(scope), rej); err != nil {
		t.Fatalf("version-6 rejection: %v", err)
	}

	s := openStore(t, u, Options{})
	hist, err := s.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := varplane.VerifyChain(scope, hist); err != nil || v.Unchained != 3 || v.Head.Seq != 0 {
		t.Fatalf("history written before the upgrade: %+v, %v; want 3 unchained events", v, err)
	}
	if st := state(t, s, scope); st.Chain != (varplane.ChainHead{}) || st.Generation != 1 {
		t.Fatalf("state after the upgrade = %+v, want generation 1 and no chain yet", st)
	}

	c := storetest.CreatedEvent(scope, canonicalDoc(2))
	a := storetest.ActivatedEvent(scope, c.Revision, 1)
	if _, err := s.AppendPublish(ctx, c, a, 1); err != nil {
		t.Fatal(err)
	}
	if c.Seq != 1 || a.Seq != 2 {
		t.Errorf("the first publish after the upgrade took seqs %d, %d; want 1, 2", c.Seq, a.Seq)
	}
	hist, err = s.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	v, err := varplane.VerifyChain(scope, hist)
	if err != nil || v.Unchained != 3 || v.Head.Seq != 2 || v.Head.Hash != a.Hash {
		t.Fatalf("history after the upgrade: %+v, %v; want 3 unchained events, then seq 1 and 2", v, err)
	}
	if st := state(t, s, scope); st.Chain != v.Head {
		t.Errorf("State().Chain = %+v, the history ends at %+v", st.Chain, v.Head)
	}

	var before int
	if err := raw.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&before); err != nil {
		t.Fatal(err)
	}
	err = publishV6(3, 2)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" {
		t.Fatalf("a version-6 publish after the upgrade = %v, want refused (0A000)", err)
	}
	var after int
	if err := raw.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&after); err != nil || after != before {
		t.Fatalf("events after the refused call: %d, were %d (%v)", after, before, err)
	}
	if _, err := raw.Exec(ctx, "SELECT varplane_reject($1, $2, NULL, '')", string(scope), rej); err == nil {
		t.Fatal("a version-6 rejection after the upgrade was accepted")
	}
	if _, err := varplane.VerifyStore(ctx, s); err != nil {
		t.Fatalf("VerifyStore after the upgrade: %v", err)
	}
}

// TestChainTwoReplicas races commits of every kind on one scope and its
// subtree through two replicas of one database: every chain comes out
// gapless and sound.
func TestChainTwoReplicas(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	storetest.ChainReplicas(t, openStore(t, u, Options{}), openStore(t, u, Options{}))
}

// TestDeactivationLinks: the content varplane_deactivate joins around the
// cascade it chooses is the content of the event with that cascade, with
// and without an actor (the one member RFC 8785 sorts before "cascade"),
// for descendants whose names JSON escapes.
func TestDeactivationLinks(t *testing.T) {
	s := openStore(t, freshSchema(t, sharedURL(t)), Options{})
	ctx := context.Background()
	for i, actor := range []string{"", "ops", `a"\é`} {
		parent := varplane.Scope(fmt.Sprintf("dz%d", i))
		publishCanonical(t, s, parent, 0)
		for j, kid := range []varplane.Scope{parent + `.b"q\é`, parent + ".c", parent + ".c.d"} {
			publishCanonical(t, s, kid, j+1)
		}
		ev := storetest.DeactivatedEvent(parent, 1)
		ev.Actor = actor
		if err := s.AppendSubtreeDeactivation(ctx, ev, 1); err != nil {
			t.Fatal(err)
		}
		if len(ev.Cascade) != 3 || ev.Seq != 3 {
			t.Fatalf("actor %q: cascade %v, seq %d; want 3 descendants, seq 3", actor, ev.Cascade, ev.Seq)
		}
		hist, err := s.History(ctx, parent)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := varplane.VerifyChain(parent, hist); err != nil || v.Head.Hash != ev.Hash {
			t.Fatalf("actor %q: %+v, %v", actor, v, err)
		}
	}
	if _, err := varplane.VerifyStore(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// canonicalDoc is a document in RFC 8785 form, so that storetest.RevisionOf
// is its revision and VerifyStore finds its digest sound.
func canonicalDoc(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)) }

// publishCanonical publishes canonicalDoc(i) as scope's first head.
func publishCanonical(t *testing.T, s varplane.Store, scope varplane.Scope, i int) {
	t.Helper()
	c := storetest.CreatedEvent(scope, canonicalDoc(i))
	if _, err := s.AppendPublish(context.Background(), c, storetest.ActivatedEvent(scope, c.Revision, 0), 0); err != nil {
		t.Fatalf("publish %s: %v", scope, err)
	}
}
