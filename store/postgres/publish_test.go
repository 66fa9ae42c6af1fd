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

// publishOn publishes doc in scope at expected through s.
func publishOn(s varplane.Store, scope varplane.Scope, doc []byte, key string, expected varplane.Generation) (bool, error) {
	c := storetest.CreatedEvent(scope, doc)
	a := storetest.ActivatedEvent(scope, c.Revision, expected)
	if key != "" {
		a.IdempotencyKey, a.RequestHash = key, "h-"+key
	}
	return s.AppendPublish(context.Background(), c, a, expected)
}

// TestPublishAcrossReplicas: a publish through A reaches B as exactly one
// activated commit carrying the new head, and B serves the revision; a
// publish through B of the revision A stored activates it (found, not
// created) and reaches A.
func TestPublishAcrossReplicas(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	chB, chA := watchChan(t, b), watchChan(t, a)
	const scope = varplane.Scope("pub.replicas")
	doc := storetest.Doc(1)
	rev := storetest.RevisionOf(doc)
	if created, err := publishOn(a, scope, doc, "", 0); err != nil || !created {
		t.Fatalf("publish through A: created %v, %v", created, err)
	}
	c := nextCommit(t, chB, 10*time.Second)
	if c.Kind != varplane.EventActivated || len(c.Changes) != 1 || c.Changes[0].Generation != 1 ||
		c.Changes[0].Head == nil || c.Changes[0].Head.Revision != rev {
		t.Fatalf("B's commit = %+v, want one activation of %s at 1", c, rev)
	}
	select {
	case extra := <-chB:
		t.Errorf("B heard a second commit for one publish: %+v", extra)
	case <-time.After(300 * time.Millisecond):
	}
	if st := state(t, b, scope); st.Generation != 1 || st.Head == nil || st.Head.Revision != rev {
		t.Fatalf("B's state = %+v", st)
	}
	if rec, err := b.Revision(context.Background(), scope, rev); err != nil || rec.Revision != rev {
		t.Fatalf("B's Revision = %+v, %v", rec, err)
	}
	nextCommit(t, chA, 10*time.Second) // A's own publish
	if created, err := publishOn(b, scope, doc, "pub-replicas-k", 1); err != nil || created {
		t.Fatalf("republish through B: created %v (want false), %v", created, err)
	}
	c = nextCommit(t, chA, 10*time.Second)
	if len(c.Changes) != 1 || c.Changes[0].Generation != 2 || c.Changes[0].Head.Revision != rev {
		t.Fatalf("A's commit = %+v, want the activation at 2", c)
	}
	rec, err := a.Idempotency(context.Background(), "pub-replicas-k")
	if err != nil || rec.Event.Kind != varplane.EventActivated || rec.Generation != 2 {
		t.Fatalf("Idempotency of the republish = %+v, %v; want the activation at 2", rec, err)
	}
}

// TestPublishRaceAcrossReplicas: publishers on two store values (so two
// sessions, no shared batch) race on one expected generation: one wins,
// every other gets a conflict at the winner's generation, never a unique
// violation or an unavailable error, and no loser's revision is stored.
// In the odd rounds every racer publishes the same document, so the losers
// would trip the primary key of revisions had they looked for the revision
// before taking the head row's lock.
func TestPublishRaceAcrossReplicas(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	stores := []*Store{openStore(t, u, Options{}), openStore(t, u, Options{})}
	for round := range 6 {
		scope := varplane.Scope(fmt.Sprintf("pub.xrace%d", round))
		const racers = 16
		doc := func(i int) []byte {
			if round%2 == 1 {
				return storetest.Doc(100 * round)
			}
			return storetest.Doc(100*round + i)
		}
		errs := make([]error, racers)
		created := make([]bool, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				created[i], errs[i] = publishOn(stores[i%2], scope, doc(i), "", 0)
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: racers %d and %d both won", round, winner, i)
				}
				winner = i
			case !errors.Is(err, varplane.ErrConflict):
				t.Fatalf("round %d: racer %d: %v, want a conflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won", round)
		}
		if !created[winner] {
			t.Errorf("round %d: the winner reports its revision was not created", round)
		}
		for i := range racers {
			_, err := stores[0].Revision(context.Background(), scope, storetest.RevisionOf(doc(i)))
			if i != winner && round%2 == 0 && !errors.Is(err, varplane.ErrNotFound) {
				t.Errorf("round %d: loser %d's revision is stored (err %v)", round, i, err)
			}
		}
		h, err := stores[1].History(context.Background(), scope)
		if err != nil || kinds(h) != "revision-created,activated" {
			t.Errorf("round %d: history %s, %v; want the winner's two events", round, kinds(h), err)
		}
	}
}

// TestPublishRacesPlainCreate: a publish and a plain create of the same
// revision, racing, both succeed as the contract allows (the create may
// find the revision stored, the publish may find it created), and the log
// holds one revision-created event, never a unique violation.
func TestPublishRacesPlainCreate(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a, b := openStore(t, u, Options{}), openStore(t, u, Options{})
	for round := range 20 {
		scope := varplane.Scope(fmt.Sprintf("pub.create%d", round))
		doc := storetest.Doc(round)
		var (
			wg        sync.WaitGroup
			pubErr    error
			createErr error
		)
		wg.Add(2)
		go func() { defer wg.Done(); _, pubErr = publishOn(a, scope, doc, "", 0) }()
		go func() {
			defer wg.Done()
			createErr = b.Append(context.Background(), storetest.CreatedEvent(scope, doc), 0)
		}()
		wg.Wait()
		if pubErr != nil {
			t.Fatalf("round %d: publish: %v", round, pubErr)
		}
		if createErr != nil && !errors.Is(createErr, varplane.ErrRevisionExists) {
			t.Fatalf("round %d: create: %v", round, createErr)
		}
		h, err := a.History(context.Background(), scope)
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(h); got != "revision-created,activated" {
			t.Fatalf("round %d: history %s, want one revision-created and the activation", round, got)
		}
	}
}

