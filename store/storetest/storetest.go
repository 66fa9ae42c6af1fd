// Package storetest is the conformance suite every varplane.Store runs
// unchanged, and the benchmarks they share. A store's TestConformance calls
// Run with a Harness that opens fresh, empty stores; everything is checked
// through the varplane.Store (and varplane.Replayer) interfaces only.
//
// Concurrency contract: Run and the benchmarks drive the store from many
// goroutines; the Harness functions are called from the test goroutine.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
)

// Harness tells the suite how to get stores.
type Harness struct {
	// Open returns a fresh, empty store. It registers its own cleanup (the
	// suite closes the store too; closing twice must be harmless).
	Open func(tb testing.TB) varplane.Store
	// Reopen closes s and opens the same backing data again, as a restart
	// would. Nil for ephemeral stores: the restart subtests are skipped.
	Reopen func(tb testing.TB, s varplane.Store) varplane.Store
	// CutLastEvent closes s and opens its data again as a crash would leave
	// it had the last event written not reached the disk. Nil for stores
	// whose multi-event commits no crash can split: the subtest is skipped.
	CutLastEvent func(tb testing.TB, s varplane.Store) varplane.Store
}

// watchTimeout bounds how long the suite waits for a Watch delivery; shared
// stores deliver asynchronously.
const watchTimeout = 5 * time.Second

