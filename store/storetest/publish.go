package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// testPublish runs the conformance cases of Store.AppendPublish: a publish
// of a new revision and of a stored one, all or nothing on every refusal, a
// race of many publishers on one expected generation, the idempotency record
// of each case, the commit a watcher hears, a restart, and a crash between
// the publish's two events (Harness.CutLastEvent).
func testPublish(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"New", testPublishNew},
		{"Existing", testPublishExisting},
		{"AllOrNothing", testPublishAllOrNothing},
		{"LostRace", testPublishLostRace},
		{"Idempotency", testPublishIdempotency},
		{"Watch", testPublishWatch},
		{"Restart", testPublishRestart},
		{"CrashBetweenEvents", testPublishCrash},
		{"Closed", testPublishClosed},
		{"BytesKept", testPublishBytesKept},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// publish appends a publish of doc in scope at expected and returns the
// revision and whether the store reports it created.
func publish(t testing.TB, s varplane.Store, scope varplane.Scope, doc []byte, expected varplane.Generation) (varplane.Revision, bool) {
	t.Helper()
	c := CreatedEvent(scope, doc)
	created, err := s.AppendPublish(context.Background(), c, ActivatedEvent(scope, c.Revision, expected), expected)
	if err != nil {
		t.Fatalf("publish in %s at %d: %v", scope, expected, err)
	}
	return c.Revision, created
}

func testPublishNew(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("pub.new")
	rev, created := publish(t, s, scope, Doc(1), 0)
	if !created {
		t.Error("publish of a new revision reports it was not created")
	}
	wantHead(t, s, scope, 1, rev)
	if st := mustState(t, s, scope); !jsonEqual(st.Head.Document, Doc(1)) || st.Head.SchemaID != "test/v1" {
		t.Errorf("head = %s schema %q, want %s schema test/v1", st.Head.Document, st.Head.SchemaID, Doc(1))
	}
	rec, err := s.Revision(ctx, scope, rev)
	if err != nil || !jsonEqual(rec.Document, Doc(1)) {
		t.Fatalf("Revision after publish = %+v, %v", rec, err)
	}
	hist := mustHistory(t, s, scope)
	if got := kinds(hist); got != "revision-created activated" {
		t.Fatalf("history = %s, want revision-created activated", got)
	}
	if a := hist[1]; a.Revision != rev || a.Generation != 1 || a.PreviousGeneration == nil || *a.PreviousGeneration != 0 {
		t.Errorf("activation = %+v, want %s at 1 after 0", a, rev)
	}
	// A second publish moves the head on.
	rev2, created := publish(t, s, scope, Doc(2), 1)
	if !created {
		t.Error("second publish reports its revision was not created")
	}
	wantHead(t, s, scope, 2, rev2)
	if got := kinds(mustHistory(t, s, scope)); got != "revision-created activated revision-created activated" {
		t.Errorf("history = %s", got)
	}
}

func testPublishExisting(t *testing.T, h Harness) {
	s := open(t, h)
	const scope = varplane.Scope("pub.existing")
	r1 := mustCreate(t, s, scope, Doc(1))
	rev, created := publish(t, s, scope, Doc(1), 0)
	if created || rev != r1 {
		t.Errorf("publish of a stored revision: created = %v (want false), revision %s (want %s)", created, rev, r1)
	}
	wantHead(t, s, scope, 1, r1)
	if got := kinds(mustHistory(t, s, scope)); got != "revision-created activated" {
		t.Errorf("history = %s, want the one revision-created and the activation", got)
	}
	// Publishing the head's own revision again is an activation at the
	// next generation, like Append of an activation.
	if _, created := publish(t, s, scope, Doc(1), 1); created {
		t.Error("republish of the head reports a created revision")
	}
	wantHead(t, s, scope, 2, r1)
}

