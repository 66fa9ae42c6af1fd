package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// TestBatchedCommits: many concurrent commits (grouped into shared
// transactions) each keep their own answer: on distinct scopes all
// succeed; racing for one idempotency key exactly one wins, whether the
// racers share a batch (the later ones see the key) or not (a batch whose
// insert hits the key's primary key is run again call by call).
func TestBatchedCommits(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	const n = 48
	revs := make([]varplane.Revision, n)
	for i := range revs {
		revs[i] = create(t, s, varplane.Scope(fmt.Sprintf("batch.k%d", i)), i)
	}
	for round := range 3 {
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ev := storetest.ActivatedEvent(varplane.Scope(fmt.Sprintf("batch.k%d", i)), revs[i], varplane.Generation(round))
				ev.IdempotencyKey, ev.RequestHash = fmt.Sprintf("shared-%d", round), fmt.Sprint(i)
				errs[i] = s.Append(context.Background(), ev, varplane.Generation(round))
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: racers %d and %d both recorded key shared-%d", round, winner, i, round)
				}
				winner = i
			case !errors.Is(err, varplane.ErrDuplicateIdempotencyKey):
				t.Fatalf("round %d: racer %d: %v, want success or a duplicate key", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no racer won", round)
		}
		rec, err := s.Idempotency(context.Background(), fmt.Sprintf("shared-%d", round))
		if err != nil || rec.RequestHash != fmt.Sprint(winner) {
			t.Fatalf("round %d: record %+v (%v), want the winner %d's", round, rec, err, winner)
		}
		// Only the winner's scope moved; move the others too, without a
		// key, so that the next round starts level.
		for i := range n {
			if i == winner {
				continue
			}
			activate(t, s, varplane.Scope(fmt.Sprintf("batch.k%d", i)), revs[i], varplane.Generation(round))
		}
	}
	if st := s.Stats(); st.Batches == 0 {
		t.Logf("no commits were batched (a slow machine serialised them): %+v", st)
	}
}

// TestBatchRetriedAfterKeyRace: a batch whose call trips the primary key of
// idempotency (another transaction recorded the key after the call checked
// for it) rolls back as a whole; its calls run again one by one, the racing
// one answers a duplicate key and the others commit.
func TestBatchRetriedAfterKeyRace(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	const n = 8
	revs := make([]varplane.Revision, n)
	for i := range revs {
		revs[i] = create(t, s, varplane.Scope(fmt.Sprintf("race.k%d", i)), i)
	}
	ctx := context.Background()
	raw := rawConn(t, u)
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Another writer's transaction records the key "held" and stays open.
	if _, err := tx.Exec(ctx, `WITH e AS (INSERT INTO events (scope, kind, body) VALUES ('race.other', 'rejected', '{}') RETURNING seq)
INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) SELECT 'held', 'x', 'race.other', 0, seq FROM e`); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := storetest.ActivatedEvent(varplane.Scope(fmt.Sprintf("race.k%d", i)), revs[i], 0)
			if i == 0 {
				ev.IdempotencyKey, ev.RequestHash = "held", "mine"
			}
			errs[i] = s.Append(ctx, ev, 0)
		}()
	}
	// The calls are in flight, the one with the key waiting on the open
	// transaction's uncommitted key; then that transaction commits.
	// (pg_stat_activity is read on a connection of its own: inside a
	// transaction it answers the same snapshot every time.)
	watcher := rawConn(t, u)
	eventually(t, 5*time.Second, "the keyed call to wait on the lock", func() bool {
		var waiting int
		_ = watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		return waiting > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !errors.Is(errs[0], varplane.ErrDuplicateIdempotencyKey) {
		t.Errorf("the keyed call = %v, want a duplicate key", errs[0])
	}
	for i := 1; i < n; i++ {
		if errs[i] != nil {
			t.Errorf("call %d = %v, want success", i, errs[i])
		}
		if st := state(t, s, varplane.Scope(fmt.Sprintf("race.k%d", i))); st.Generation != 1 {
			t.Errorf("race.k%d at generation %d, want 1", i, st.Generation)
		}
	}
	if st := state(t, s, "race.k0"); st.Generation != 0 {
		t.Errorf("the refused call moved race.k0 to %d", st.Generation)
	}
}

// TestCloseDuringCommits: closing the store while commits are queued and
// in flight answers every one of them (success, or an error once closed);
// none is left waiting.
func TestCloseDuringCommits(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	const n = 32
	revs := make([]varplane.Revision, n)
	for i := range revs {
		revs[i] = create(t, s, varplane.Scope(fmt.Sprintf("close.k%d", i)), i)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scope := varplane.Scope(fmt.Sprintf("close.k%d", i))
			for gen := varplane.Generation(0); ; gen++ {
				if err := s.Append(context.Background(), storetest.ActivatedEvent(scope, revs[i], gen), gen); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("commits still waiting 10s after Close")
	}
}
