package varplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/varplane/varplane/canonical"
)

// HistoryReader is what VerifyStore reads of a store: every Store is one,
// and so is anything else that holds scopes' histories (an export, say).
type HistoryReader interface {
	// Scopes lists every scope that has a history.
	Scopes(ctx context.Context) ([]Scope, error)
	// State reports, in its Chain, the chain head the reader keeps apart
	// from the history (a store's head row, an export's report): a tail
	// cut from a history shows against it.
	State(ctx context.Context, scope Scope) (*ScopeState, error)
	// History returns the scope's events in log order.
	History(ctx context.Context, scope Scope) ([]Event, error)
	// Revision returns a stored revision record: an error matching
	// ErrReclaimed when its body was reclaimed, ErrNotFound when it is
	// not stored.
	Revision(ctx context.Context, scope Scope, rev Revision) (*RevisionRecord, error)
}

// StoreReport is what VerifyStore found: counts of what it checked, and
// the chain heads that anchor the store.
type StoreReport struct {
	Scopes int `json:"scopes"`
	Events int `json:"events"`
	// Unchained counts the events written before the store kept chains.
	Unchained int `json:"unchained"`
	// Cascades counts the cascade entries matched to their parents'
	// deactivations.
	Cascades int `json:"cascades"`
	// Revisions counts the revision bodies checked against their digests;
	// Reclaimed the revisions whose body retention reclaimed.
	Revisions int `json:"revisions"`
	Reclaimed int `json:"reclaimed"`
	// Heads are the chain heads of the scopes with a chained event.
	Heads map[Scope]ChainHead `json:"heads"`
	// Digest is ChainDigest(Heads).
	Digest string `json:"digest"`
}

// VerifyStore checks every scope of r end to end: its history against the
// chain rule (VerifyChain), the chain head r keeps apart from it (a head
// beyond the history's last event is a missing link), every cascade entry
// against the deactivation of its parent that lists it and every such
// listing against the descendant's history (CheckCascade), and every
// revision body, the revision-created events' documents and the stored
// records, against its digest. It reads one scope's history at a time, in
// scope order, its kept chain head first: it may run while the store takes
// commits.
//
// It returns the report and nil for a sound store; otherwise the report
// of what it checked so far and the first problem, a *ChainError naming
// the scope, the seq and what is wrong, or the error of a read that failed.
func VerifyStore(ctx context.Context, r HistoryReader) (*StoreReport, error) {
	scopes, err := r.Scopes(ctx)
	if err != nil {
		return nil, fmt.Errorf("verify: list the scopes: %w", err)
	}
	scopes = slices.Clone(scopes)
	slices.Sort(scopes)
	scopes = slices.Compact(scopes)
	rep := &StoreReport{Heads: map[Scope]ChainHead{}}
	// listed holds the cascade entries that parents' deactivations list and
	// that no descendant's history has shown yet; a parent sorts before
	// its descendants, so its history has been read by the time theirs is.
	listed := map[CascadeEntry]listing{}
	for _, scope := range scopes {
		if err := verifyScope(ctx, r, scope, rep, listed); err != nil {
			return rep, err
		}
		rep.Scopes++
	}
	if len(listed) > 0 {
		entries := make([]CascadeEntry, 0, len(listed))
		for c := range listed {
			entries = append(entries, c)
		}
		slices.SortFunc(entries, func(a, b CascadeEntry) int {
			return cmp.Or(strings.Compare(string(listed[a].parent.Scope), string(listed[b].parent.Scope)),
				cmp.Compare(listed[a].index, listed[b].index), strings.Compare(string(a.Scope), string(b.Scope)))
		})
		c := entries[0]
		l := listed[c]
		return rep, &ChainError{Scope: l.parent.Scope, Seq: l.parent.Seq, Index: l.index,
			Problem: fmt.Sprintf("the deactivation lists %q at generation %d, and that scope's history has no such cascade entry", c.Scope, c.Generation)}
	}
	rep.Digest = ChainDigest(rep.Heads)
	return rep, nil
}

// listing is a parent's deactivation that lists a cascade entry.
type listing struct {
	parent *Event
	index  int
}

