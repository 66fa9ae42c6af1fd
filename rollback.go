package varplane

// RollbackSearch finds the target of a rollback in a scope's history read
// backwards, newest event first, as Store.RollbackTarget defines it: the
// stores that hold the history (in memory, or as a list read page by page
// from its end) feed it events until it has an answer, so that a rollback
// reads the part of the history after the target, never the whole of it.
//
// The zero value is not usable: call NewRollbackSearch. A RollbackSearch is
// used by one goroutine.
type RollbackSearch struct {
	expected Generation
	to       *Generation
	// head is the revision of the head as of generation expected ("" when
	// the scope served nothing then); found reports that the event that
	// set it has been seen, below is its generation.
	head  Revision
	found bool
	below Generation
	done  bool
	rev   Revision
	// newest is the generation of the first event that allocated one,
	// the scope's generation as of the read; seen reports there was one.
	newest Generation
	seen   bool
}

// NewRollbackSearch starts the search for the target of a rollback
// guarded by expected, to the activation at generation *to when to is set.
func NewRollbackSearch(expected Generation, to *Generation) *RollbackSearch {
	return &RollbackSearch{expected: expected, to: to}
}

// Step feeds the next event, going backwards; it reports whether the
// search is over (Result then answers, and later calls change nothing).
// Events that allocate no generation (creations, rejections) are skipped.
func (r *RollbackSearch) Step(ev *Event) bool {
	if r.done {
		return true
	}
	if ev.Generation == 0 || (ev.Kind != EventActivated && ev.Kind != EventDeactivated) {
		return false
	}
	if !r.seen {
		r.newest, r.seen = ev.Generation, true
	}
	if r.to != nil {
		switch {
		case ev.Generation == *r.to && ev.Kind == EventActivated:
			r.rev, r.done = ev.Revision, true
		case ev.Generation <= *r.to:
			r.done = true // generations only grow along a history: it is not an activation
		}
		return r.done
	}
	if !r.found {
		if ev.Generation > r.expected {
			return false
		}
		r.found, r.below = true, ev.Generation
		if ev.Kind == EventActivated {
			r.head = ev.Revision
		}
		return false
	}
	if ev.Kind == EventActivated && ev.Generation < r.below && ev.Revision != r.head {
		r.rev, r.done = ev.Revision, true
	}
	return r.done
}

// Result returns the target found; without one, a conflict when the scope
// (as far as the events fed tell: the first of them is its latest) is not
// at the expected generation, a not-found error naming scope otherwise.
func (r *RollbackSearch) Result(scope Scope) (Revision, error) {
	if r.rev != "" {
		return r.rev, nil
	}
	return "", RollbackNotFound(scope, r.expected, r.to, r.newest)
}

// RollbackNotFound is the error of a rollback of scope guarded by expected
// (to the activation at *to when set) that found no target, the scope
// being at generation current: a conflict when current is not expected (a
// client that re-reads may find one), not-found otherwise.
func RollbackNotFound(scope Scope, expected Generation, to *Generation, current Generation) error {
	switch {
	case current != expected:
		return ConflictError(scope, expected, current)
	case to != nil:
		return Errorf(CodeNotFound, "generation %d of scope %q is not an activation", *to, scope)
	}
	return Errorf(CodeNotFound, "scope %q has no earlier revision to roll back to as of generation %d", scope, expected)
}

// RollbackTargetIn runs a RollbackSearch over hist, a scope's whole history
// in log order, from its end: the answer of Store.RollbackTarget for a
// store that holds the history in memory.
func RollbackTargetIn(scope Scope, hist []Event, expected Generation, to *Generation) (Revision, error) {
	r := NewRollbackSearch(expected, to)
	for i := len(hist) - 1; i >= 0; i-- {
		if r.Step(&hist[i]) {
			break
		}
	}
	return r.Result(scope)
}
