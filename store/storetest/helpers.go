package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// The helpers below serve the tests of shared stores (several replicas of
// one store of record) that go beyond the conformance suite: commits seen
// through Watch, and one-line commits that fail the test on an error.

// WatchCommits registers a Watch on s that forwards its commits to the
// returned channel (256 deep; a full channel fails the test); the Watch is
// cancelled when the test ends.
func WatchCommits(tb testing.TB, s varplane.Store) <-chan varplane.Commit {
	tb.Helper()
	ch := make(chan varplane.Commit, 256)
	cancel := s.Watch(func(c varplane.Commit) {
		select {
		case ch <- c:
		default:
			tb.Error("watch channel full")
		}
	})
	tb.Cleanup(cancel)
	return ch
}

// NextCommit returns the next commit from ch, failing the test when none
// arrives within the given time.
func NextCommit(tb testing.TB, ch <-chan varplane.Commit, within time.Duration) varplane.Commit {
	tb.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(within):
		tb.Fatalf("no commit delivered within %v", within)
		return varplane.Commit{}
	}
}

// MustCreate stores the revision of Doc(i) under scope (one that exists is
// fine) and returns it.
func MustCreate(tb testing.TB, s varplane.Store, scope varplane.Scope, i int) varplane.Revision {
	tb.Helper()
	ev := CreatedEvent(scope, Doc(i))
	if err := s.Append(context.Background(), ev, 0); err != nil && !errors.Is(err, varplane.ErrRevisionExists) {
		tb.Fatalf("create %s: %v", scope, err)
	}
	return ev.Revision
}

// MustActivate activates rev on scope expecting generation expected.
func MustActivate(tb testing.TB, s varplane.Store, scope varplane.Scope, rev varplane.Revision, expected varplane.Generation) {
	tb.Helper()
	if err := s.Append(context.Background(), ActivatedEvent(scope, rev, expected), expected); err != nil {
		tb.Fatalf("activate %s: %v", scope, err)
	}
}

// MustState returns scope's state in s.
func MustState(tb testing.TB, s varplane.Store, scope varplane.Scope) *varplane.ScopeState {
	tb.Helper()
	st, err := s.State(context.Background(), scope)
	if err != nil {
		tb.Fatalf("State(%s): %v", scope, err)
	}
	return st
}

// Kinds lists the kinds of a history, comma-separated.
func Kinds(h []varplane.Event) string {
	ks := make([]string, 0, len(h))
	for _, e := range h {
		ks = append(ks, string(e.Kind))
	}
	return strings.Join(ks, ",")
}