// Run runs the conformance suite against the stores h opens.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("storetest: Harness.Open is nil")
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Name", testName},
		{"CreateRevision", testCreateRevision},
		{"ActivateCAS", testActivateCAS},
		{"ActivateUnknownRevision", testActivateUnknownRevision},
		{"RacingActivations", testRacingActivations},
		{"SubtreeDeactivation", testSubtreeDeactivation},
		{"DeactivateWithoutHead", testDeactivateWithoutHead},
		{"AppendRefusesDeactivation", testAppendRefusesDeactivation},
		{"MalformedEvents", testMalformedEvents},
		{"Rejected", testRejected},
		{"Idempotency", testIdempotency},
		{"Watch", testWatch},
		{"SnapshotConsistency", testSnapshotConsistency},
		{"Restart", testRestart},
		{"Replay", testReplay},
		{"DocumentAtTheCeilings", testDocumentAtTheCeilings},
		{"DocumentRoundTrip", testDocumentRoundTrip},
		{"Close", testClose},
		{"Publish", testPublish},
		{"Leases", testLeases},
		{"Heartbeats", testBeats},
		{"Reclaim", testReclaim},
		{"ReclaimRestored", testReclaimRestored},
		{"UnauthenticatedCascade", testUnauthenticatedCascade},
		{"IdempotentRejection", testIdempotentRejection},
		{"EngineReplaysRejection", testEngineReplaysRejection},
		{"RollbackTarget", testRollbackTarget},
		{"WriteReady", testWriteReady},
		{"EventHistory", testEventHistory},
		{"Capabilities", testCapabilities},
		{"Chain", RunChain},
		{"RollbackMark", testRollbackMark},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func open(t testing.TB, h Harness) varplane.Store {
	t.Helper()
	s := h.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Doc returns a small JSON document distinct for each i.
func Doc(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"enabled":true,"n":%d,"model_target_ref":"secret.ops.model"}`, i))
}

// RevisionOf returns the revision of doc as the engine computes it (the
// digest of its canonical JSON), so that what the suite stores verifies
// (varplane.VerifyStore, varplane verify); a doc with no canonical form
// gets the digest of its bytes. The stores themselves do not check
// digests.
func RevisionOf(doc []byte) varplane.Revision {
	if d, err := canonical.Digest(doc); err == nil {
		return varplane.Revision(d)
	}
	sum := sha256.Sum256(doc)
	return varplane.Revision("sha256:" + hex.EncodeToString(sum[:]))
}

// CreatedEvent returns a revision-created event for doc in scope.
func CreatedEvent(scope varplane.Scope, doc json.RawMessage) *varplane.Event {
	return &varplane.Event{
		Kind: varplane.EventRevisionCreated, Scope: scope, Revision: RevisionOf(doc), Document: doc,
		SchemaID: "test/v1", Actor: "storetest", Timestamp: time.Now().UTC(),
	}
}

// ActivatedEvent returns the activation of rev in scope at expected+1.
func ActivatedEvent(scope varplane.Scope, rev varplane.Revision, expected varplane.Generation) *varplane.Event {
	return &varplane.Event{
		Kind: varplane.EventActivated, Scope: scope, Revision: rev,
		Generation: expected + 1, PreviousGeneration: varplane.GenerationPtr(expected),
		Actor: "storetest", Reason: "test", Timestamp: time.Now().UTC(),
	}
}

// DeactivatedEvent returns the deactivation of scope at expected+1.
func DeactivatedEvent(scope varplane.Scope, expected varplane.Generation) *varplane.Event {
	return &varplane.Event{
		Kind: varplane.EventDeactivated, Scope: scope,
		Generation: expected + 1, PreviousGeneration: varplane.GenerationPtr(expected),
		Actor: "storetest", Reason: "test", Timestamp: time.Now().UTC(),
	}
}

func mustCreate(t testing.TB, s varplane.Store, scope varplane.Scope, doc json.RawMessage) varplane.Revision {
	t.Helper()
	ev := CreatedEvent(scope, doc)
	if err := s.Append(context.Background(), ev, 0); err != nil {
		t.Fatalf("create revision in %s: %v", scope, err)
	}
	return ev.Revision
}

func mustActivate(t testing.TB, s varplane.Store, scope varplane.Scope, rev varplane.Revision, expected varplane.Generation) {
	t.Helper()
	if err := s.Append(context.Background(), ActivatedEvent(scope, rev, expected), expected); err != nil {
		t.Fatalf("activate %s in %s at %d: %v", rev, scope, expected, err)
	}
}

func mustDeactivate(t testing.TB, s varplane.Store, scope varplane.Scope, expected varplane.Generation) []varplane.CascadeEntry {
	t.Helper()
	ev := DeactivatedEvent(scope, expected)
	if err := s.AppendSubtreeDeactivation(context.Background(), ev, expected); err != nil {
		t.Fatalf("deactivate %s at %d: %v", scope, expected, err)
	}
	return ev.Cascade
}

func mustState(t testing.TB, s varplane.Store, scope varplane.Scope) *varplane.ScopeState {
	t.Helper()
	st, err := s.State(context.Background(), scope)
	if err != nil {
		t.Fatalf("state of %s: %v", scope, err)
	}
	if st == nil {
		t.Fatalf("state of %s: nil state without error", scope)
	}
	return st
}

func mustHistory(t testing.TB, s varplane.Store, scope varplane.Scope) []varplane.Event {
	t.Helper()
	h, err := s.History(context.Background(), scope)
	if err != nil {
		t.Fatalf("history of %s: %v", scope, err)
	}
	return h
}

// wantHead checks the generation and head revision of scope ("" = no head).
func wantHead(t testing.TB, s varplane.Store, scope varplane.Scope, gen varplane.Generation, rev varplane.Revision) {
	t.Helper()
	st := mustState(t, s, scope)
	if st.Generation != gen {
		t.Errorf("%s: generation = %d, want %d", scope, st.Generation, gen)
	}
	switch {
	case rev == "" && st.Head != nil:
		t.Errorf("%s: head = %s, want no head", scope, st.Head.Revision)
	case rev != "" && st.Head == nil:
		t.Errorf("%s: no head, want %s", scope, rev)
	case rev != "" && st.Head.Revision != rev:
		t.Errorf("%s: head = %s, want %s", scope, st.Head.Revision, rev)
	case rev != "" && st.Head.Generation != gen:
		t.Errorf("%s: head generation = %d, want %d", scope, st.Head.Generation, gen)
	}
}

func wantConflict(t testing.TB, err error, expected, current varplane.Generation) {
	t.Helper()
	if !errors.Is(err, varplane.ErrConflict) {
		t.Fatalf("err = %v, want a revision-conflict", err)
	}
	var e *varplane.Error
	if !errors.As(err, &e) || e.Current == nil || e.Expected == nil {
		t.Fatalf("conflict %v does not carry expected and current generations", err)
	}
	if *e.Current != current || *e.Expected != expected {
		t.Errorf("conflict expected/current = %d/%d, want %d/%d", *e.Expected, *e.Current, expected, current)
	}
}

func testName(t *testing.T, h Harness) {
	if n := open(t, h).Name(); n == "" {
		t.Error("Name() is empty")
	}
}

func testCreateRevision(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("agentic.lanes.vinci")

	if _, err := s.Revision(ctx, scope, RevisionOf(Doc(1))); !errors.Is(err, varplane.ErrNotFound) {
		t.Errorf("Revision before create: err = %v, want not-found", err)
	}
	wantHead(t, s, scope, 0, "")

	doc := json.RawMessage(`{"enabled": true, "n": 1}`)
	rev := mustCreate(t, s, scope, doc)
	rec, err := s.Revision(ctx, scope, rev)
	if err != nil {
		t.Fatalf("Revision after create: %v", err)
	}
	if rec.Revision != rev || rec.Scope != scope || rec.SchemaID != "test/v1" {
		t.Errorf("record = %+v, want revision %s in %s with schema test/v1", rec, rev, scope)
	}
	if !jsonEqual(rec.Document, doc) {
		t.Errorf("record document = %s, want %s", rec.Document, doc)
	}
	if _, err := s.Revision(ctx, "agentic.other", rev); !errors.Is(err, varplane.ErrNotFound) {
		t.Errorf("Revision in another scope: err = %v, want not-found", err)
	}

	err = s.Append(ctx, CreatedEvent(scope, doc), 0)
	if !errors.Is(err, varplane.ErrRevisionExists) {
		t.Errorf("second create: err = %v, want ErrRevisionExists", err)
	}
	hist := mustHistory(t, s, scope)
	if len(hist) != 1 || hist[0].Kind != varplane.EventRevisionCreated || hist[0].Revision != rev {
		t.Errorf("history = %s, want one revision-created", kinds(hist))
	}
	wantHead(t, s, scope, 0, "")

	mustCreate(t, s, "agentic", json.RawMessage(`{"agentic.x":1}`))
	scopes, err := s.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []varplane.Scope{"agentic", scope}; !slices.Equal(scopes, want) {
		t.Errorf("Scopes = %v, want %v", scopes, want)
	}
}

func testActivateCAS(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("svc.flags")
	r1 := mustCreate(t, s, scope, Doc(1))
	r2 := mustCreate(t, s, scope, Doc(2))

	mustActivate(t, s, scope, r1, 0)
	wantHead(t, s, scope, 1, r1)
	st := mustState(t, s, scope)
	if !jsonEqual(st.Head.Document, Doc(1)) {
		t.Errorf("head document = %s, want %s", st.Head.Document, Doc(1))
	}
	if st.Head.ETag() != `"`+string(r1)+`"` {
		t.Errorf("ETag = %s, want quoted %s", st.Head.ETag(), r1)
	}

	err := s.Append(ctx, ActivatedEvent(scope, r2, 0), 0)
	wantConflict(t, err, 0, 1)
	wantHead(t, s, scope, 1, r1)

	err = s.Append(ctx, ActivatedEvent(scope, r2, 5), 5)
	wantConflict(t, err, 5, 1)

	mustActivate(t, s, scope, r2, 1)
	wantHead(t, s, scope, 2, r2)
	// Re-activating an earlier revision allocates a new generation.
	mustActivate(t, s, scope, r1, 2)
	wantHead(t, s, scope, 3, r1)

	hist := mustHistory(t, s, scope)
	if got, want := kinds(hist), "revision-created revision-created activated activated activated"; got != want {
		t.Errorf("history = %s, want %s", got, want)
	}
	for i, g := range []varplane.Generation{1, 2, 3} {
		ev := hist[2+i]
		if ev.Generation != g || ev.PreviousGeneration == nil || *ev.PreviousGeneration != g-1 {
			t.Errorf("activation %d: generation %d previous %v, want %d and %d", i, ev.Generation, ev.PreviousGeneration, g, g-1)
		}
	}
}

func testActivateUnknownRevision(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("svc.flags")
	mustCreate(t, s, "other.scope", Doc(1)) // a revision of another scope does not count
	err := s.Append(ctx, ActivatedEvent(scope, RevisionOf(Doc(1)), 0), 0)
	if !errors.Is(err, varplane.ErrNotFound) {
		t.Fatalf("activate unknown revision: err = %v, want not-found", err)
	}
	wantHead(t, s, scope, 0, "")
	if h := mustHistory(t, s, scope); len(h) != 0 {
		t.Errorf("history after refused activation = %s, want empty", kinds(h))
	}
}

func testRacingActivations(t *testing.T, h Harness) {
	s := open(t, h)
	const scope = varplane.Scope("race.target")
	const racers = 32
	revs := make([]varplane.Revision, racers)
	for i := range revs {
		revs[i] = mustCreate(t, s, scope, Doc(i))
	}
	mustActivate(t, s, scope, revs[0], 0)

	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = s.Append(context.Background(), ActivatedEvent(scope, revs[i], 1), 1)
		}()
	}
	close(start)
	wg.Wait()

	winner := oneWinner(t, errs, 1, 2)
	wantHead(t, s, scope, 2, revs[winner])
	if n := len(mustHistory(t, s, scope)); n != racers+2 {
		t.Errorf("history has %d events, want %d (creates + 2 activations)", n, racers+2)
	}
}

func testSubtreeDeactivation(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	revs := map[varplane.Scope]varplane.Revision{}
	for i, sc := range []varplane.Scope{"a", "a.b", "a.c", "a.b.d", "ab", "ab.x", "a.e", "a.f"} {
		revs[sc] = mustCreate(t, s, sc, Doc(i))
	}
	mustActivate(t, s, "a", revs["a"], 0)
	mustActivate(t, s, "a.b", revs["a.b"], 0)
	mustActivate(t, s, "a.c", revs["a.c"], 0)
	mustActivate(t, s, "a.c", revs["a.c"], 1) // a.c at 2
	mustActivate(t, s, "a.b.d", revs["a.b.d"], 0)
	mustActivate(t, s, "ab", revs["ab"], 0)
	mustActivate(t, s, "ab.x", revs["ab.x"], 0)
	mustActivate(t, s, "a.f", revs["a.f"], 0)
	mustDeactivate(t, s, "a.f", 1) // a.f inactive at 2; a.e never activated

	var commits []varplane.Commit
	var mu sync.Mutex
	got := make(chan struct{}, 16)
	cancel := s.Watch(func(c varplane.Commit) {
		mu.Lock()
		commits = append(commits, c)
		mu.Unlock()
		got <- struct{}{}
	})
	defer cancel()

	// A wrong expected generation changes nothing, in the parent or below.
	err := s.AppendSubtreeDeactivation(ctx, DeactivatedEvent("a", 0), 0)
	wantConflict(t, err, 0, 1)
	wantHead(t, s, "a.b", 1, revs["a.b"])

	cascade := mustDeactivate(t, s, "a", 1)
	want := []varplane.CascadeEntry{{Scope: "a.b", Generation: 2}, {Scope: "a.b.d", Generation: 2}, {Scope: "a.c", Generation: 3}}
	if !slices.Equal(sortedCascade(cascade), want) {
		t.Errorf("cascade = %v, want %v", cascade, want)
	}
	wantHead(t, s, "a", 2, "")
	wantHead(t, s, "a.b", 2, "")
	wantHead(t, s, "a.b.d", 2, "")
	wantHead(t, s, "a.c", 3, "")
	wantHead(t, s, "a.e", 0, "") // inactive descendants are untouched
	wantHead(t, s, "a.f", 2, "")
	wantHead(t, s, "ab", 1, revs["ab"]) // "ab" is not below "a"
	wantHead(t, s, "ab.x", 1, revs["ab.x"])

	for _, c := range want {
		hist := mustHistory(t, s, c.Scope)
		last := hist[len(hist)-1]
		if last.Kind != varplane.EventDeactivated || last.Reason != varplane.CascadeReason("a") ||
			last.Generation != c.Generation || last.PreviousGeneration == nil || *last.PreviousGeneration != c.Generation-1 {
			t.Errorf("%s: last history entry = %s %q gen %d prev %v, want deactivated %q gen %d prev %d",
				c.Scope, last.Kind, last.Reason, last.Generation, last.PreviousGeneration, varplane.CascadeReason("a"), c.Generation, c.Generation-1)
		}
	}
	for _, sc := range []varplane.Scope{"a.e", "a.f", "ab"} {
		for _, ev := range mustHistory(t, s, sc) {
			if strings.HasPrefix(ev.Reason, "cascade:") {
				t.Errorf("%s was not active but got %s %q", sc, ev.Kind, ev.Reason)
			}
		}
	}
	parentHist := mustHistory(t, s, "a")
	if last := parentHist[len(parentHist)-1]; last.Kind != varplane.EventDeactivated || !slices.Equal(sortedCascade(last.Cascade), want) {
		t.Errorf("parent's history ends with %s cascade %v, want deactivated with cascade %v", last.Kind, last.Cascade, want)
	}

	waitFor(t, got, 1)
	mu.Lock()
	c := commits[0]
	mu.Unlock()
	if c.Kind != varplane.EventDeactivated || c.Scope != "a" {
		t.Errorf("commit = %s %s, want deactivated a", c.Kind, c.Scope)
	}
	wantChanges := []varplane.ScopeChange{{Scope: "a", Generation: 2}, {Scope: "a.b", Generation: 2}, {Scope: "a.b.d", Generation: 2}, {Scope: "a.c", Generation: 3}}
	if len(c.Changes) != len(wantChanges) || c.Changes[0] != wantChanges[0] {
		t.Fatalf("changes = %v, want %v (parent first)", c.Changes, wantChanges)
	}
	rest := slices.Clone(c.Changes[1:])
	slices.SortFunc(rest, func(x, y varplane.ScopeChange) int { return strings.Compare(string(x.Scope), string(y.Scope)) })
	if !slices.Equal(rest, wantChanges[1:]) {
		t.Errorf("changes = %v, want %v", c.Changes, wantChanges)
	}

	// A tombstone, not a mask: a descendant activated later is live, and
	// re-activating the parent revives nothing.
	mustActivate(t, s, "a.b", revs["a.b"], 2)
	wantHead(t, s, "a.b", 3, revs["a.b"])
	mustActivate(t, s, "a", revs["a"], 2)
	wantHead(t, s, "a", 3, revs["a"])
	wantHead(t, s, "a.c", 3, "")
	wantHead(t, s, "a.b.d", 2, "")

	// Deactivating a leaf with no active descendants cascades to nothing.
	if c := mustDeactivate(t, s, "a.b", 3); len(c) != 0 {
		t.Errorf("leaf cascade = %v, want none", c)
	}
}

func testDeactivateWithoutHead(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	err := s.AppendSubtreeDeactivation(ctx, DeactivatedEvent("never.active", 3), 3)
	wantConflict(t, err, 3, 0)
	if c := mustDeactivate(t, s, "never.active", 0); len(c) != 0 {
		t.Errorf("cascade = %v, want none", c)
	}
	wantHead(t, s, "never.active", 1, "")
	mustDeactivate(t, s, "never.active", 1)
	wantHead(t, s, "never.active", 2, "")
	if got, want := kinds(mustHistory(t, s, "never.active")), "deactivated deactivated"; got != want {
		t.Errorf("history = %s, want %s", got, want)
	}
}

func testAppendRefusesDeactivation(t *testing.T, h Harness) {
	s := open(t, h)
	err := s.Append(context.Background(), DeactivatedEvent("x.y", 0), 0)
	if err == nil {
		t.Fatal("Append of a deactivated event succeeded, want an error")
	}
	if varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Errorf("code = %s, want %s", varplane.ErrorCode(err), varplane.CodeBadRequest)
	}
	wantHead(t, s, "x.y", 0, "")
	if h := mustHistory(t, s, "x.y"); len(h) != 0 {
		t.Errorf("history = %s, want empty", kinds(h))
	}
	// The subtree path refuses other kinds.
	mustCreate(t, s, "x.y", Doc(1))
	if err := s.AppendSubtreeDeactivation(context.Background(), ActivatedEvent("x.y", RevisionOf(Doc(1)), 0), 0); err == nil {
		t.Error("AppendSubtreeDeactivation of an activated event succeeded, want an error")
	}
	wantHead(t, s, "x.y", 0, "")
}

func testMalformedEvents(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	rev := mustCreate(t, s, "m.scope", Doc(1))
	tests := []struct {
		name string
		ev   *varplane.Event
	}{
		{"bad scope", &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "bad scope", Revision: RevisionOf(Doc(2)), Document: Doc(2)}},
		{"empty scope", &varplane.Event{Kind: varplane.EventRejected, Scope: ""}},
		{"unknown kind", &varplane.Event{Kind: "promoted", Scope: "m.scope"}},
		{"bad revision", &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "m.scope", Revision: "sha1:abc", Document: Doc(2)}},
		{"no document", &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "m.scope", Revision: RevisionOf(Doc(2))}},
		{"invalid document", &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "m.scope", Revision: RevisionOf(Doc(2)), Document: json.RawMessage(`{"a":`)}},
		{"wrong generation", &varplane.Event{Kind: varplane.EventActivated, Scope: "m.scope", Revision: rev, Generation: 7}},
		{"rollback of a later generation", &varplane.Event{Kind: varplane.EventActivated, Scope: "m.scope", Revision: rev, Generation: 1,
			PreviousGeneration: varplane.GenerationPtr(0), RollbackOf: 1, Timestamp: time.Now().UTC()}},
		{"rollback mark on a rejection", &varplane.Event{Kind: varplane.EventRejected, Scope: "m.scope", RejectionReason: "x", RollbackOf: 1, Timestamp: time.Now().UTC()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Append(ctx, tc.ev, 0); err == nil {
				t.Fatalf("Append(%s) succeeded, want an error", tc.name)
			}
		})
	}
	wantHead(t, s, "m.scope", 0, "")
	if got := kinds(mustHistory(t, s, "m.scope")); got != "revision-created" {
		t.Errorf("history = %s, want only the first create", got)
	}
}

func testRejected(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("agentic.lanes.vinci")
	if st := mustState(t, s, scope); st.LastRejected != nil {
		t.Errorf("LastRejected before any rejection = %+v", st.LastRejected)
	}
	for _, reason := range []string{"document.unknown-field: /budgets2", "document.type: /enabled"} {
		ev := &varplane.Event{Kind: varplane.EventRejected, Scope: scope, SchemaID: "test/v1", Actor: "ops", RejectionReason: reason, Timestamp: time.Now().UTC()}
		if err := s.Append(ctx, ev, 0); err != nil {
			t.Fatalf("append rejected: %v", err)
		}
		st := mustState(t, s, scope)
		if st.LastRejected == nil || st.LastRejected.RejectionReason != reason || st.LastRejected.Kind != varplane.EventRejected {
			t.Fatalf("LastRejected = %+v, want reason %q", st.LastRejected, reason)
		}
		if st.Generation != 0 || st.Head != nil {
			t.Errorf("a rejection changed generation/head: %d %v", st.Generation, st.Head)
		}
	}
	if got := kinds(mustHistory(t, s, scope)); got != "rejected rejected" {
		t.Errorf("history = %s, want two rejections", got)
	}
	// A later activation keeps the last rejection on record.
	rev := mustCreate(t, s, scope, Doc(1))
	mustActivate(t, s, scope, rev, 0)
	if st := mustState(t, s, scope); st.LastRejected == nil || st.LastRejected.RejectionReason != "document.type: /enabled" {
		t.Errorf("LastRejected after activation = %+v", st.LastRejected)
	}
}

func testIdempotency(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	const scope = varplane.Scope("idem.scope")
	if _, err := s.Idempotency(ctx, "nope"); !errors.Is(err, varplane.ErrNotFound) {
		t.Errorf("unknown key: err = %v, want not-found", err)
	}
	cr := CreatedEvent(scope, Doc(1))
	cr.IdempotencyKey, cr.RequestHash = "k-create", "h-create"
	if err := s.Append(ctx, cr, 0); err != nil {
		t.Fatal(err)
	}
	act := ActivatedEvent(scope, cr.Revision, 0)
	act.IdempotencyKey, act.RequestHash = "k-activate", "h-activate"
	if err := s.Append(ctx, act, 0); err != nil {
		t.Fatal(err)
	}
	deact := DeactivatedEvent(scope, 1)
	deact.IdempotencyKey, deact.RequestHash = "k-deactivate", "h-deactivate"
	if err := s.AppendSubtreeDeactivation(ctx, deact, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, hash string
		kind      varplane.EventKind
		gen       varplane.Generation
	}{
		{"k-create", "h-create", varplane.EventRevisionCreated, 0},
		{"k-activate", "h-activate", varplane.EventActivated, 1},
		{"k-deactivate", "h-deactivate", varplane.EventDeactivated, 2},
	} {
		rec, err := s.Idempotency(ctx, tc.key)
		if err != nil {
			t.Fatalf("Idempotency(%s): %v", tc.key, err)
		}
		if rec.Key != tc.key || rec.RequestHash != tc.hash || rec.Event.Kind != tc.kind || rec.Event.Scope != scope || rec.Generation != tc.gen {
			t.Errorf("Idempotency(%s) = key %q hash %q kind %s scope %s gen %d, want %q %q %s %s %d",
				tc.key, rec.Key, rec.RequestHash, rec.Event.Kind, rec.Event.Scope, rec.Generation, tc.key, tc.hash, tc.kind, scope, tc.gen)
		}
	}

	// A reused key is refused whatever the event, and nothing is appended.
	before := len(mustHistory(t, s, scope))
	again := ActivatedEvent(scope, cr.Revision, 2)
	again.IdempotencyKey, again.RequestHash = "k-activate", "h-other"
	if err := s.Append(ctx, again, 2); !errors.Is(err, varplane.ErrDuplicateIdempotencyKey) {
		t.Errorf("reused key: err = %v, want ErrDuplicateIdempotencyKey", err)
	}
	dup := DeactivatedEvent(scope, 2)
	dup.IdempotencyKey = "k-create"
	if err := s.AppendSubtreeDeactivation(ctx, dup, 2); !errors.Is(err, varplane.ErrDuplicateIdempotencyKey) {
		t.Errorf("reused key on deactivation: err = %v, want ErrDuplicateIdempotencyKey", err)
	}
	if after := len(mustHistory(t, s, scope)); after != before {
		t.Errorf("history grew from %d to %d on refused events", before, after)
	}
	wantHead(t, s, scope, 2, "")
	if rec, _ := s.Idempotency(ctx, "k-activate"); rec == nil || rec.RequestHash != "h-activate" {
		t.Errorf("the refused event replaced the record: %+v", rec)
	}
}

func testWatch(t *testing.T, h Harness) {
	s := open(t, h)
	ch := make(chan varplane.Commit, 16)
	cancel := s.Watch(func(c varplane.Commit) { ch <- c })
	const scope = varplane.Scope("w.k")
	rev := mustCreate(t, s, scope, Doc(1))
	if err := s.Append(context.Background(), &varplane.Event{Kind: varplane.EventRejected, Scope: scope, RejectionReason: "x", Timestamp: time.Now().UTC()}, 0); err != nil {
		t.Fatal(err)
	}
	mustActivate(t, s, scope, rev, 0)
	c := recvCommit(t, ch)
	if c.Kind != varplane.EventActivated || c.Scope != scope || len(c.Changes) != 1 {
		t.Fatalf("first commit = %+v, want the activation of %s (creates and rejections are not commits)", c, scope)
	}
	if ch := c.Changes[0]; ch.Scope != scope || ch.Generation != 1 || ch.Head == nil || ch.Head.Revision != rev {
		t.Errorf("change = %+v, want %s at 1 with head %s", ch, scope, rev)
	}
	// The snapshot is installed before the commit is delivered.
	wantHead(t, s, scope, 1, rev)

	mustDeactivate(t, s, "w", 0)
	c = recvCommit(t, ch)
	if c.Kind != varplane.EventDeactivated || c.Scope != "w" || len(c.Changes) != 2 ||
		c.Changes[0] != (varplane.ScopeChange{Scope: "w", Generation: 1}) || c.Changes[1] != (varplane.ScopeChange{Scope: scope, Generation: 2}) {
		t.Errorf("deactivation commit = %+v, want w at 1 and %s at 2 with no heads", c, scope)
	}

	cancel()
	mustActivate(t, s, scope, rev, 2)
	select {
	case c := <-ch:
		t.Errorf("commit %+v delivered after cancel", c)
	case <-time.After(50 * time.Millisecond):
	}
}

func recvCommit(t *testing.T, ch <-chan varplane.Commit) varplane.Commit {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(watchTimeout):
		t.Fatal("no commit delivered")
		return varplane.Commit{}
	}
}

func waitFor(t *testing.T, ch <-chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-ch:
		case <-time.After(watchTimeout):
			t.Fatal("no commit delivered")
		}
	}
}

// testSnapshotConsistency reads while committing: a snapshot's head always
// belongs to its generation, and generations never go back.
func testSnapshotConsistency(t *testing.T, h Harness) {
	s := open(t, h)
	const scope = varplane.Scope("snap.k")
	revs := []varplane.Revision{mustCreate(t, s, scope, Doc(1)), mustCreate(t, s, scope, Doc(2))}
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		var last varplane.Generation
		for {
			select {
			case <-done:
				errc <- nil
				return
			default:
			}
			st, err := s.State(context.Background(), scope)
			if err != nil {
				errc <- err
				return
			}
			if st.Generation < last {
				errc <- fmt.Errorf("generation went back from %d to %d", last, st.Generation)
				return
			}
			last = st.Generation
			if st.Head != nil && st.Head.Generation != st.Generation {
				errc <- fmt.Errorf("head generation %d in a snapshot at %d", st.Head.Generation, st.Generation)
				return
			}
		}
	}()
	var gen varplane.Generation
	for i := range 50 {
		if i%5 == 4 {
			mustDeactivate(t, s, scope, gen)
		} else {
			mustActivate(t, s, scope, revs[i%2], gen)
		}
		gen++
	}
	close(done)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// fold is everything a store answers, to compare before and after a restart.
type fold struct {
	scopes  []varplane.Scope
	states  map[varplane.Scope]string
	history map[varplane.Scope]string
	revs    map[varplane.Scope]string
	idem    map[string]string
}

func capture(t testing.TB, s varplane.Store, keys []string) fold {
	t.Helper()
	ctx := context.Background()
	scopes, err := s.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := fold{scopes: scopes, states: map[varplane.Scope]string{}, history: map[varplane.Scope]string{}, revs: map[varplane.Scope]string{}, idem: map[string]string{}}
	for _, sc := range scopes {
		f.states[sc] = stateString(mustState(t, s, sc))
		hist := mustHistory(t, s, sc)
		f.history[sc] = mustJSON(t, hist)
		var revs []string
		for _, ev := range hist {
			if ev.Kind != varplane.EventRevisionCreated {
				continue
			}
			rec, err := s.Revision(ctx, sc, ev.Revision)
			if err != nil {
				t.Fatalf("revision %s of %s: %v", ev.Revision, sc, err)
			}
			revs = append(revs, mustJSON(t, rec))
		}
		f.revs[sc] = strings.Join(revs, "\n")
	}
	for _, k := range keys {
		rec, err := s.Idempotency(ctx, k)
		if err != nil {
			t.Fatalf("idempotency %s: %v", k, err)
		}
		f.idem[k] = mustJSON(t, rec)
	}
	return f
}

func stateString(st *varplane.ScopeState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s gen=%d", st.Scope, st.Generation)
	if st.Head != nil {
		fmt.Fprintf(&b, " head=%s@%d etag=%s body=%s actor=%q reason=%q schema=%q/%q at=%s", st.Head.Revision, st.Head.Generation,
			st.Head.ETag(), st.Head.ReadBody(), st.Head.Actor, st.Head.Reason, st.Head.SchemaID, st.Head.SchemaVersion,
			st.Head.EffectiveAt.UTC().Format(time.RFC3339Nano))
	}
	if st.LastRejected != nil {
		b2, _ := json.Marshal(st.LastRejected)
		fmt.Fprintf(&b, " rejected=%s", b2)
	}
	return b.String()
}

func (f fold) diff(t testing.TB, g fold) {
	t.Helper()
	if !slices.Equal(f.scopes, g.scopes) {
		t.Errorf("scopes after restart = %v, want %v", g.scopes, f.scopes)
	}
	for _, m := range []struct {
		name      string
		want, got map[varplane.Scope]string
	}{{"state", f.states, g.states}, {"history", f.history, g.history}, {"revisions", f.revs, g.revs}} {
		for sc, want := range m.want {
			if got := m.got[sc]; got != want {
				t.Errorf("%s of %s after restart:\n got  %s\n want %s", m.name, sc, got, want)
			}
		}
	}
	for k, want := range f.idem {
		if got := g.idem[k]; got != want {
			t.Errorf("idempotency %s after restart:\n got  %s\n want %s", k, got, want)
		}
	}
}

// populate writes a varied log and returns the idempotency keys it used.
func populate(t testing.TB, s varplane.Store) []string {
	t.Helper()
	ctx := context.Background()
	r1 := mustCreate(t, s, "app", json.RawMessage(`{"app.a": 1, "app.b": "<&>"}`))
	r2 := mustCreate(t, s, "app.k", json.RawMessage(`{"x": "ünïcödé \u2028", "y": [1, 2.5, null]}`))
	r3 := mustCreate(t, s, "app.k.z", Doc(3))
	r4 := mustCreate(t, s, "グループ.日本.ключ", Doc(4))
	mustActivate(t, s, "app", r1, 0)
	mustActivate(t, s, "app.k", r2, 0)
	mustActivate(t, s, "app.k.z", r3, 0)
	act := ActivatedEvent("グループ.日本.ключ", r4, 0)
	act.IdempotencyKey, act.RequestHash = "key-1", "hash-1"
	if err := s.Append(ctx, act, 0); err != nil {
		t.Fatal(err)
	}
	rej := &varplane.Event{Kind: varplane.EventRejected, Scope: "app.k", RejectionReason: "document.type: /x", Actor: "ops", Timestamp: time.Now().UTC()}
	if err := s.Append(ctx, rej, 0); err != nil {
		t.Fatal(err)
	}
	deact := DeactivatedEvent("app", 1)
	deact.IdempotencyKey, deact.RequestHash = "key-2", "hash-2"
	if err := s.AppendSubtreeDeactivation(ctx, deact, 1); err != nil {
		t.Fatal(err)
	}
	mustActivate(t, s, "app.k", r2, 2)
	mustDeactivate(t, s, "empty.scope", 0)
	return []string{"key-1", "key-2"}
}

func testRestart(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("ephemeral store: nothing survives a restart")
	}
	s := h.Open(t)
	keys := populate(t, s)
	before := capture(t, s, keys)
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	before.diff(t, capture(t, s, keys))

	// The reopened store resumes: CAS from the recovered generation, keys
	// still refused, new commits work.
	ctx := context.Background()
	wantHead(t, s, "app.k", 3, RevisionOf([]byte(`{"x": "ünïcödé \u2028", "y": [1, 2.5, null]}`)))
	err := s.Append(ctx, ActivatedEvent("app", RevisionOf([]byte(`{"app.a": 1, "app.b": "<&>"}`)), 1), 1)
	wantConflict(t, err, 1, 2)
	dup := DeactivatedEvent("app", 2)
	dup.IdempotencyKey = "key-1"
	if err := s.AppendSubtreeDeactivation(ctx, dup, 2); !errors.Is(err, varplane.ErrDuplicateIdempotencyKey) {
		t.Errorf("reused key after restart: err = %v, want ErrDuplicateIdempotencyKey", err)
	}
	r := mustCreate(t, s, "app", Doc(9))
	mustActivate(t, s, "app", r, 2)
	wantHead(t, s, "app", 3, r)

	// And a second restart still agrees.
	before = capture(t, s, keys)
	s2 := h.Reopen(t, s)
	t.Cleanup(func() { _ = s2.Close() })
	before.diff(t, capture(t, s2, keys))
}

func testReplay(t *testing.T, h Harness) {
	s := open(t, h)
	rp, ok := s.(varplane.Replayer)
	if !ok {
		t.Skip("store does not implement varplane.Replayer")
	}
	ctx := context.Background()
	const scope = varplane.Scope("rp.k")
	r1 := mustCreate(t, s, scope, Doc(1))
	r2 := mustCreate(t, s, scope, Doc(2))
	mustActivate(t, s, scope, r1, 0) // 1
	mustDeactivate(t, s, scope, 1)   // 2
	mustActivate(t, s, scope, r2, 2) // 3
	mustActivate(t, s, "rp", mustCreate(t, s, "rp", json.RawMessage(`{"rp.a":1}`)), 0)
	mustDeactivate(t, s, "rp", 1) // cascades rp.k to 4
	mustActivate(t, s, scope, r1, 4)

	check := func(t *testing.T, rp varplane.Replayer) {
		for _, tc := range []struct {
			gen varplane.Generation
			rev varplane.Revision
		}{{0, ""}, {1, r1}, {2, ""}, {3, r2}, {4, ""}, {5, r1}} {
			st, err := rp.Replay(ctx, scope, tc.gen)
			if err != nil {
				t.Fatalf("Replay(%d): %v", tc.gen, err)
			}
			if st.Generation != tc.gen || (tc.rev == "") != (st.Head == nil) || (st.Head != nil && (st.Head.Revision != tc.rev || st.Head.Generation != tc.gen)) {
				t.Errorf("Replay(%d) = gen %d head %v, want gen %d head %q", tc.gen, st.Generation, st.Head, tc.gen, tc.rev)
			}
			if st.Head != nil && !jsonEqual(st.Head.Document, map[varplane.Revision]json.RawMessage{r1: Doc(1), r2: Doc(2)}[tc.rev]) {
				t.Errorf("Replay(%d) document = %s", tc.gen, st.Head.Document)
			}
		}
		if _, err := rp.Replay(ctx, scope, 6); !errors.Is(err, varplane.ErrNotFound) {
			t.Errorf("Replay beyond the last generation: err = %v, want not-found", err)
		}
		if _, err := rp.Replay(ctx, "rp.unknown", 1); !errors.Is(err, varplane.ErrNotFound) {
			t.Errorf("Replay of an unknown scope: err = %v, want not-found", err)
		}
	}
	check(t, rp)
	if h.Reopen != nil {
		s2 := h.Reopen(t, s)
		t.Cleanup(func() { _ = s2.Close() })
		rp2, ok := s2.(varplane.Replayer)
		if !ok {
			t.Fatal("reopened store is not a Replayer")
		}
		t.Run("AfterRestart", func(t *testing.T) { check(t, rp2) })
	}
}

func testClose(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	rev := mustCreate(t, s, "c.k", Doc(1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]error{
		"Append":  s.Append(ctx, ActivatedEvent("c.k", rev, 0), 0),
		"Subtree": s.AppendSubtreeDeactivation(ctx, DeactivatedEvent("c.k", 0), 0),
	}
	_, calls["State"] = s.State(ctx, "c.k")
	_, calls["Revision"] = s.Revision(ctx, "c.k", rev)
	_, calls["History"] = s.History(ctx, "c.k")
	_, calls["Idempotency"] = s.Idempotency(ctx, "k")
	_, calls["Scopes"] = s.Scopes(ctx)
	for name, err := range calls {
		if !errors.Is(err, varplane.ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil && !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

func kinds(h []varplane.Event) string {
	ks := make([]string, len(h))
	for i, ev := range h {
		ks[i] = string(ev.Kind)
	}
	return strings.Join(ks, " ")
}

func sortedCascade(c []varplane.CascadeEntry) []varplane.CascadeEntry {
	c = slices.Clone(c)
	slices.SortFunc(c, func(a, b varplane.CascadeEntry) int { return strings.Compare(string(a.Scope), string(b.Scope)) })
	return c
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