func testPublishAllOrNothing(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("pub.aon")
	r0, _ := publish(t, s, scope, Doc(0), 0)
	keyed := ActivatedEvent(scope, r0, 1)
	keyed.IdempotencyKey, keyed.RequestHash = "pub-aon-key", "h"
	if err := s.Append(ctx, keyed, 1); err != nil {
		t.Fatal(err)
	}
	before := kinds(mustHistory(t, s, scope))
	doc := Doc(7)
	rev := RevisionOf(doc)
	cases := []struct {
		name   string
		mutate func(c, a *varplane.Event) varplane.Generation // returns expected
		want   func(t testing.TB, err error) bool
	}{
		{"stale generation", func(c, a *varplane.Event) varplane.Generation {
			*a = *ActivatedEvent(scope, rev, 0)
			return 0
		}, func(t testing.TB, err error) bool { wantConflict(t, err, 0, 2); return true }},
		{"future generation", func(c, a *varplane.Event) varplane.Generation {
			*a = *ActivatedEvent(scope, rev, 9)
			return 9
		}, func(t testing.TB, err error) bool { wantConflict(t, err, 9, 2); return true }},
		{"activation generation is not expected+1", func(c, a *varplane.Event) varplane.Generation {
			a.Generation = 5
			return 2
		}, isBadRequest},
		{"reused idempotency key", func(c, a *varplane.Event) varplane.Generation {
			a.IdempotencyKey, a.RequestHash = "pub-aon-key", "other"
			return 2
		}, func(_ testing.TB, err error) bool { return errors.Is(err, varplane.ErrDuplicateIdempotencyKey) }},
		{"idempotency key on the revision", func(c, a *varplane.Event) varplane.Generation {
			c.IdempotencyKey = "pub-aon-other"
			return 2
		}, isBadRequest},
		{"document is not JSON", func(c, a *varplane.Event) varplane.Generation {
			c.Document = []byte(`{"x":`)
			return 2
		}, isBadRequest},
		{"activation of another revision", func(c, a *varplane.Event) varplane.Generation {
			a.Revision = r0
			return 2
		}, isBadRequest},
		{"another scope", func(c, a *varplane.Event) varplane.Generation {
			a.Scope = "pub.other"
			return 2
		}, isBadRequest},
		{"kinds swapped", func(c, a *varplane.Event) varplane.Generation {
			c.Kind = varplane.EventActivated
			return 2
		}, isBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := CreatedEvent(scope, doc)
			a := ActivatedEvent(scope, rev, 2)
			expected := tc.mutate(c, a)
			created, err := s.AppendPublish(ctx, c, a, expected)
			if err == nil || created {
				t.Fatalf("publish was accepted (created %v), want a refusal", created)
			}
			if !tc.want(t, err) {
				t.Errorf("err = %v, not the refusal wanted", err)
			}
			if _, err := s.Revision(ctx, scope, rev); !errors.Is(err, varplane.ErrNotFound) {
				t.Errorf("a refused publish left its revision stored (err %v)", err)
			}
			if got := kinds(mustHistory(t, s, scope)); got != before {
				t.Errorf("history = %s, want it unchanged (%s)", got, before)
			}
			wantHead(t, s, scope, 2, r0)
		})
	}
}

func isBadRequest(_ testing.TB, err error) bool {
	return varplane.ErrorCode(err) == varplane.CodeBadRequest
}

func testPublishLostRace(t *testing.T, h Harness) {
	s := open(t, h)
	const scope = varplane.Scope("pub.race")
	const racers = 64
	publish(t, s, scope, Doc(-1), 0)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := CreatedEvent(scope, Doc(i))
			<-start
			_, errs[i] = s.AppendPublish(context.Background(), c, ActivatedEvent(scope, c.Revision, 1), 1)
		}()
	}
	close(start)
	wg.Wait()
	winner := oneWinner(t, errs, 1, 2)
	wantHead(t, s, scope, 2, RevisionOf(Doc(winner)))
	ctx := context.Background()
	for i := range racers {
		_, err := s.Revision(ctx, scope, RevisionOf(Doc(i)))
		if i == winner && err != nil {
			t.Errorf("the winner's revision: %v", err)
		}
		if i != winner && !errors.Is(err, varplane.ErrNotFound) {
			t.Errorf("loser %d's revision is stored (err %v): a lost publish must leave nothing", i, err)
		}
	}
	if got := kinds(mustHistory(t, s, scope)); got != "revision-created activated revision-created activated" {
		t.Errorf("history = %s, want the first publish and the winner's only", got)
	}
}

