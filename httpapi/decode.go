package httpapi

import (
	"encoding/json"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// DefaultMaxBodyBytes bounds request bodies when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = varplane.DefaultMaxBodyBytes

// MaxBatchScopes bounds the scopes of one batch read or watch request.
const MaxBatchScopes = wire.MaxBatchScopes

// Target is one scope a batch or watch request names. Subtree is set for a
// watch prefix: the scope and all its descendants.
type Target = wire.Target

// ParseReadScope extracts the scope of GET {base} from a raw query string:
// exactly one key (which must contain a dot) or one group (which must not).
// Missing, doubled, conflicting or malformed scopes are bad-request.
// Unrelated parameters are ignored.
func ParseReadScope(rawQuery string) (varplane.Scope, error) { return wire.ParseReadScope(rawQuery) }

// The request bodies. Pointer and raw fields tell a missing field from a
// zero one; json.RawMessage generations let parseGeneration refuse what
// encoding/json would coerce.

type createBody struct {
	Scope          *string         `json:"scope"`
	Document       json.RawMessage `json:"document"`
	SchemaID       *string         `json:"schemaId"`
	SchemaVersion  *string         `json:"schemaVersion"`
	Actor          *string         `json:"actor"`
	Reason         *string         `json:"reason"`
	IdempotencyKey *string         `json:"idempotencyKey"`
}

type validateBody struct {
	Document json.RawMessage `json:"document"`
	SchemaID *string         `json:"schemaId"`
	Scope    *string         `json:"scope"`
}

type activateBody struct {
	Scope              *string         `json:"scope"`
	Revision           *string         `json:"revision"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	Actor              *string         `json:"actor"`
	Reason             *string         `json:"reason"`
	IdempotencyKey     *string         `json:"idempotencyKey"`
}

type deactivateBody struct {
	Scope              *string         `json:"scope"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	Actor              *string         `json:"actor"`
	Reason             *string         `json:"reason"`
	IdempotencyKey     *string         `json:"idempotencyKey"`
	Force              *bool           `json:"force"`
}

type rollbackBody struct {
	Scope              *string         `json:"scope"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	ToRevision         *string         `json:"toRevision"`
	ToGeneration       json.RawMessage `json:"toGeneration"`
	Actor              *string         `json:"actor"`
	Reason             *string         `json:"reason"`
	IdempotencyKey     *string         `json:"idempotencyKey"`
}

func requireDocument(doc json.RawMessage) error {
	if wire.IsNull(doc) {
		return wire.BadRequest("document is required")
	}
	return nil
}

// DecodeCreateRevision decodes and checks a POST {base}/admin/revisions body
// within lim. Errors are bad-request (limit-exceeded for a limit)
// *varplane.Error values naming the field. The body's actor is what the
// client says it acts for (OnBehalfOf); the request's Actor is the
// authenticated identity, set by the handler.
func DecodeCreateRevision(body []byte, lim varplane.Limits) (varplane.CreateRevisionRequest, error) {
	var b createBody
	if err := wire.DecodeStrict(body, &b, lim); err != nil {
		return varplane.CreateRevisionRequest{}, err
	}
	scope, err := wire.RequiredScope("scope", b.Scope)
	if err != nil {
		return varplane.CreateRevisionRequest{}, err
	}
	if err := requireDocument(b.Document); err != nil {
		return varplane.CreateRevisionRequest{}, err
	}
	return varplane.CreateRevisionRequest{
		Scope: scope, Document: b.Document, SchemaID: wire.Optional(b.SchemaID),
		SchemaVersion: wire.Optional(b.SchemaVersion), OnBehalfOf: wire.Optional(b.Actor),
		Reason: wire.Optional(b.Reason), IdempotencyKey: wire.Optional(b.IdempotencyKey),
	}, nil
}

// DecodeValidate decodes and checks a POST {base}/admin/validate body; scope
// is optional there. Errors as DecodeCreateRevision.
func DecodeValidate(body []byte, lim varplane.Limits) (varplane.ValidateRequest, error) {
	var b validateBody
	if err := wire.DecodeStrict(body, &b, lim); err != nil {
		return varplane.ValidateRequest{}, err
	}
	if err := requireDocument(b.Document); err != nil {
		return varplane.ValidateRequest{}, err
	}
	req := varplane.ValidateRequest{Document: b.Document, SchemaID: wire.Optional(b.SchemaID)}
	if b.Scope != nil {
		scope, err := wire.ScopeField("scope", *b.Scope)
		if err != nil {
			return varplane.ValidateRequest{}, err
		}
		req.Scope = scope
	}
	return req, nil
}

// DecodeActivate decodes and checks a POST {base}/admin/activate body.
// Errors as DecodeCreateRevision.
func DecodeActivate(body []byte, lim varplane.Limits) (varplane.ActivateRequest, error) {
	var b activateBody
	if err := wire.DecodeStrict(body, &b, lim); err != nil {
		return varplane.ActivateRequest{}, err
	}
	scope, err := wire.RequiredScope("scope", b.Scope)
	if err != nil {
		return varplane.ActivateRequest{}, err
	}
	if b.Revision == nil {
		return varplane.ActivateRequest{}, wire.BadRequest("revision is required")
	}
	rev, err := varplane.ParseRevision(*b.Revision)
	if err != nil {
		return varplane.ActivateRequest{}, wire.BadRequest("revision: %s", varplane.ErrorMessage(err))
	}
	gen, err := wire.RequiredGeneration("expectedGeneration", b.ExpectedGeneration)
	if err != nil {
		return varplane.ActivateRequest{}, err
	}
	return varplane.ActivateRequest{
		Scope: scope, Revision: rev, ExpectedGeneration: gen, OnBehalfOf: wire.Optional(b.Actor),
		Reason: wire.Optional(b.Reason), IdempotencyKey: wire.Optional(b.IdempotencyKey),
	}, nil
}

// DecodeDeactivate decodes and checks a POST {base}/admin/deactivate body.
// Errors as DecodeCreateRevision.
func DecodeDeactivate(body []byte, lim varplane.Limits) (varplane.DeactivateRequest, error) {
	var b deactivateBody
	if err := wire.DecodeStrict(body, &b, lim); err != nil {
		return varplane.DeactivateRequest{}, err
	}
	scope, err := wire.RequiredScope("scope", b.Scope)
	if err != nil {
		return varplane.DeactivateRequest{}, err
	}
	gen, err := wire.RequiredGeneration("expectedGeneration", b.ExpectedGeneration)
	if err != nil {
		return varplane.DeactivateRequest{}, err
	}
	return varplane.DeactivateRequest{
		Scope: scope, ExpectedGeneration: gen, OnBehalfOf: wire.Optional(b.Actor),
		Reason: wire.Optional(b.Reason), IdempotencyKey: wire.Optional(b.IdempotencyKey),
		Force: b.Force != nil && *b.Force,
	}, nil
}

// DecodeRollback decodes and checks a POST {base}/admin/rollback body. At
// most one of toRevision and toGeneration may be given. Errors as
// DecodeCreateRevision.
func DecodeRollback(body []byte, lim varplane.Limits) (varplane.RollbackRequest, error) {
	var b rollbackBody
	if err := wire.DecodeStrict(body, &b, lim); err != nil {
		return varplane.RollbackRequest{}, err
	}
	scope, err := wire.RequiredScope("scope", b.Scope)
	if err != nil {
		return varplane.RollbackRequest{}, err
	}
	gen, err := wire.RequiredGeneration("expectedGeneration", b.ExpectedGeneration)
	if err != nil {
		return varplane.RollbackRequest{}, err
	}
	req := varplane.RollbackRequest{
		Scope: scope, ExpectedGeneration: gen, OnBehalfOf: wire.Optional(b.Actor),
		Reason: wire.Optional(b.Reason), IdempotencyKey: wire.Optional(b.IdempotencyKey),
	}
	if b.ToRevision != nil && !wire.IsNull(b.ToGeneration) {
		return varplane.RollbackRequest{}, wire.BadRequest("give toRevision or toGeneration, not both")
	}
	if b.ToRevision != nil {
		rev, err := varplane.ParseRevision(*b.ToRevision)
		if err != nil {
			return varplane.RollbackRequest{}, wire.BadRequest("toRevision: %s", varplane.ErrorMessage(err))
		}
		req.ToRevision = rev
	}
	if !wire.IsNull(b.ToGeneration) {
		to, err := wire.Generation("toGeneration", b.ToGeneration)
		if err != nil {
			return varplane.RollbackRequest{}, err
		}
		req.ToGeneration = &to
	}
	return req, nil
}