// verifyScope checks one scope and adds it to rep.
func verifyScope(ctx context.Context, r HistoryReader, scope Scope, rep *StoreReport, listed map[CascadeEntry]listing) error {
	// The kept head is read first: on a store that takes commits
	// meanwhile, the history read after it holds at least that link.
	st, err := r.State(ctx, scope)
	if err != nil {
		return fmt.Errorf("verify: read the state of %q: %w", scope, err)
	}
	hist, err := r.History(ctx, scope)
	if err != nil {
		return fmt.Errorf("verify: read the history of %q: %w", scope, err)
	}
	v, err := VerifyChain(scope, hist)
	if err != nil {
		return err
	}
	rep.Events += len(hist)
	rep.Unchained += v.Unchained
	if err := checkKeptHead(scope, hist, v.Head, st.Chain); err != nil {
		return err
	}
	if v.Head.Seq > 0 {
		rep.Heads[scope] = v.Head
	}
	seen := map[Revision]bool{}
	for i := range hist {
		ev := &hist[i]
		switch {
		case isCascadeEntry(ev):
			if err := matchCascade(scope, ev, i, listed); err != nil {
				return err
			}
			rep.Cascades++
		case ev.Kind == EventDeactivated && len(ev.Cascade) > 0:
			parent := *ev // a copy: the history is not kept
			for _, c := range ev.Cascade {
				listed[c] = listing{parent: &parent, index: i}
			}
		case ev.Kind == EventRevisionCreated:
			if err := checkCreated(ctx, r, ev, i, seen, rep); err != nil {
				return err
			}
		}
	}
	return nil
}

// isCascadeEntry reports an entry a subtree deactivation of an ancestor
// wrote into a descendant's history (VerifyChain skips them).
func isCascadeEntry(ev *Event) bool {
	return ev.Kind == EventDeactivated && ev.Seq == 0 && ev.Hash == "" && len(ev.Cascade) == 0 && strings.HasPrefix(ev.Reason, cascadePrefix)
}

// checkKeptHead compares the chain head a reader keeps apart from the
// history (kept) with the history's last link (head): kept may lag (a
// replica that has not read the latest commit yet) but must be a link the
// history holds; one beyond it means the history lost its tail.
func checkKeptHead(scope Scope, hist []Event, head, kept ChainHead) error {
	if kept.Seq > head.Seq {
		return &ChainError{Scope: scope, Seq: head.Seq + 1, Index: len(hist),
			Problem: fmt.Sprintf("missing: the scope's chain head is at seq %d, its history ends at seq %d", kept.Seq, head.Seq)}
	}
	if kept.Seq == 0 {
		return nil
	}
	for i := range hist {
		if hist[i].Seq == kept.Seq {
			if hist[i].Hash != kept.Hash {
				return &ChainError{Scope: scope, Seq: kept.Seq, Index: i, Problem: "the scope's chain head holds another hash for this seq than its history"}
			}
			return nil
		}
	}
	return &ChainError{Scope: scope, Seq: kept.Seq, Index: len(hist), Problem: "missing: the scope's chain head names a seq its history does not hold"}
}

// matchCascade checks a cascade entry against the deactivations of its
// parent read so far, and marks the listing found.
func matchCascade(scope Scope, ev *Event, i int, listed map[CascadeEntry]listing) error {
	key := CascadeEntry{Scope: scope, Generation: ev.Generation}
	l, ok := listed[key]
	if !ok || !CheckCascade(ev, l.parent) {
		return &ChainError{Scope: scope, Seq: 0, Index: i,
			Problem: fmt.Sprintf("a cascade entry at generation %d (reason %q) that no deactivation of its parent lists", ev.Generation, ev.Reason)}
	}
	delete(listed, key)
	return nil
}

// checkCreated checks the document of a revision-created event and, once
// per revision, the stored record against the revision's digest.
func checkCreated(ctx context.Context, r HistoryReader, ev *Event, i int, seen map[Revision]bool, rep *StoreReport) error {
	problem := func(format string, args ...any) error {
		return &ChainError{Scope: ev.Scope, Seq: ev.Seq, Index: i, Problem: fmt.Sprintf(format, args...)}
	}
	if len(ev.Document) > 0 {
		if d, err := canonical.Digest(ev.Document); err != nil || Revision(d) != ev.Revision {
			return problem("the event's document does not match its revision %s", ev.Revision)
		}
		rep.Revisions++
	}
	if seen[ev.Revision] {
		return nil
	}
	seen[ev.Revision] = true
	rec, err := r.Revision(ctx, ev.Scope, ev.Revision)
	switch {
	case errors.Is(err, ErrReclaimed):
		rep.Reclaimed++
		return nil
	case errors.Is(err, ErrNotFound):
		return problem("revision %s is neither stored nor marked reclaimed", ev.Revision)
	case err != nil:
		return fmt.Errorf("verify: read revision %s of %q: %w", ev.Revision, ev.Scope, err)
	}
	if d, err := canonical.Digest(rec.Document); err != nil || Revision(d) != ev.Revision || rec.Scope != ev.Scope || rec.Revision != ev.Revision {
		return problem("the stored record of revision %s does not match its digest", ev.Revision)
	}
	rep.Revisions++
	return nil
}
