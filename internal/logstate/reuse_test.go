package logstate_test

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

// TestReusedTxKeepsTransactionsApart drives one Tx through many commits and
// discards, as the file store's committer does, so that its staging memory
// is reused: a discarded transaction's events must never reach a scope's
// history, and a history view taken earlier must keep its length and
// contents however the history grows after it.
func TestReusedTxKeepsTransactionsApart(t *testing.T) {
	st := logstate.New()
	tx := st.Begin()
	scopes := []varplane.Scope{"a", "b", "c.d"}
	gens := map[varplane.Scope]varplane.Generation{}
	want := map[varplane.Scope]int{}
	var views [][]varplane.Event
	for round := range 300 {
		for i, s := range scopes {
			n := round*len(scopes) + i + 1
			if _, err := tx.Append(&varplane.Event{Kind: varplane.EventRevisionCreated, Scope: s, Revision: revOf(n), Document: doc(n)}, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Append(&varplane.Event{Kind: varplane.EventActivated, Scope: s, Revision: revOf(n)}, gens[s]); err != nil {
				t.Fatal(err)
			}
		}
		if round%3 == 2 {
			tx.Discard()
			continue
		}
		tx.Commit()
		for _, s := range scopes {
			gens[s]++
			want[s] += 2
		}
		views = append(views, st.History("a"))
	}
	for _, s := range scopes {
		h := st.History(s)
		if len(h) != want[s] {
			t.Fatalf("history of %q has %d events, want %d (discarded events leaked or commits lost)", s, len(h), want[s])
		}
		for i, ev := range h {
			if ev.Scope != s {
				t.Fatalf("history of %q holds an event of %q at %d", s, ev.Scope, i)
			}
			if ev.Kind == varplane.EventActivated && ev.Generation != varplane.Generation(i/2+1) {
				t.Fatalf("history of %q: event %d has generation %d, want %d", s, i, ev.Generation, i/2+1)
			}
		}
		if g := st.State(s).Generation; g != gens[s] {
			t.Errorf("generation of %q = %d, want %d", s, g, gens[s])
		}
	}
	final := st.History("a")
	for i, v := range views {
		if len(v) != 2*(i+1) {
			t.Fatalf("view %d has %d events, want %d", i, len(v), 2*(i+1))
		}
		for j := range v {
			if v[j].Revision != final[j].Revision || v[j].Generation != final[j].Generation {
				t.Fatalf("view %d changed at %d after later commits", i, j)
			}
		}
	}
}
