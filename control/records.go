package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/varplane/varplane"
)

// RecordRoot is the root segment of the scopes the control subsystem keeps
// its records in.
const RecordRoot varplane.Scope = "varplane-control"

// OwnerName is the name the control subsystem's writes give as their
// varplane Owner.
const OwnerName = "reviewed changes"

// policiesScope holds every review policy in one document, so a policy
// change is one compare-and-set.
const policiesScope = RecordRoot + ".policies"

// changeScope is the record scope of change id.
func changeScope(id string) varplane.Scope { return RecordRoot + ".change." + varplane.Scope(id) }

// changePrefix is what every change record scope starts with.
const changePrefix = string(RecordRoot) + ".change."

// newID returns a fresh change id: "ch-" and 16 random hex digits.
func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("change id: %w", err)
	}
	return "ch-" + hex.EncodeToString(b[:]), nil
}

// validID reports whether id has the shape newID gives.
func validID(id string) bool {
	if len(id) != 19 || !strings.HasPrefix(id, "ch-") {
		return false
	}
	_, err := hex.DecodeString(id[3:])
	return err == nil && strings.ToLower(id) == id
}

// readRecord decodes the head of a record scope into dst and returns its
// generation (the record's version); found is false when it has no head.
func readRecord(ctx context.Context, s varplane.Store, scope varplane.Scope, dst any) (varplane.Generation, bool, error) {
	st, err := s.State(ctx, scope)
	if err != nil {
		return 0, false, err
	}
	if st.Head == nil {
		return st.Generation, false, nil
	}
	if err := json.Unmarshal(st.Head.Document, dst); err != nil {
		return 0, false, fmt.Errorf("control: decode %s: %w", scope, err)
	}
	return st.Generation, true, nil
}

// writeRecord publishes v as the record of scope at version+1, guarded by
// version; a record that moved meanwhile is a revision-conflict and
// nothing is written. by is the identity that made the transition, reason
// what it was: they are the audit event's actor and reason.
func writeRecord(ctx context.Context, e *varplane.Engine, scope varplane.Scope, version varplane.Generation, v any, by, reason string) (varplane.Generation, error) {
	doc, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("control: encode %s: %w", scope, err)
	}
	res, err := e.Publish(ctx, varplane.PublishRequest{
		Scope: scope, Document: doc, ExpectedGeneration: version,
		Actor: by, Owner: OwnerName, Reason: reason,
	})
	if err != nil {
		return 0, err
	}
	return res.Generation, nil
}

// Guard reserves the control subsystem's scopes and the scopes under a
// review policy, through the engine's Owners (see Owners). Create one with
// NewGuard before the engine, give its Owners to varplane.Options, and Bind
// it to the store (New does) before serving.
type Guard struct {
	store  atomic.Pointer[storeRef]
	cached atomic.Pointer[policySet]
	bound  atomic.Pointer[bindingSet]
}

// storeRef is what a Guard is bound to: the store it reads the policies
// from and, once bound to an engine, who reserves which scope.
type storeRef struct {
	s        varplane.Store
	reserved func(varplane.Scope) (string, bool)
}

// NewGuard returns a Guard bound to no store yet: until Bind, no scope is
// under a policy (the record scopes are reserved from the start).
func NewGuard() *Guard { return &Guard{} }

// Bind makes g read the review policies from s.
func (g *Guard) Bind(s varplane.Store) { g.store.Store(&storeRef{s: s}) }

// bindEngine makes g read the review policies from e's store and leave
// alone the scopes another subsystem of e reserves (Engine.Reserved).
func (g *Guard) bindEngine(e *varplane.Engine) {
	g.store.Store(&storeRef{s: e.Store(), reserved: e.Reserved})
}

// reserved reports whether s is reserved to a subsystem of the engine g is
// bound to (the access control's principals, the values service's
// configurations, this package's records): no review policy covers it,
// so no policy can lock out the administrators of that subsystem.
func (g *Guard) reserved(s varplane.Scope) bool {
	if isRecordScope(s) {
		return true
	}
	ref := g.store.Load()
	if ref == nil || ref.reserved == nil {
		return false
	}
	_, ok := ref.reserved(s)
	return ok
}

// Owners returns the two reservations to give varplane.Options.Owners: the
// record scopes (scope-owned) and every scope under a review policy
// (change-required). Only writes that name OwnerName pass them.
func (g *Guard) Owners() []varplane.Owner {
	return []varplane.Owner{
		{Name: OwnerName, Owns: isRecordScope},
		{Name: OwnerName, Owns: g.underPolicy, Code: varplane.CodeChangeRequired},
	}
}

func isRecordScope(s varplane.Scope) bool { return s == RecordRoot || s.IsDescendantOf(RecordRoot) }

// underPolicy reports whether a policy covers s, as the store holds the
// policies now. A reserved scope is never under a policy (whatever the
// policies record holds, even when it does not decode): its owner's own
// rules guard it. When the store cannot be reached it judges by the policies
// it last read (none when it never read them): the write it guards goes to
// that same store, which refuses it with store-unavailable, so the caller
// is told the truth rather than change-required. Any other failure to read
// them (a record that does not decode) refuses the write.
func (g *Guard) underPolicy(s varplane.Scope) bool {
	if g.reserved(s) {
		return false
	}
	ps, err := g.policies(context.Background())
	if err != nil && varplane.ErrorCode(err) == varplane.CodeStoreUnavailable {
		ps, err = g.cached.Load(), nil
		if ps == nil {
			return false
		}
	}
	if err != nil {
		return true
	}
	_, ok := lookupPolicy(ps, s)
	return ok
}

// policies returns the policy set the store holds, decoded once per
// revision of its record.
func (g *Guard) policies(ctx context.Context) (*policySet, error) {
	return readSet(ctx, g, policiesScope, &g.cached, func(raw json.RawMessage) ([]Policy, error) {
		var doc policiesDoc
		err := json.Unmarshal(raw, &doc)
		return doc.Policies, err
	})
}

// recordSet is the list a record scope holds (the policies, the schema
// bindings) as of one version of the record.
type recordSet[T any] struct {
	version  varplane.Generation
	revision varplane.Revision
	list     []T
}

// readSet returns the list the store holds in the record scope scope (an
// empty one at its generation when it has no head), decoded by decode once
// per revision of the record: cache keeps the last one decoded.
func readSet[T any](ctx context.Context, g *Guard, scope varplane.Scope, cache *atomic.Pointer[recordSet[T]], decode func(json.RawMessage) ([]T, error)) (*recordSet[T], error) {
	ref := g.store.Load()
	if ref == nil {
		return &recordSet[T]{}, nil
	}
	st, err := ref.s.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	if st.Head == nil {
		return &recordSet[T]{version: st.Generation}, nil
	}
	if c := cache.Load(); c != nil && c.revision == st.Head.Revision && c.version == st.Generation {
		return c, nil
	}
	list, err := decode(st.Head.Document)
	if err != nil {
		return nil, fmt.Errorf("control: decode %s: %w", scope, err)
	}
	rs := &recordSet[T]{version: st.Generation, revision: st.Head.Revision, list: list}
	cache.Store(rs)
	return rs, nil
}

// errNoRecord reports a record scope without a head: the record never
// existed.
var errNoRecord = errors.New("control: no such record")
