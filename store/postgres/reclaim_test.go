package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/store/storetest"
)

// reclaimFixture stores three revisions of scope, activates them in turn
// (the third is the head, at generation 3) and returns them.
func reclaimFixture(t *testing.T, s *Store, scope varplane.Scope) []varplane.Revision {
	t.Helper()
	var revs []varplane.Revision
	for i := range 3 {
		revs = append(revs, create(t, s, scope, 10+i))
		activate(t, s, scope, revs[i], varplane.Generation(i))
	}
	return revs
}

// headsReclaimed counts the heads whose revision is marked reclaimed: a
// store that let an activation and a reclamation of one revision both
// succeed leaves one.
func headsReclaimed(t *testing.T, u string) int {
	t.Helper()
	var n int
	if err := rawConn(t, u).QueryRow(context.Background(),
		"SELECT count(*) FROM heads h JOIN revisions r ON r.scope = h.scope AND r.revision = h.revision WHERE r.reclaimed_at IS NOT NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReclaimSkipsHeldRevision: a revision that a commit in flight holds
// (FOR KEY SHARE, as an activation of it does) is skipped, at once, rather
// than waited for; the others are reclaimed.
func TestReclaimSkipsHeldRevision(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	const scope = varplane.Scope("skip.k")
	revs := reclaimFixture(t, s, scope)
	ctx := context.Background()
	raw := rawConn(t, u)
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM revisions WHERE scope = $1 AND revision = $2 FOR KEY SHARE", string(scope), string(revs[0])); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := s.ReclaimRevisions(rctx, scope, revs)
	if err != nil || n != 1 {
		t.Fatalf("ReclaimRevisions with revision 0 held = %d, %v; want 1 (revision 1; 0 is held, 2 is the head)", n, err)
	}
	if _, err := s.Revision(ctx, scope, revs[0]); err != nil {
		t.Errorf("the held revision: %v, want it kept", err)
	}
	if _, err := s.Revision(ctx, scope, revs[1]); !errors.Is(err, varplane.ErrReclaimed) {
		t.Errorf("revision 1: %v, want revision-reclaimed", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ReclaimRevisions(ctx, scope, revs); err != nil || n != 1 {
		t.Errorf("ReclaimRevisions once released = %d, %v; want 1", n, err)
	}
}

// TestActivationWaitsForReclaim: an activation of a revision whose
// reclamation is in flight (its row locked FOR UPDATE, as ReclaimRevisions
// holds it) waits for it, then answers not-found and changes nothing; a
// publish of its document waits the same way and then stores it again.
func TestActivationWaitsForReclaim(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	const scope = varplane.Scope("wait.k")
	revs := reclaimFixture(t, s, scope)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		commit func() error
		check  func(err error)
	}{
		{"activate", func() error {
			return s.Append(ctx, storetest.ActivatedEvent(scope, revs[0], 3), 3)
		}, func(err error) {
			if !errors.Is(err, varplane.ErrNotFound) {
				t.Errorf("activation of a revision reclaimed meanwhile = %v, want not-found", err)
			}
			wantGen(t, s, scope, 3, revs[2])
		}},
		{"publish", func() error {
			created, err := publishOn(s, scope, storetest.Doc(11), "", 3)
			if err == nil && !created {
				t.Error("publish of a revision reclaimed meanwhile reports it found, want created again")
			}
			return err
		}, func(err error) {
			if err != nil {
				t.Errorf("publish of a revision reclaimed meanwhile = %v", err)
			}
			wantGen(t, s, scope, 4, revs[1])
			if rec, err := s.Revision(ctx, scope, revs[1]); err != nil || rec.Revision != revs[1] {
				t.Errorf("Revision after the publish = %+v, %v", rec, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := revs[0]
			if tc.name == "publish" {
				target = revs[1]
			}
			raw := rawConn(t, u)
			tx, err := raw.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SELECT 1 FROM revisions WHERE scope = $1 AND revision = $2 FOR UPDATE", string(scope), string(target)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tc.commit() }()
			select {
			case err := <-done:
				t.Fatalf("the commit returned %v while the revision's row was locked", err)
			case <-time.After(300 * time.Millisecond):
			}
			if _, err := tx.Exec(ctx, "UPDATE revisions SET record = NULL, reclaimed_at = now() WHERE scope = $1 AND revision = $2", string(scope), string(target)); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				tc.check(err)
			case <-time.After(10 * time.Second):
				t.Fatal("the commit did not return after the reclamation committed")
			}
			if n := headsReclaimed(t, u); n != 0 {
				t.Errorf("%d heads name a reclaimed revision", n)
			}
		})
	}
}

func wantGen(t *testing.T, s *Store, scope varplane.Scope, gen varplane.Generation, rev varplane.Revision) {
	t.Helper()
	st := state(t, s, scope)
	if st.Generation != gen || st.Head == nil || st.Head.Revision != rev {
		t.Errorf("state of %s = generation %d head %v, want %d %s", scope, st.Generation, st.Head, gen, rev)
	}
}

// TestReclaimRacesActivation: an activation and a reclamation of the same
// revision race, many times, through two replicas: exactly one succeeds
// each round, and no head ever names a reclaimed revision.
func TestReclaimRacesActivation(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	ctx := context.Background()
	for round := range 40 {
		scope := varplane.Scope(fmt.Sprintf("race.k%d", round))
		old := create(t, a, scope, 1)
		activate(t, a, scope, old, 0)
		cur := create(t, a, scope, 2)
		activate(t, a, scope, cur, 1)
		var (
			wg     sync.WaitGroup
			actErr error
			n      int
			recErr error
		)
		wg.Add(2)
		go func() { defer wg.Done(); actErr = b.Append(ctx, storetest.ActivatedEvent(scope, old, 2), 2) }()
		go func() { defer wg.Done(); n, recErr = a.ReclaimRevisions(ctx, scope, []varplane.Revision{old}) }()
		wg.Wait()
		if recErr != nil {
			t.Fatalf("round %d: reclaim: %v", round, recErr)
		}
		switch {
		case actErr == nil && n == 0:
			if _, err := a.Revision(ctx, scope, old); err != nil {
				t.Errorf("round %d: activated, yet Revision = %v", round, err)
			}
		case errors.Is(actErr, varplane.ErrNotFound) && n == 1:
		default:
			t.Fatalf("round %d: activation %v, %d reclaimed: want exactly one to succeed", round, actErr, n)
		}
	}
	if n := headsReclaimed(t, u); n != 0 {
		t.Errorf("%d heads name a reclaimed revision", n)
	}
}

// TestEventsOneEdit: the log allows one edit only, the one reclamation
// makes (a reclaimed revision's revision-created event losing its
// document); any other change of an event, or that change of a revision
// still stored, is refused and changes nothing.
func TestEventsOneEdit(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	const scope = varplane.Scope("edit.k")
	revs := reclaimFixture(t, s, scope)
	ctx := context.Background()
	raw := rawConn(t, u)
	before, err := s.History(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	// The event of revs[0] without its document, as reclamation writes it.
	bare := before[0]
	bare.Document = nil
	edit := func(rev varplane.Revision, body string) error {
		_, err := raw.Exec(ctx, "UPDATE events SET body = $3::json WHERE scope = $1 AND kind = 'revision-created' AND body->>'revision' = $2",
			string(scope), string(rev), body)
		return err
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want the append-only refusal", what, err)
		}
	}
	refused("dropping the document of a revision still stored", edit(revs[0], string(eventjson.Event(&bare))))
	if _, err := raw.Exec(ctx, "UPDATE revisions SET record = NULL, reclaimed_at = now() WHERE scope = $1 AND revision = $2", string(scope), string(revs[0])); err != nil {
		t.Fatal(err)
	}
	forged := bare
	forged.Actor = "mallory"
	refused("a changed actor", edit(revs[0], string(eventjson.Event(&forged))))
	other := before[0]
	other.Document = storetest.Doc(99)
	refused("another document", edit(revs[0], string(eventjson.Event(&other))))
	// Cut out of the text: the document with the member after it.
	whole := string(eventjson.Event(&before[0]))
	at := strings.Index(whole, `,"document":`)
	end := at + len(`,"document":`) + len(before[0].Document)
	after := strings.Index(whole[end+1:], `,"`)
	if after < 0 {
		t.Fatalf("no member after the document in %s", whole)
	}
	refused("the document and the member after it", edit(revs[0], whole[:at]+whole[end+1+after:]))
	for _, sql := range []string{
		"UPDATE events SET kind = 'rejected' WHERE scope = 'edit.k' AND kind = 'revision-created'",
		"UPDATE events SET scope = 'other.k' WHERE scope = 'edit.k' AND kind = 'revision-created'",
		"UPDATE events SET body = body WHERE scope = 'edit.k' AND kind = 'activated'",
		"DELETE FROM events WHERE scope = 'edit.k' AND kind = 'revision-created'",
	} {
		_, err := raw.Exec(ctx, sql)
		refused(sql, err)
	}
	if after, err := s.History(ctx, scope); err != nil || len(after) != len(before) || !bytes.Equal(after[0].Document, before[0].Document) {
		t.Fatalf("history after the refused edits: %d events, %v", len(after), err)
	}
	if err := edit(revs[0], string(eventjson.Event(&bare))); err != nil {
		t.Errorf("the edit reclamation makes was refused: %v", err)
	}
	if after, err := s.History(ctx, scope); err != nil || after[0].Document != nil || after[0].Revision != revs[0] {
		t.Errorf("history after the allowed edit: %+v, %v", after[0], err)
	}
}
