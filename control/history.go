package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsonpatch"
)

// DocumentHead is the head of a document as the control API answers it:
// the head, who published it, and the change it came from with its
// approvers.
type DocumentHead struct {
	Scope       varplane.Scope      `json:"scope"`
	Generation  varplane.Generation `json:"generation"`
	Revision    varplane.Revision   `json:"revision"`
	SchemaID    string              `json:"schemaId,omitempty"`
	EffectiveAt time.Time           `json:"effectiveAt"`
	Document    json.RawMessage     `json:"document"`
	PublishedBy string              `json:"publishedBy"`
	Reason      string              `json:"reason,omitempty"`
	Change      string              `json:"change,omitempty"`
	ApprovedBy  []string            `json:"approvedBy"`
	// Rollout is the scope's rollout in progress, when one is: while it
	// runs, the instances its step selects serve its revision and every
	// other reader this head (docs/rollouts.md).
	Rollout *varplane.StagedRollout `json:"rollout,omitempty"`
}

// Head returns scope's head; no-head when it serves nothing.
func (svc *Service) Head(ctx context.Context, scope varplane.Scope) (*DocumentHead, error) {
	if _, err := varplane.ParseScope(string(scope)); err != nil {
		return nil, err
	}
	h, err := svc.engine.Head(ctx, scope)
	if err != nil {
		return nil, err
	}
	out := &DocumentHead{
		Scope: scope, Generation: h.Generation, Revision: h.Revision, SchemaID: h.SchemaID,
		EffectiveAt: h.EffectiveAt, Document: h.Document, PublishedBy: h.Actor, Reason: h.Reason,
		ApprovedBy: []string{},
	}
	// The reason is only a claim (any writer of a scope without a policy
	// may give "change <id>"): the head names a change, and shows its
	// approvers, only when that change's record says it published this
	// very generation and revision of this scope.
	if id := changeOf(h.Reason); id != "" {
		c, err := svc.load(ctx, id)
		if err != nil && !errors.Is(err, errNoRecord) {
			return nil, err
		}
		if c != nil && c.publishedAs(scope, h.Generation, h.Revision) {
			out.Change = c.ID
			for _, a := range c.Approvals {
				out.ApprovedBy = append(out.ApprovedBy, a.By)
			}
		}
	}
	var staged varplane.StagedRollouts
	if _, _, err := readRecord(ctx, svc.store, varplane.RolloutScope, &staged); err != nil {
		return nil, err
	}
	if r, ok := staged.Of(scope); ok {
		out.Rollout = &r
	}
	return out, nil
}

// publishedAs reports whether c's record says it published revision rev
// of scope as generation gen.
func (c *Change) publishedAs(scope varplane.Scope, gen varplane.Generation, rev varplane.Revision) bool {
	return c.State == StatePublished && c.Published != nil && c.Scope == scope &&
		c.Published.Generation == gen && c.Revision == rev
}

// RevisionEntry is one generation of a document: an activation (with its
// revision) or a deactivation.
type RevisionEntry struct {
	Generation varplane.Generation `json:"generation"`
	Kind       varplane.EventKind  `json:"kind"`
	Revision   varplane.Revision   `json:"revision,omitempty"`
	By         string              `json:"by,omitempty"`
	OnBehalfOf string              `json:"onBehalfOf,omitempty"`
	Reason     string              `json:"reason,omitempty"`
	Change     string              `json:"change,omitempty"`
	// RollbackOf marks an activation that rolled back that generation
	// (varplane.Event.RollbackOf).
	RollbackOf varplane.Generation `json:"rollbackOf,omitempty"`
	At         time.Time           `json:"at"`
	// Document is set on a single revision's answer.
	Document json.RawMessage `json:"document,omitempty"`
	SchemaID string          `json:"schemaId,omitempty"`
}

// Page limits of Revisions.
const (
	DefaultPage = 20
	MaxPage     = 200
)

// RevisionsPage is a page of revisions, newest first; Next is the before
// of the next page (0: none).
type RevisionsPage struct {
	Revisions []RevisionEntry     `json:"revisions"`
	Next      varplane.Generation `json:"next,omitempty"`
}

