package varplane_test

import (
	"errors"
	"testing"

	"github.com/varplane/varplane"
)

func TestRollbackTargetIn(t *testing.T) {
	act := func(g varplane.Generation, rev varplane.Revision) varplane.Event {
		return varplane.Event{Kind: varplane.EventActivated, Generation: g, Revision: rev}
	}
	deact := func(g varplane.Generation) varplane.Event {
		return varplane.Event{Kind: varplane.EventDeactivated, Generation: g}
	}
	created := func(rev varplane.Revision) varplane.Event {
		return varplane.Event{Kind: varplane.EventRevisionCreated, Revision: rev}
	}
	rejected := varplane.Event{Kind: varplane.EventRejected}
	// a@1 b@2 b@3 c@4 off@5 a@6, with creations and a rejection between.
	hist := []varplane.Event{created("a"), created("b"), act(1, "a"), act(2, "b"), rejected, act(3, "b"), created("c"), act(4, "c"), deact(5), act(6, "a")}
	gen := func(g varplane.Generation) *varplane.Generation { return &g }
	for _, tc := range []struct {
		name     string
		hist     []varplane.Event
		expected varplane.Generation
		to       *varplane.Generation
		want     varplane.Revision
		code     varplane.Code
		current  varplane.Generation
	}{
		{"as of the latest head", hist, 6, nil, "c", "", 0},
		{"as of a deactivation", hist, 5, nil, "c", "", 0},
		{"as of an older head", hist, 4, nil, "b", "", 0},
		{"the same revision twice", hist, 3, nil, "a", "", 0},
		{"nothing before the first head, scope moved on", hist, 1, nil, "", varplane.CodeRevisionConflict, 6},
		{"expected ahead of the scope", hist, 9, nil, "c", "", 0},
		{"to an activation", hist, 6, gen(2), "b", "", 0},
		{"to a deactivation", hist, 6, gen(5), "", varplane.CodeNotFound, 0},
		{"to a generation never reached", hist, 6, gen(7), "", varplane.CodeNotFound, 0},
		{"to generation 0", hist, 6, gen(0), "", varplane.CodeNotFound, 0},
		{"one head only", []varplane.Event{created("a"), act(1, "a")}, 1, nil, "", varplane.CodeNotFound, 0},
		{"no history", nil, 0, nil, "", varplane.CodeNotFound, 0},
		{"no history, expected ahead", nil, 2, nil, "", varplane.CodeRevisionConflict, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := varplane.RollbackTargetIn("s.k", tc.hist, tc.expected, tc.to)
			if tc.code == "" {
				if err != nil || got != tc.want {
					t.Fatalf("target = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if varplane.ErrorCode(err) != tc.code || got != "" {
				t.Fatalf("target = %q, %v; want %s", got, err, tc.code)
			}
			var e *varplane.Error
			if tc.code == varplane.CodeRevisionConflict && (!errors.As(err, &e) || *e.Current != tc.current || *e.Expected != tc.expected) {
				t.Fatalf("conflict %v, want current %d", err, tc.current)
			}
		})
	}
}

// A RollbackSearch stops as soon as it has its answer: the events before
// the target are never looked at.
func TestRollbackSearchStops(t *testing.T) {
	s := varplane.NewRollbackSearch(3, nil)
	steps := []varplane.Event{
		{Kind: varplane.EventActivated, Generation: 3, Revision: "c"},
		{Kind: varplane.EventActivated, Generation: 2, Revision: "b"},
	}
	for i, ev := range steps {
		if done := s.Step(&ev); done != (i == 1) {
			t.Fatalf("step %d: done = %v", i, done)
		}
	}
	if rev, err := s.Result("s.k"); err != nil || rev != "b" {
		t.Fatalf("result %q %v", rev, err)
	}
	if !s.Step(&varplane.Event{Kind: varplane.EventActivated, Generation: 1, Revision: "a"}) {
		t.Fatal("a finished search took another step")
	}
	if rev, _ := s.Result("s.k"); rev != "b" {
		t.Fatalf("result changed to %q", rev)
	}
}
