package access

import (
	"context"
	"strings"

	"github.com/varplane/varplane"
)

// The no-escalation rule of the access API: a principal is given only what
// its creator holds itself (docs/access.md, "Who may give what"). Each rule
// is one function here, so the access API, the CLI and embedders judge
// alike.

// Creator is who creates or revokes a principal and what it may do itself:
// its kinds and prefixes as a grant holds them (empty: all) and its roles as
// Identity.Has judges them (hierarchical; "*" holds every role).
type Creator struct {
	ID       string
	Kinds    []varplane.Kind
	Prefixes []string
	Roles    []string
}

// Root returns a creator that holds everything: the operator acting on the
// store itself (varplane migrate, an embedder's own code), never a caller
// of the access API.
func Root(id string) Creator {
	return Creator{ID: id, Roles: []string{"*"}}
}

// GrantSource is an authorizer that can tell what a token's principal may
// do (its grant, without the secret): the access API reads the creator's
// kinds and prefixes from it. ScopedAuthorizer, Authorizer and the
// authorizer Combine returns implement it.
type GrantSource interface {
	// GrantOf returns the grant of token, false when no principal holds
	// it, and an error when the source cannot be read.
	GrantOf(ctx context.Context, token string) (Grant, bool, error)
}

// CreatorOf returns the creator a caller with identity id and token acts as
// under authorizer az: its roles are the identity's, its kinds and prefixes
// those of its grant. An authorizer that is no GrantSource (AllowAll, an
// embedder's own) tells only roles: there, only a caller holding every
// role ("*") administers principals, as one holding every kind and scope;
// any other is forbidden, so that no caller is wider here than elsewhere.
func CreatorOf(ctx context.Context, az varplane.Authorizer, id varplane.Identity, token string) (Creator, error) {
	c := Creator{ID: id.ID, Roles: id.Roles}
	gs, ok := az.(GrantSource)
	if !ok {
		if !id.Has("*") {
			return Creator{}, varplane.Errorf(varplane.CodeForbidden, "this server's authorizer does not tell what %s may do: only an identity holding every role administers principals", id.ID)
		}
		return c, nil
	}
	g, found, err := gs.GrantOf(ctx, token)
	if err != nil {
		return Creator{}, err
	}
	if !found {
		return Creator{}, varplane.Errorf(varplane.CodeForbidden, "the token is not accepted")
	}
	c.Kinds, c.Prefixes = g.Kinds, g.Prefixes
	return c, nil
}

// MayGive returns nil when c may give binding b: forbidden, naming the
// first rule b breaks, otherwise. The rules:
//
//   - administration: c holds AdminRole;
//   - kinds: every kind of b is one of c's (b without kinds means all, so
//     c must hold all);
//   - prefixes: every prefix of b lies within one of c's (b without
//     prefixes, or "*", means every scope, so c must hold every scope);
//   - roles: c holds every role of b (Identity.Has: "*" in b needs "*").
func (c Creator) MayGive(b Binding) error {
	if !c.identity().Has(AdminRole) {
		return varplane.Errorf(varplane.CodeForbidden, "administering principals needs the %s role", AdminRole)
	}
	if err := c.mayGiveKinds(b.Kinds); err != nil {
		return err
	}
	if err := c.mayGivePrefixes(b.Prefixes); err != nil {
		return err
	}
	for _, r := range b.Roles {
		if !c.identity().Has(r) {
			return varplane.Errorf(varplane.CodeForbidden, "role %q is not one %s holds: a principal is given only roles its creator holds", r, c.ID)
		}
	}
	return nil
}

func (c Creator) identity() varplane.Identity { return varplane.Identity{ID: c.ID, Roles: c.Roles} }

func (c Creator) mayGiveKinds(kinds []varplane.Kind) error {
	if len(c.Kinds) == 0 {
		return nil // c holds every kind
	}
	if len(kinds) == 0 {
		return varplane.Errorf(varplane.CodeForbidden, "every kind is more than %s holds: list the kinds", c.ID)
	}
	for _, k := range kinds {
		held := false
		for _, h := range c.Kinds {
			held = held || h == k
		}
		if !held {
			return varplane.Errorf(varplane.CodeForbidden, "kind %q is not one %s holds: a principal is given only kinds its creator holds", k, c.ID)
		}
	}
	return nil
}

func (c Creator) mayGivePrefixes(prefixes []string) error {
	if len(c.Prefixes) == 0 || containsStar(c.Prefixes) {
		return nil // c holds every scope
	}
	if len(prefixes) == 0 || containsStar(prefixes) {
		return varplane.Errorf(varplane.CodeForbidden, "every scope is more than %s holds: list prefixes within its own", c.ID)
	}
	for _, p := range prefixes {
		within := false
		for _, h := range c.Prefixes {
			within = within || prefixWithin(p, h)
		}
		if !within {
			return varplane.Errorf(varplane.CodeForbidden, "prefix %q is not within the prefixes %s holds", p, c.ID)
		}
	}
	return nil
}

func containsStar(ps []string) bool {
	for _, p := range ps {
		if p == "*" {
			return true
		}
	}
	return false
}

// prefixWithin reports whether every scope prefix p matches is matched by
// outer too (neither is "*"): "a" holds "a", "a.", "a.b" and "a.b.";
// "a." holds "a.b" and "a.b." but not "a" nor "a.".
func prefixWithin(p, outer string) bool {
	base, below := strings.CutSuffix(p, ".")
	if below && p == outer {
		return true
	}
	// p matches base and its descendants (or those only): when outer
	// matches base, it matches every descendant of base too.
	return prefixMatches(outer, base)
}
