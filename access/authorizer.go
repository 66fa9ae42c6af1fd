package access

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/varplane/varplane"
)

// Authorizer authorizes requests by the principals of the access document
// of a store. It reads the scope's state on every call, which is an atomic
// load on the stores that cache (Redis serves installed heads from memory),
// and decodes the document again only when its revision changed: so it is
// exactly as fresh as the store's own snapshot, and a revocation applies as
// soon as the store installs it (at once on the replica that wrote it and
// where the invalidation arrives, within one revalidation interval
// elsewhere). It keeps no other state.
type Authorizer struct {
	store varplane.Store
	table atomic.Pointer[table]
}

// table is the access document of one revision, indexed by token digest.
type table struct {
	revision varplane.Revision
	byDigest map[string]entry
}

type entry struct {
	grant    Grant
	identity varplane.Identity
}

// NewAuthorizer returns an Authorizer over the access document of store.
func NewAuthorizer(store varplane.Store) *Authorizer { return &Authorizer{store: store} }

// Authorize implements varplane.Authorizer: 401 without a token, 403 for a
// token no principal holds or whose principal does not cover the request,
// and the principal's identity (its id and roles) otherwise. A store that
// cannot be read is an error (the request fails closed), never "no
// principals".
func (a *Authorizer) Authorize(ctx context.Context, req varplane.Access) (varplane.Identity, error) {
	if req.Token == "" {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
	}
	t, err := a.current(ctx)
	if err != nil {
		return varplane.Identity{}, err
	}
	e, ok := t.byDigest[Digest(req.Token)]
	if !ok {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "the token is not accepted")
	}
	if !e.grant.Allows(req) {
		return varplane.Identity{}, notAllowed(req)
	}
	return e.identity, nil
}

// current returns the table of the access scope's current head (an empty
// one when it has none).
func (a *Authorizer) current(ctx context.Context) (*table, error) {
	st, err := a.store.State(ctx, Scope)
	if err != nil {
		return nil, fmt.Errorf("read the access scope: %w", err)
	}
	var rev varplane.Revision
	if st.Head != nil {
		rev = st.Head.Revision
	}
	if t := a.table.Load(); t != nil && t.revision == rev {
		return t, nil
	}
	t := &table{revision: rev, byDigest: map[string]entry{}}
	if st.Head != nil {
		d, err := ParseDocument(st.Head.Document)
		if err != nil {
			// Only this package writes the scope, and it checks what it
			// writes: a document it cannot read fails every request closed.
			return nil, fmt.Errorf("the access document at %s is unreadable: %w", rev, err)
		}
		for id, p := range d.Principals {
			t.byDigest[p.TokenDigest] = entry{grant: p.grant(id), identity: p.identity(id)}
		}
	}
	a.table.Store(t)
	return t, nil
}

// GrantOf implements GrantSource: the grant of the principal holding
// token (without the token), false when none does.
func (a *Authorizer) GrantOf(ctx context.Context, token string) (Grant, bool, error) {
	t, err := a.current(ctx)
	if err != nil {
		return Grant{}, false, err
	}
	e, ok := t.byDigest[Digest(token)]
	return e.grant, ok, nil
}

// Combined is the authorizer serve uses when both sources are on (see
// Combine).
type Combined struct {
	file  *ScopedAuthorizer
	store *Authorizer
}

// Combine returns the authorizer serve uses when both sources are on: a
// token is looked up in the static tokens file first, and the file decides
// for every token it holds (its grant, its identity); any other token is
// looked up in the store's access document. file or store may be nil (that
// source is off); with both nil every request is refused.
func Combine(file *ScopedAuthorizer, store *Authorizer) *Combined {
	return &Combined{file: file, store: store}
}

// Authorize implements varplane.Authorizer (see Combine).
func (c *Combined) Authorize(ctx context.Context, req varplane.Access) (varplane.Identity, error) {
	if req.Token == "" {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
	}
	if c.file != nil {
		if _, ok := c.file.Lookup(req.Token); ok || c.store == nil {
			return c.file.Authorize(ctx, req)
		}
	}
	if c.store != nil {
		return c.store.Authorize(ctx, req)
	}
	return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "the token is not accepted")
}

// GrantOf implements GrantSource by the same order as Authorize.
func (c *Combined) GrantOf(ctx context.Context, token string) (Grant, bool, error) {
	if c.file != nil {
		if g, ok, _ := c.file.GrantOf(ctx, token); ok || c.store == nil {
			return g, ok, nil
		}
	}
	if c.store != nil {
		return c.store.GrantOf(ctx, token)
	}
	return Grant{}, false, nil
}
