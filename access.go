package varplane

import (
	"context"
	"fmt"
	"strings"
)

// Kind is what a request does, as an Authorizer sees it.
type Kind string

// The request kinds. Audit is distinct from read so that the audit trail
// (actors, reasons, past documents) can be guarded without closing the data
// plane.
const (
	KindRead   Kind = "read"   // the data plane: heads, batch reads, live streams
	KindAudit  Kind = "audit"  // status, history, replay
	KindMutate Kind = "mutate" // create, activate, deactivate, rollback
	// KindIdentify only asks who the caller is, for routes that decide by
	// the caller's roles themselves (the values service): an authorizer
	// authenticates the token and returns its identity, and the scope and
	// kind limits of a grant do not apply.
	KindIdentify Kind = "identify"
)

// Access is what an Authorizer decides on: the kind of request, the scope it
// names (empty when it names none, as a validate without a scope or an
// identify), whether it covers the scope's whole subtree (a watch prefix),
// and the bearer token it carries (empty when none). It is the same at every
// entrance: the var API, the live streams, gRPC and the values service.
type Access struct {
	Kind    Kind
	Scope   Scope
	Subtree bool
	Token   string
}

// Identity is who a request acts as. Its ID is what the audit log records as
// the actor of everything the request writes; a client's own claim of who it
// acts for is recorded apart, as onBehalfOf, and never replaces it.
type Identity struct {
	// ID names the caller: a token's id, or "anonymous" when no tokens are
	// configured. It never derives from the token's secret.
	ID string
	// Roles are the caller's roles. Roles are hierarchical ("system" holds
	// "system:configuration:get"); "*" holds every role.
	Roles []string
}

// AnonymousID is the identity of every caller when no authorization is
// configured.
const AnonymousID = "anonymous"

// Anonymous is the identity AllowAll gives every caller: it holds every role.
var Anonymous = Identity{ID: AnonymousID, Roles: []string{"*"}}

// Has reports whether the identity holds role: role itself, an ancestor of it
// ("system:configuration" holds "system:configuration:get"), or "*".
func (id Identity) Has(role string) bool {
	for _, r := range id.Roles {
		if r == "*" || r == role || strings.HasPrefix(role, r+":") {
			return true
		}
	}
	return false
}

// Holds reports whether role is one of the identity's roles as given:
// neither "*" nor an ancestor holds it. A role that stands for a fact about
// the caller (InstanceRole: "this token is a data-plane instance") is
// judged by Holds, so that an administrator's "*" does not make it one.
func (id Identity) Holds(role string) bool {
	for _, r := range id.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// Authorizer decides whether a request may proceed, and as whom. Authorize
// returns the caller's identity to allow; a *Error with code forbidden (403)
// or unauthorized (401) to deny; any other error (or a panic) fails the
// request closed with 500 internal, and nothing of the error reaches the
// client. It is called once per scope a request names, concurrently from
// many requests, at every entrance.
type Authorizer interface {
	Authorize(ctx context.Context, a Access) (Identity, error)
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, a Access) (Identity, error)

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, a Access) (Identity, error) { return f(ctx, a) }

// AllowAll allows every request as Anonymous. Passing it explicitly
// documents the choice; servers warn once when they fall back to it.
var AllowAll Authorizer = AuthorizerFunc(func(context.Context, Access) (Identity, error) { return Anonymous, nil })

// Authorize calls a.Authorize the way every entrance must: a denial
// (forbidden, unauthorized) is returned as is; any other error, a panic, and
// an identity without an ID (every write must name who made it) become
// internal, so that a faulty authorizer fails closed and nothing of its
// failure reaches a client (the cause stays in Err for the log).
func Authorize(ctx context.Context, a Authorizer, req Access) (id Identity, err error) {
	defer func() {
		if p := recover(); p != nil {
			id, err = Identity{}, &Error{Code: CodeInternal, Message: "the authorizer failed", Err: fmt.Errorf("authorizer panicked: %v", p)}
		}
	}()
	id, err = a.Authorize(ctx, req)
	switch {
	case err != nil:
		if c := ErrorCode(err); c == CodeForbidden || c == CodeUnauthorized {
			return Identity{}, err
		}
		return Identity{}, &Error{Code: CodeInternal, Message: "the authorizer failed", Err: err}
	case id.ID == "":
		return Identity{}, &Error{Code: CodeInternal, Message: "the authorizer returned no identity"}
	}
	return id, nil
}