// Revisions returns up to limit generations of scope below before (every
// one when before is 0), newest first. limit 0 is DefaultPage; a limit over
// MaxPage is MaxPage.
func (svc *Service) Revisions(ctx context.Context, scope varplane.Scope, before varplane.Generation, limit int) (*RevisionsPage, error) {
	switch {
	case limit == 0:
		limit = DefaultPage
	case limit > MaxPage:
		limit = MaxPage
	case limit < 0:
		return nil, varplane.Errorf(varplane.CodeBadRequest, "limit must be positive")
	}
	events, err := svc.events(ctx, scope)
	if err != nil {
		return nil, err
	}
	page := &RevisionsPage{Revisions: []RevisionEntry{}}
	for i := len(events) - 1; i >= 0; i-- {
		ev := &events[i]
		if ev.Generation == 0 || (before != 0 && ev.Generation >= before) {
			continue
		}
		if len(page.Revisions) == limit {
			page.Next = page.Revisions[limit-1].Generation
			break
		}
		page.Revisions = append(page.Revisions, entryOf(ev))
	}
	return page, nil
}

func entryOf(ev *varplane.Event) RevisionEntry {
	return RevisionEntry{
		Generation: ev.Generation, Kind: ev.Kind, Revision: ev.Revision, By: ev.Actor,
		OnBehalfOf: ev.OnBehalfOf, Reason: ev.Reason, Change: changeOf(ev.Reason), RollbackOf: ev.RollbackOf, At: ev.Timestamp,
	}
}

// events returns scope's events without their documents (the paged
// history reads metadata only, whatever the scope's revisions weigh).
func (svc *Service) events(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if _, err := varplane.ParseScope(string(scope)); err != nil {
		return nil, err
	}
	return svc.store.EventHistory(ctx, scope)
}

// generation returns the event that allocated generation n of scope (an
// activation or a deactivation), read from the metadata alone; not-found
// when scope never reached n.
func (svc *Service) generation(ctx context.Context, scope varplane.Scope, n varplane.Generation) (*varplane.Event, error) {
	events, err := svc.events(ctx, scope)
	if err != nil {
		return nil, err
	}
	for i := len(events) - 1; i >= 0 && n != 0; i-- {
		if ev := &events[i]; ev.Generation == n && ev.Kind != varplane.EventRevisionCreated {
			return ev, nil
		}
	}
	return nil, varplane.Errorf(varplane.CodeNotFound, "scope %q has no generation %d", scope, n)
}

// Revision returns generation n of scope with its document: not-found when
// scope never reached n, revision-reclaimed (410) when n's document is no
// longer kept. It reads the history's metadata and the one body it
// returns.
func (svc *Service) Revision(ctx context.Context, scope varplane.Scope, n varplane.Generation) (*RevisionEntry, error) {
	ev, err := svc.generation(ctx, scope, n)
	if err != nil {
		return nil, err
	}
	e := entryOf(ev)
	if ev.Kind != varplane.EventActivated {
		return &e, nil
	}
	rec, err := svc.store.Revision(ctx, scope, ev.Revision)
	switch {
	case errors.Is(err, varplane.ErrReclaimed), errors.Is(err, varplane.ErrNotFound):
		// The log names the revision, so it was stored: its body is
		// what is gone.
		return nil, &varplane.Error{Code: varplane.CodeRevisionReclaimed, Scope: scope,
			Message: fmt.Sprintf("the document of generation %d of %q was reclaimed", n, scope)}
	case err != nil:
		return nil, err
	}
	e.Document, e.SchemaID = rec.Document, rec.SchemaID
	return &e, nil
}

// documentAt returns scope's document at generation n: null for a
// deactivation (nothing served).
func (svc *Service) documentAt(ctx context.Context, scope varplane.Scope, n varplane.Generation) (json.RawMessage, error) {
	e, err := svc.Revision(ctx, scope, n)
	if err != nil {
		return nil, err
	}
	if e.Document == nil {
		return json.RawMessage("null"), nil
	}
	return e.Document, nil
}

// DefaultMaxDiffBytes is Options.MaxDiffBytes when zero: the patch of two
// wholly different documents of the default size limit (1 MiB) fits.
const DefaultMaxDiffBytes = 16 << 20

// DefaultMaxDiffs is Options.MaxDiffs when zero.
const DefaultMaxDiffs = 2