func testPublishIdempotency(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("pub.idem")
	// A new revision: the key is recorded with the revision-created event,
	// at the generation before the activation.
	c := CreatedEvent(scope, Doc(1))
	a := ActivatedEvent(scope, c.Revision, 0)
	a.IdempotencyKey, a.RequestHash = "pub-k1", "pub-h1"
	if created, err := s.AppendPublish(ctx, c, a, 0); err != nil || !created {
		t.Fatalf("publish: created %v, %v", created, err)
	}
	// A stored revision: the key is recorded with the activation.
	c2 := CreatedEvent(scope, Doc(1))
	a2 := ActivatedEvent(scope, c2.Revision, 1)
	a2.IdempotencyKey, a2.RequestHash = "pub-k2", "pub-h2"
	if created, err := s.AppendPublish(ctx, c2, a2, 1); err != nil || created {
		t.Fatalf("republish: created %v, %v", created, err)
	}
	for _, tc := range []struct {
		key, hash string
		kind      varplane.EventKind
		gen       varplane.Generation
	}{
		{"pub-k1", "pub-h1", varplane.EventRevisionCreated, 0},
		{"pub-k2", "pub-h2", varplane.EventActivated, 2},
	} {
		rec, err := s.Idempotency(ctx, tc.key)
		if err != nil {
			t.Fatalf("Idempotency(%s): %v", tc.key, err)
		}
		if rec.RequestHash != tc.hash || rec.Event.Kind != tc.kind || rec.Event.Revision != c.Revision || rec.Generation != tc.gen {
			t.Errorf("Idempotency(%s) = hash %q kind %s revision %s gen %d, want %q %s %s %d",
				tc.key, rec.RequestHash, rec.Event.Kind, rec.Event.Revision, rec.Generation, tc.hash, tc.kind, c.Revision, tc.gen)
		}
	}
	hist := mustHistory(t, s, scope)
	keys := make([]string, len(hist))
	for i, ev := range hist {
		keys[i] = ev.IdempotencyKey
	}
	if got := fmt.Sprint(keys); got != "[pub-k1  pub-k2]" {
		t.Errorf("history keys = %s, want the first on the revision-created event, the second on the last activation", got)
	}
}

func testPublishWatch(t *testing.T, h Harness) {
	s := open(t, h)
	ch := make(chan varplane.Commit, 4)
	defer s.Watch(func(c varplane.Commit) { ch <- c })()
	const scope = varplane.Scope("pub.watch")
	rev, _ := publish(t, s, scope, Doc(1), 0)
	c := recvCommit(t, ch)
	if c.Kind != varplane.EventActivated || c.Scope != scope || len(c.Changes) != 1 ||
		c.Changes[0].Generation != 1 || c.Changes[0].Head == nil || c.Changes[0].Head.Revision != rev {
		t.Errorf("commit = %+v, want one activation of %s at 1", c, rev)
	}
}

func testPublishRestart(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("ephemeral store: nothing survives a restart")
	}
	s := h.Open(t)
	const scope = varplane.Scope("pub.restart")
	r1, _ := publish(t, s, scope, Doc(1), 0)
	publish(t, s, scope, Doc(1), 1)
	keys := []string{}
	before := capture(t, s, keys)
	hist := kinds(mustHistory(t, s, scope))
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	before.diff(t, capture(t, s, keys))
	wantHead(t, s, scope, 2, r1)
	if got := kinds(mustHistory(t, s, scope)); got != hist {
		t.Errorf("history after restart = %s, want %s", got, hist)
	}
	r2, created := publish(t, s, scope, Doc(2), 2)
	if !created {
		t.Error("publish after restart reports its revision was not created")
	}
	wantHead(t, s, scope, 3, r2)
}

