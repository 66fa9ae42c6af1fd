package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// TestAbsentScopeRemembered: a scope the database has no row for is read
// once and then answered from memory (the control plane reads its policy
// scope on every write), and a replica that remembers it as absent still
// installs its first commit by another replica: by the notification, and
// without LISTEN by the next revalidation pass.
func TestAbsentScopeRemembered(t *testing.T) {
	ctx := context.Background()
	u := freshSchema(t, sharedURL(t))
	a, b := openStore(t, u, Options{}), openStore(t, u, Options{})
	c := openStore(t, u, Options{RevalidateInterval: 100 * time.Millisecond, noListen: true})
	const scope = varplane.Scope("absent.k")
	for _, s := range []*Store{b, c} {
		for range 3 {
			st, err := s.State(ctx, scope)
			if err != nil || st.Generation != 0 || st.Head != nil {
				t.Fatalf("State of a scope never written = %+v, %v", st, err)
			}
		}
		if n := s.Stats().ColdLoads; n != 1 {
			t.Fatalf("three reads of an absent scope made %d cold loads, want 1", n)
		}
	}
	rev := create(t, a, scope, 1)
	activate(t, a, scope, rev, 0)
	for name, s := range map[string]*Store{"listening": b, "revalidating": c} {
		eventually(t, 10*time.Second, name+" replica installs the first commit", func() bool {
			st, err := s.State(ctx, scope)
			return err == nil && st.Head != nil && st.Head.Revision == rev && st.Generation == 1
		})
	}
}

// TestAbsentScopesBounded: past maxAbsent unknown scopes, reads of further
// ones are answered (zero state) without being remembered.
func TestAbsentScopesBounded(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, freshSchema(t, sharedURL(t)), Options{})
	for i := range maxAbsent + 10 {
		if st, err := s.State(ctx, varplane.Scope(fmt.Sprintf("unknown.s%d", i))); err != nil || st.Head != nil {
			t.Fatalf("State of unknown scope %d = %+v, %v", i, st, err)
		}
	}
	if got := s.entries.Absent(); got != maxAbsent {
		t.Fatalf("%d absent scopes remembered, want the bound %d", got, maxAbsent)
	}
	if st := s.Stats(); st.Installed != 0 || st.Absent != maxAbsent {
		t.Fatalf("Stats: Installed %d, Absent %d; want 0 and %d", st.Installed, st.Absent, maxAbsent)
	}
	before := s.Stats().ColdLoads
	if _, err := s.State(ctx, "unknown.past"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.State(ctx, "unknown.past"); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().ColdLoads - before; got != 2 {
		t.Fatalf("two reads of a scope past the bound made %d cold loads, want 2", got)
	}
}

// TestAbsentForgottenOnLostReply: a commit whose outcome the replica does
// not know (its reply was lost) drops the scope's absent entry, so that the
// next read asks the database instead of answering "absent" for a scope
// the commit may have given a head.
func TestAbsentForgottenOnLostReply(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, freshSchema(t, sharedURL(t)), Options{})
	const scope = varplane.Scope("lost.k")
	if _, err := s.State(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if s.entry(scope) == nil || s.Stats().Absent != 1 {
		t.Fatalf("absent scope not remembered: absent %d", s.Stats().Absent)
	}
	err := s.writeFailure(scope, errors.New("reply lost"))
	if !errors.Is(err, varplane.ErrOutcomeUnknown) {
		t.Fatalf("writeFailure = %v, want outcome-unknown", err)
	}
	if s.entry(scope) != nil || s.Stats().Absent != 0 {
		t.Fatalf("absent entry kept after an unacknowledged commit: absent %d", s.Stats().Absent)
	}
}
