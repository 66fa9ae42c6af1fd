package varplane

import (
	"errors"
	"fmt"
)

// Code is a stable machine-readable error code. Codes are part of the API:
// they appear on the wire as the "code" field of every error body, and clients
// branch on them. They never change meaning.
type Code string

// The error codes of the API.
const (
	CodeBadRequest        Code = "bad-request"
	CodeNoHead            Code = "no-head"
	CodeNotFound          Code = "not-found"
	CodeRevisionInvalid   Code = "revision-invalid"
	CodeRevisionConflict  Code = "revision-conflict"
	CodePayloadTooLarge   Code = "payload-too-large"
	CodeStoreUnsupported  Code = "store-unsupported"
	CodeStoreUnavailable  Code = "store-unavailable"
	CodeForbidden         Code = "forbidden"
	CodeUnauthorized      Code = "unauthorized"
	CodeIdempotencyReused Code = "idempotency-key-reused"
	CodeTooManyRequests   Code = "too-many-subscribers"
	CodeInternal          Code = "internal"

	// CodeLimitExceeded: a document or body passes one of the Limits other
	// than its size (depth, string, number, members); the error names it.
	CodeLimitExceeded Code = "limit-exceeded"
	// CodeUnsupportedMediaType: a write route was sent a Content-Type it
	// does not take.
	CodeUnsupportedMediaType Code = "unsupported-media-type"
	// CodeMethodNotAllowed: the route exists but not for this method.
	CodeMethodNotAllowed Code = "method-not-allowed"
	// CodeScopeOwned: the scope belongs to a subsystem (the values service,
	// reviewed changes, access control) and is written only through its API.
	CodeScopeOwned Code = "scope-owned"
	// CodeUnknownComponent and CodeInvalidConfiguration are the values
	// service's refusals (seed 001's UNKNOWN_COMPONENT and
	// INVALID_CONFIGURATION).
	CodeUnknownComponent     Code = "unknown-component"
	CodeInvalidConfiguration Code = "invalid-configuration"
	// CodeRevisionReclaimed: the generation existed but its revision's body
	// was reclaimed (retention); its metadata may still be listed.
	CodeRevisionReclaimed Code = "revision-reclaimed"
	// CodeChangeRequired: the scope is under a review policy, so its head
	// changes only by publishing an approved change request.
	CodeChangeRequired Code = "change-required"
	// CodeCanaryWindowOpen: a canary window cannot open on a scope that
	// already has one open (one staging slot per scope); the error names
	// the scope and the change whose window holds it (Error.Change).
	CodeCanaryWindowOpen Code = "canary-window-open"
	// CodeChangeState: a change request is not in a state that allows the
	// transition asked for (approving a rejected change, say).
	CodeChangeState Code = "change-state"
	// CodeDocumentFailed: the scope's document cannot be used: the store
	// holds a value that cannot be decoded, the decoder of an instance
	// refused it, or its head disappeared from the store after it was seen.
	// Reads fail closed (503) until a usable revision is in the store.
	CodeDocumentFailed Code = "document-failed"
	// CodeDocumentStale: the scope is held to a maximum lag (an instance's
	// fail-closed prefixes) and its document, or the root's, has not been
	// confirmed by the store for longer than that.
	CodeDocumentStale Code = "document-stale"
	// CodeNotReady: the instance has not installed its root document yet, so
	// it answers nothing rather than an empty document.
	CodeNotReady Code = "not-ready"
	// CodeOutcomeUnknown: the store was sent the commit and its answer was
	// lost (a timeout or a connection lost after a Redis script or a
	// PostgreSQL statement was sent, an fdatasync that failed after the
	// write), so the write may or may not have happened. Unlike
	// store-unavailable, which promises that nothing changed, it tells the
	// client to find out: re-read the head (or history), or send the same
	// request again with the same idempotency key, which answers the first
	// result if it did commit.
	CodeOutcomeUnknown Code = "outcome-unknown"
	// CodeCheckUnavailable: a check the operator runs outside the server
	// (a webhook, `serve --check`) did not answer a result, so the
	// proposal was not recorded; nothing changed. Try again when it
	// answers.
	CodeCheckUnavailable Code = "check-unavailable"
	// CodeTargetingKeyMissing: an OpenFeature evaluation of a scope whose
	// revision is chosen per targeting key (a progressive rollout) came
	// without one. OFREP answers it TARGETING_KEY_MISSING.
	CodeTargetingKeyMissing Code = "targeting-key-missing"
	// CodeConfirmationRequired: a deactivation would clear a scope that
	// instances installed in the last hour (deletion protection,
	// docs/rollouts.md); the message names them with when each last said
	// so, nothing changed, and the same request with force
	// goes ahead.
	CodeConfirmationRequired Code = "confirmation-required"
)