// testPublishCrash cuts the last event of the log, the activation of a
// publish, as a crash between the publish's two writes would: the store
// must come back without the revision either.
func testPublishCrash(t *testing.T, h Harness) {
	if h.CutLastEvent == nil {
		t.Skip("the store writes a publish in one atomic step that no crash can split (no CutLastEvent)")
	}
	s := h.Open(t)
	ctx := context.Background()
	const scope = varplane.Scope("pub.crash")
	r1, _ := publish(t, s, scope, Doc(1), 0)
	r2, _ := publish(t, s, scope, Doc(2), 1)
	s = h.CutLastEvent(t, s)
	t.Cleanup(func() { _ = s.Close() })
	wantHead(t, s, scope, 1, r1)
	if _, err := s.Revision(ctx, scope, r2); !errors.Is(err, varplane.ErrNotFound) {
		t.Errorf("the revision of the cut publish is stored (err %v): a half publish", err)
	}
	if got := kinds(mustHistory(t, s, scope)); got != "revision-created activated" {
		t.Errorf("history = %s, want the first publish only", got)
	}
	// The store goes on from there.
	r3, created := publish(t, s, scope, Doc(2), 1)
	if !created || r3 != r2 {
		t.Errorf("publish after the crash: created %v revision %s, want a new %s", created, r3, r2)
	}
	wantHead(t, s, scope, 2, r2)
}

// oneWinner checks the outcome of racers committing on one expected
// generation: exactly one nil error, every other a conflict at current. It
// returns the winner's index.
func oneWinner(t testing.TB, errs []error, expected, current varplane.Generation) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("racers %d and %d both won", winner, i)
			}
			winner = i
			continue
		}
		wantConflict(t, err, expected, current)
	}
	if winner < 0 {
		t.Fatal("no racer won")
	}
	return winner
}

func testPublishClosed(t *testing.T, h Harness) {
	s := h.Open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c := CreatedEvent("pub.closed", Doc(1))
	if _, err := s.AppendPublish(context.Background(), c, ActivatedEvent("pub.closed", c.Revision, 0), 0); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("publish after Close: err = %v, want ErrClosed", err)
	}
}

// PublishLoad runs b.N publishes on s from parallelism goroutines, each
// publishing a new 1 KiB document on a scope of its own with the right
// expected generation, and reports commits/s. Stores report their own
// extra metrics (events per fsync) around it.
func PublishLoad(b *testing.B, s varplane.Store, parallelism int) {
	ctx := context.Background()
	pad := strings.Repeat("x", 960)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per, extra := b.N/parallelism, b.N%parallelism
	for i := range parallelism {
		n := per
		if i < extra {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			scope := varplane.Scope(fmt.Sprintf("bench.pub.p%d", i))
			gen := varplane.Generation(0)
			for k := range n {
				c := CreatedEvent(scope, json.RawMessage(fmt.Sprintf(`{"enabled":true,"n":%d,"note":"%s"}`, k, pad)))
				if _, err := s.AppendPublish(ctx, c, ActivatedEvent(scope, c.Revision, gen), gen); err != nil {
					b.Error(err)
					return
				}
				gen++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if elapsed > 0 {
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	}
}

// testPublishBytesKept: a published document is kept byte for byte, the
// characters an HTML-escaping encoder would rewrite included, in the
// revision, the head and the history, also after a restart.
func testPublishBytesKept(t *testing.T, h Harness) {
	s := open(t, h)
	const scope = varplane.Scope("pub.bytes")
	doc := []byte(`{"html":"<a href=\"x\">&amp;</a>","sep":"\u2028","raw":" "}`)
	rev, _ := publish(t, s, scope, doc, 0)
	check := func(s varplane.Store, when string) {
		t.Helper()
		rec, err := s.Revision(context.Background(), scope, rev)
		if err != nil || string(rec.Document) != string(doc) {
			t.Fatalf("%s: revision document %s, %v; want %s", when, rec.Document, err, doc)
		}
		if st := mustState(t, s, scope); string(st.Head.Document) != string(doc) {
			t.Fatalf("%s: head document %s, want %s", when, st.Head.Document, doc)
		}
		for _, ev := range mustHistory(t, s, scope) {
			if ev.Kind == varplane.EventRevisionCreated && string(ev.Document) != string(doc) {
				t.Fatalf("%s: history document %s, want %s", when, ev.Document, doc)
			}
		}
	}
	check(s, "after publish")
	if h.Reopen != nil {
		check(h.Reopen(t, s), "after reopen")
	}
}
