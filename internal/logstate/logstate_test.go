package logstate_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

func commitOne(t *testing.T, st *logstate.State, ev *varplane.Event, expected varplane.Generation) {
	t.Helper()
	tx := st.Begin()
	var err error
	if ev.Kind == varplane.EventDeactivated {
		_, err = tx.AppendSubtree(ev, expected)
	} else {
		_, err = tx.Append(ev, expected)
	}
	if err != nil {
		t.Fatal(err)
	}
	tx.Commit()
}

func TestLoadDoesNotAllocate(t *testing.T) {
	st := logstate.New()
	commitOne(t, st, &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "a.b", Revision: revOf(1), Document: doc(1)}, 0)
	commitOne(t, st, &varplane.Event{Kind: varplane.EventActivated, Scope: "a.b", Revision: revOf(1)}, 0)
	var got *varplane.ScopeState
	if n := testing.AllocsPerRun(100, func() { got = st.State("a.b") }); n != 0 {
		t.Errorf("State allocates %.0f times per read, want 0", n)
	}
	if got.Head == nil || got.Generation != 1 {
		t.Errorf("state = %+v, want generation 1 with a head", got)
	}
}

func TestTxInvisibleUntilCommit(t *testing.T) {
	st := logstate.New()
	commitOne(t, st, &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "a", Revision: revOf(1), Document: doc(1)}, 0)
	tx := st.Begin()
	if _, err := tx.Append(&varplane.Event{Kind: varplane.EventActivated, Scope: "a", Revision: revOf(1)}, 0); err != nil {
		t.Fatal(err)
	}
	// The next event of the batch sees the pending one...
	if _, err := tx.Append(&varplane.Event{Kind: varplane.EventActivated, Scope: "a", Revision: revOf(1)}, 0); !errors.Is(err, varplane.ErrConflict) {
		t.Errorf("second activation at 0 in the batch: err = %v, want a conflict", err)
	}
	if _, err := tx.Append(&varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "new.k", Revision: revOf(2), Document: doc(2)}, 0); err != nil {
		t.Fatal(err)
	}
	// ...readers do not.
	if g := st.State("a").Generation; g != 0 {
		t.Errorf("pending activation visible: generation %d", g)
	}
	if st.Load("new.k") != nil || len(st.Scopes()) != 1 {
		t.Errorf("pending scope visible: %v", st.Scopes())
	}
	tx.Discard()
	if g := st.State("a").Generation; g != 0 {
		t.Errorf("discarded activation visible: generation %d", g)
	}
	if _, ok := st.Revision("new.k", revOf(2)); ok {
		t.Error("discarded revision visible")
	}
}

func TestCheckDoesNotApply(t *testing.T) {
	st := logstate.New()
	ev := &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "a", Revision: revOf(1), Document: doc(1), Timestamp: time.Now()}
	if err := st.Check(ev, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(&varplane.Event{Kind: varplane.EventActivated, Scope: "a", Revision: revOf(1)}, 0); !errors.Is(err, varplane.ErrNotFound) {
		t.Errorf("Check activation of an unchecked-in revision: err = %v, want not-found", err)
	}
	if st.Load("a") != nil {
		t.Error("Check applied the event")
	}
}

func TestApplyRefusesInconsistentCascade(t *testing.T) {
	st := logstate.New()
	commitOne(t, st, &varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "a.b", Revision: revOf(1), Document: doc(1)}, 0)
	commitOne(t, st, &varplane.Event{Kind: varplane.EventActivated, Scope: "a.b", Revision: revOf(1)}, 0)
	for name, cascade := range map[string][]varplane.CascadeEntry{
		"missing descendant": nil,
		"wrong generation":   {{Scope: "a.b", Generation: 5}},
		"not a descendant":   {{Scope: "ab", Generation: 1}},
	} {
		ev := &varplane.Event{Kind: varplane.EventDeactivated, Scope: "a", Generation: 1, Cascade: cascade}
		st.State("a").Chain.Next(ev)
		if _, err := st.Apply(ev); err == nil {
			t.Errorf("%s: Apply accepted cascade %v", name, cascade)
		}
	}
	ev := &varplane.Event{Kind: varplane.EventDeactivated, Scope: "a", Generation: 1, Cascade: []varplane.CascadeEntry{{Scope: "a.b", Generation: 2}}}
	st.State("a").Chain.Next(ev)
	if _, err := st.Apply(ev); err != nil {
		t.Fatalf("Apply of the right cascade: %v", err)
	}
	if got := st.State("a.b"); got.Generation != 2 || got.Head != nil {
		t.Errorf("a.b = gen %d head %v, want 2 without head", got.Generation, got.Head)
	}
}