// Error is the one error type of the domain. Its Code decides the HTTP status
// and gRPC code (mapped in one place per transport); Message is safe to show to
// a client; the optional fields carry details for specific codes.
type Error struct {
	Code    Code
	Message string

	// Scope, Expected and Current are set for revision-conflict.
	Scope    Scope
	Expected *Generation
	Current  *Generation

	// Issues is set for revision-invalid (and the values service's
	// invalid-configuration).
	Issues []Issue

	// Limit names the limit passed, for limit-exceeded.
	Limit string

	// Change names the change request the error is about, for
	// canary-window-open (the change whose window holds the scope).
	Change string

	// Hint is an optional sentence that helps the caller recover (the base a
	// server is mounted under, say); it is safe to show.
	Hint string

	// Err is the underlying cause, kept for logs and errors.Is; it is never
	// sent to a client.
	Err error
}

// Error returns the message, prefixed by the code.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, ErrConflict) holds for every conflict whatever its details.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == ""
}

// Sentinels to branch on with errors.Is. They carry only a code.
var (
	ErrBadRequest       = &Error{Code: CodeBadRequest}
	ErrNoHead           = &Error{Code: CodeNoHead}
	ErrNotFound         = &Error{Code: CodeNotFound}
	ErrInvalid          = &Error{Code: CodeRevisionInvalid}
	ErrConflict         = &Error{Code: CodeRevisionConflict}
	ErrUnsupported      = &Error{Code: CodeStoreUnsupported}
	ErrUnavailable      = &Error{Code: CodeStoreUnavailable}
	ErrForbidden        = &Error{Code: CodeForbidden}
	ErrIdempotencyReuse = &Error{Code: CodeIdempotencyReused}
	// ErrReclaimed is returned by Store.Revision for a revision whose record
	// was once stored but whose body has been reclaimed by retention. A
	// store that reclaims must keep enough to tell this apart from a
	// revision that never existed (ErrNotFound).
	ErrReclaimed = &Error{Code: CodeRevisionReclaimed}
	// ErrChangeRequired matches the refusal of a direct write to a scope
	// under a review policy.
	ErrChangeRequired = &Error{Code: CodeChangeRequired}
	// ErrOutcomeUnknown matches a write whose outcome the store could not
	// learn (CodeOutcomeUnknown).
	ErrOutcomeUnknown = &Error{Code: CodeOutcomeUnknown}
)

// Store-level sentinels: conditions a Store reports to the Engine, which turns
// them into results or API errors.
var (
	// ErrRevisionExists is returned by Store.Append for a revision-created
	// event whose (scope, revision) is already stored. Nothing is appended.
	ErrRevisionExists = errors.New("varplane: revision already exists")
	// ErrDuplicateIdempotencyKey is returned by Store.Append when the event's
	// idempotency key is already recorded. Nothing is appended.
	ErrDuplicateIdempotencyKey = errors.New("varplane: idempotency key already recorded")
	// ErrLeaseHeld is returned by Store.AcquireLease when another holder
	// holds the lease and it has not expired. Nothing is changed.
	ErrLeaseHeld = errors.New("varplane: lease is held by another holder")
	// ErrLeaseLost is returned by Store.RenewLease and Store.ReleaseLease
	// when the lease is not held by the holder given (it expired, was
	// released, or another holder took it). Nothing is changed.
	ErrLeaseLost = errors.New("varplane: lease is not held by this holder")
	// ErrClosed is returned by a Store after Close.
	ErrClosed = &Error{Code: CodeStoreUnavailable, Message: "store is closed"}
)

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ConflictError returns the revision-conflict error for scope: the caller
// expected generation expected, the scope is at current.
func ConflictError(scope Scope, expected, current Generation) *Error {
	return &Error{
		Code:     CodeRevisionConflict,
		Message:  fmt.Sprintf("scope %q is at generation %d, not %d", scope, current, expected),
		Scope:    scope,
		Expected: &expected,
		Current:  &current,
	}
}

// Unavailable wraps err as a store-unavailable error: the store of record
// could not be reached, and nothing was changed.
func Unavailable(err error) *Error {
	return &Error{Code: CodeStoreUnavailable, Message: "the store is unavailable", Err: err}
}

// OutcomeUnknown wraps err as an outcome-unknown error: the commit was sent
// to the store of record, or written, and its outcome was not learnt, so it
// may have happened. A store returns it only then; an error that certainly
// changed nothing is Unavailable.
func OutcomeUnknown(err error) *Error {
	return &Error{Code: CodeOutcomeUnknown, Message: "the store may or may not have committed the write: re-read, or repeat it with the same idempotency key", Err: err}
}

// AfterCommit is the error of a request whose own commit already landed (a
// revision stored, a claim recorded, a candidate staged) when err stopped
// it: store-unavailable, which promises that nothing changed, becomes
// outcome-unknown with message (what is stored, how to finish); any other
// error is returned as it is. A 503 is never answered for a write that is
// found done.
func AfterCommit(err error, message string) error {
	if ErrorCode(err) != CodeStoreUnavailable {
		return err
	}
	return &Error{Code: CodeOutcomeUnknown, Message: message, Err: err}
}

// ErrorCode returns the code of err: the Code of the first *Error in its
// chain, or CodeInternal for anything else (including nil-free unknown errors).
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the client-safe message of err: the Message of its
// *Error, or "internal error" for anything else, so that internal details never
// reach a client.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code != CodeInternal {
		if e.Message == "" {
			return string(e.Code)
		}
		return e.Message
	}
	return "internal error"
}