// TestRevisionReclaimed: a revision row marked reclaimed answers
// ErrReclaimed, not ErrNotFound; one never stored answers ErrNotFound.
func TestRevisionReclaimed(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	const scope = varplane.Scope("ret.k")
	old := create(t, s, scope, 1)
	cur := create(t, s, scope, 2)
	activate(t, s, scope, cur, 0)
	if _, err := rawConn(t, u).Exec(context.Background(), "UPDATE revisions SET reclaimed_at = now() WHERE scope = $1 AND revision = $2", string(scope), string(old)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Revision(ctx, scope, old); !errors.Is(err, varplane.ErrReclaimed) || errors.Is(err, varplane.ErrNotFound) {
		t.Errorf("Revision of a reclaimed revision = %v, want ErrReclaimed", err)
	}
	if _, err := s.Revision(ctx, scope, storetest.RevisionOf(storetest.Doc(3))); !errors.Is(err, varplane.ErrNotFound) {
		t.Errorf("Revision of a revision never stored = %v, want ErrNotFound", err)
	}
	if rec, err := s.Revision(ctx, scope, cur); err != nil || rec.Revision != cur {
		t.Errorf("Revision of the head = %+v, %v", rec, err)
	}
}

// TestLeasesAcrossReplicas: two store values exclude each other through
// the leases table, and a release by one that does not hold the lease
// deletes nothing.
func TestLeasesAcrossReplicas(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a, b := openStore(t, u, Options{}), openStore(t, u, Options{})
	ctx := context.Background()
	if err := a.AcquireLease(ctx, "pass", "holder-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.AcquireLease(ctx, "pass", "holder-b", time.Minute); !errors.Is(err, varplane.ErrLeaseHeld) {
		t.Fatalf("B's acquire while A holds = %v, want ErrLeaseHeld", err)
	}
	if err := b.ReleaseLease(ctx, "pass", "holder-b"); !errors.Is(err, varplane.ErrLeaseLost) {
		t.Fatalf("B's release of A's lease = %v, want ErrLeaseLost", err)
	}
	if err := b.RenewLease(ctx, "pass", "holder-a", time.Minute); err != nil {
		t.Fatalf("renew by A's holder token through B = %v (the lease is the database's, not the process's)", err)
	}
	if err := a.ReleaseLease(ctx, "pass", "holder-a"); err != nil {
		t.Fatal(err)
	}
	if err := b.AcquireLease(ctx, "pass", "holder-b", time.Minute); err != nil {
		t.Fatalf("B's acquire after A's release = %v", err)
	}
}

// TestReadOnlyRefusesPublishAndLeases: a data-plane replica refuses a
// publish and every lease call as store-unsupported, before sending
// anything.
func TestReadOnlyRefusesPublishAndLeases(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	openStore(t, u, Options{}) // migrates
	ro := openStore(t, u, Options{ReadOnly: true})
	ctx := context.Background()
	_, perr := publishOn(ro, "ro.k", storetest.Doc(1), "", 0)
	for name, err := range map[string]error{
		"publish": perr,
		"acquire": ro.AcquireLease(ctx, "pass", "h", time.Minute),
		"renew":   ro.RenewLease(ctx, "pass", "h", time.Minute),
		"release": ro.ReleaseLease(ctx, "pass", "h"),
	} {
		if varplane.ErrorCode(err) != varplane.CodeStoreUnsupported {
			t.Errorf("%s on a read-only store = %v, want store-unsupported", name, err)
		}
	}
}

// TestPublishKeyRace: two replicas publish with one idempotency key on two
// scopes at once (so no head-row lock orders them): the primary key of
// idempotency refuses the second, which is a duplicate and leaves nothing
// in its scope.
func TestPublishKeyRace(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	stores := []*Store{openStore(t, u, Options{}), openStore(t, u, Options{})}
	for round := range 10 {
		key := fmt.Sprintf("pub-keyrace-%d", round)
		scopes := []varplane.Scope{varplane.Scope(fmt.Sprintf("pub.kr%d.a", round)), varplane.Scope(fmt.Sprintf("pub.kr%d.b", round))}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = publishOn(stores[i], scopes[i], storetest.Doc(round), key, 0)
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: both publishes with one key were accepted", round)
			case !errors.Is(err, varplane.ErrDuplicateIdempotencyKey):
				t.Fatalf("round %d: publish %d: %v, want a duplicate idempotency key", round, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: both refused", round)
		}
		lost := scopes[1-won]
		if h, err := stores[0].History(context.Background(), lost); err != nil || len(h) != 0 {
			t.Errorf("round %d: the refused publish's scope has history %s (%v)", round, kinds(h), err)
		}
		if rec, err := stores[1].Idempotency(context.Background(), key); err != nil || rec.Event.Scope != scopes[won] {
			t.Errorf("round %d: Idempotency = %+v, %v; want the winner's", round, rec, err)
		}
	}
}