// TestAppendChecksAndCompactsTheDocument: a store keeps a document compacted
// and as its own copy, and refuses one it could not read back (malformed,
// invalid UTF-8, deeper than the depth ceiling), leaving the fold unchanged.
func TestAppendChecksAndCompactsTheDocument(t *testing.T) {
	deep := strings.Repeat("[", varplane.MaxDepthCeiling+1) + strings.Repeat("]", varplane.MaxDepthCeiling+1)
	ceiling := strings.Repeat("[", varplane.MaxDepthCeiling) + strings.Repeat("]", varplane.MaxDepthCeiling)
	tests := []struct {
		name, doc, want string
		refused         bool
	}{
		{"compact", `{"a":[1,2]}`, `{"a":[1,2]}`, false},
		{"white space", " { \"a\" : [ 1 ,\n2 ] } ", `{"a":[1,2]}`, false},
		{"at the depth ceiling", ceiling, ceiling, false},
		{"malformed", `{"a":}`, "", true},
		{"invalid UTF-8", "\"\xff\"", "", true},
		{"deeper than the ceiling", deep, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := logstate.New()
			tx := st.Begin()
			in := []byte(tt.doc)
			got, err := tx.Append(&varplane.Event{Kind: varplane.EventRevisionCreated, Scope: "a.b", Revision: revOf(1), Document: in}, 0)
			if tt.refused {
				if varplane.ErrorCode(err) != varplane.CodeBadRequest || tx.Len() != 0 {
					t.Fatalf("err = %v with %d events, want bad-request and none", err, tx.Len())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Document) != tt.want {
				t.Fatalf("stored %q, want %q", got.Document, tt.want)
			}
			in[0] = 'X'
			if got.Document[0] == 'X' {
				t.Fatal("the stored document shares the caller's bytes")
			}
		})
	}
}

// linkedLog returns three events of one scope as a live commit links them:
// a revision, its activation, a rejection.
func linkedLog(t *testing.T) []varplane.Event {
	t.Helper()
	st := logstate.New()
	tx := st.Begin()
	var out []varplane.Event
	for _, ev := range []*varplane.Event{
		{Kind: varplane.EventRevisionCreated, Scope: "c.k", Revision: revOf(1), Document: doc(1)},
		{Kind: varplane.EventActivated, Scope: "c.k", Revision: revOf(1)},
		{Kind: varplane.EventRejected, Scope: "c.k", RejectionReason: "x"},
	} {
		stored, err := tx.Append(ev, st.State("c.k").Generation)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Seq != uint64(len(out)+1) || stored.Hash == "" || ev.Seq != 0 {
			t.Fatalf("stored seq %d hash %q (the caller's event: seq %d)", stored.Seq, stored.Hash, ev.Seq)
		}
		out = append(out, *stored)
		tx.Commit()
	}
	if got := st.State("c.k").Chain; got.Seq != 3 || got.Hash != out[2].Hash {
		t.Fatalf("state's chain %+v, want the third event's link", got)
	}
	return out
}

// TestReplayChecksLinks: a replayed event must be the next link of its
// scope's chain; anything else is refused as a *varplane.ChainError and
// folds nothing.
func TestReplayChecksLinks(t *testing.T) {
	good := linkedLog(t)
	for _, tc := range []struct {
		name string
		edit func(log []varplane.Event) []varplane.Event
	}{
		{"unlinked", func(l []varplane.Event) []varplane.Event { l[1].Seq, l[1].Hash = 0, ""; return l }},
		{"gap", func(l []varplane.Event) []varplane.Event { return append(l[:1], l[2]) }},
		{"repeated", func(l []varplane.Event) []varplane.Event { return append(l[:2], l[1]) }},
		{"swapped", func(l []varplane.Event) []varplane.Event { l[1], l[2] = l[2], l[1]; return l }},
		{"changed field", func(l []varplane.Event) []varplane.Event { l[1].Reason = "forged"; return l }},
		{"changed hash", func(l []varplane.Event) []varplane.Event { l[2].Hash = l[1].Hash; return l }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := tc.edit(slices.Clone(good))
			st := logstate.New()
			tx := st.Bulk()
			var err error
			for i := range log {
				if err = tx.Apply(&log[i]); err != nil {
					break
				}
			}
			var ce *varplane.ChainError
			if !errors.As(err, &ce) || ce.Scope != "c.k" {
				t.Fatalf("replay of %s: %v, want a chain error", tc.name, err)
			}
		})
	}
	t.Run("sound", func(t *testing.T) {
		st := logstate.New()
		tx := st.Bulk()
		for i := range good {
			if err := tx.Apply(&good[i]); err != nil {
				t.Fatal(err)
			}
		}
		tx.Commit()
		if got := st.State("c.k").Chain; got.Seq != 3 || got.Hash != good[2].Hash {
			t.Fatalf("replayed chain %+v", got)
		}
	})
	t.Run("unchained log", func(t *testing.T) {
		st := logstate.New()
		tx := st.BulkUnchained()
		for _, ev := range good {
			ev.Seq, ev.Hash = 0, ""
			if err := tx.Apply(&ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Apply(&good[0]); err == nil {
			t.Fatal("a linked event in a log without chains was accepted")
		}
		tx.Commit()
		if got := st.State("c.k"); got.Chain.Seq != 0 || got.Head == nil {
			t.Fatalf("state after an unchained load: %+v", got)
		}
	})
}