// Diff returns the RFC 6902 JSON Patch that turns scope's document at from
// into the one at to (to 0: the current generation), with each remove's
// and replace's Old when old (the text form shows them). It loads the two
// documents and nothing else of the history, takes time linear in their
// size and the patch's, and stops with ctx's error once ctx is done. A
// patch past Options.MaxDiffBytes (its operations' paths and values, see
// jsonpatch.Bounds) is limit-exceeded, limit "diff-bytes". At most
// Options.MaxDiffs diffs are computed at once; the others wait, as long as
// their ctx lets them.
func (svc *Service) Diff(ctx context.Context, scope varplane.Scope, from, to varplane.Generation, old bool) ([]PatchOp, error) {
	// The wait comes first, so that a diff waiting holds no document.
	select {
	case svc.diffs <- struct{}{}:
		defer func() { <-svc.diffs }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if to == 0 {
		st, err := svc.store.State(ctx, scope)
		if err != nil {
			return nil, err
		}
		to = st.Generation
	}
	a, err := svc.documentAt(ctx, scope, from)
	if err != nil {
		return nil, err
	}
	b, err := svc.documentAt(ctx, scope, to)
	if err != nil {
		return nil, err
	}
	ops, err := diff(ctx, a, b, jsonpatch.Bounds{MaxBytes: svc.opts.MaxDiffBytes, Old: old})
	if errors.Is(err, jsonpatch.ErrTooLarge) {
		return nil, &varplane.Error{Code: varplane.CodeLimitExceeded, Limit: "diff-bytes", Scope: scope,
			Message: fmt.Sprintf("the diff of generations %d and %d of %q is larger than %d bytes: compare nearer generations, or read the two revisions", from, to, scope, svc.opts.MaxDiffBytes)}
	}
	return ops, err
}

// Propagation is how far a generation has reached: of the instances whose
// status is fresh (Live), how many have installed it or a later one.
type Propagation struct {
	Generation varplane.Generation `json:"generation"`
	Installed  int                 `json:"installed"`
	Live       int                 `json:"live"`
	// Unknown is set, with why, when no instance can report to this
	// control plane (no Options.Instances, or a store that keeps no
	// heartbeats): the counts are then not 0 of 0 but unknown.
	Unknown string `json:"unknown,omitempty"`
}

// Propagation counts the instances with a fresh status and those of them
// that run generation n of scope or later. Without Options.Instances, or
// on a store that keeps no heartbeats (ErrNoHeartbeats), both counts are 0
// and Unknown says why.
func (svc *Service) Propagation(ctx context.Context, scope varplane.Scope, n varplane.Generation) (*Propagation, error) {
	if _, err := svc.generation(ctx, scope, n); err != nil {
		return nil, err
	}
	p := &Propagation{Generation: n}
	statuses, unknown, err := svc.statuses(ctx, StatusFresh)
	if err != nil {
		return nil, err
	}
	if unknown != "" {
		p.Unknown = unknown
		return p, nil
	}
	for _, s := range statuses {
		p.Live++
		if s.Installed[scope] >= n {
			p.Installed++
		}
	}
	return p, nil
}

// statuses returns the statuses written at most within ago, or, when no
// instance can report to this control plane (no Options.Instances, or a
// store that keeps no heartbeats), why not: counts made of them are then
// unknown, not 0 of 0.
func (svc *Service) statuses(ctx context.Context, within time.Duration) ([]InstanceStatus, string, error) {
	if svc.opts.Instances == nil {
		return nil, "no instance reports to this control plane", nil
	}
	statuses, err := svc.opts.Instances.Statuses(ctx)
	if errors.Is(err, ErrNoHeartbeats) {
		return nil, varplane.ErrorMessage(err), nil
	}
	now := svc.now()
	return slices.DeleteFunc(statuses, func(s InstanceStatus) bool { return now.Sub(s.At) > within }), "", err
}

// Rollback proposes a change whose content is generation n's document, on
// the scope's current generation; it goes through the same review as any
// change. Under a schema binding the document is checked against the bound
// schema, not the one its revision was stored with: a rollback to a
// document the binding rejects is a failed change, whose schema check
// names the schema and lists its issues.
func (svc *Service) Rollback(ctx context.Context, by varplane.Identity, scope varplane.Scope, n varplane.Generation, note string) (*Change, error) {
	e, err := svc.Revision(ctx, scope, n)
	if err != nil {
		return nil, err
	}
	if e.Kind != varplane.EventActivated {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "generation %d of %q is a deactivation: nothing to roll back to", n, scope)
	}
	st, err := svc.store.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	if note == "" {
		note = fmt.Sprintf("rollback to generation %d", n)
	}
	schemaID := e.SchemaID
	if _, bound, err := svc.guard.Binding(ctx, scope); err != nil {
		return nil, err
	} else if bound {
		schemaID = "" // the scope's binding decides, not the schema of the old revision
	}
	return svc.Propose(ctx, by, ProposeRequest{Scope: scope, Base: st.Generation, Document: e.Document, SchemaID: schemaID, Note: note, rollbackTo: &n})
}
