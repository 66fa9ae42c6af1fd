package ui

import (
	"errors"
	"fmt"

	"github.com/varplane/varplane"
)

// Sentence says err in words for an operator: one sentence per error code,
// with the server's own client-safe message where it adds something. An
// internal error says nothing of its cause.
func Sentence(err error) string {
	var ve *varplane.Error
	if !errors.As(err, &ve) || ve.Code == varplane.CodeInternal {
		return "Something went wrong on the server; nothing more is shown here (the server's log has the cause)."
	}
	msg := varplane.ErrorMessage(ve)
	switch ve.Code {
	case varplane.CodeBadRequest:
		return "The request was not understood: " + msg + "."
	case varplane.CodeNoHead:
		return "This scope serves nothing: it was never activated, or it was deactivated."
	case varplane.CodeNotFound:
		return "Not found: " + msg + "."
	case varplane.CodeRevisionInvalid:
		return "The document does not pass validation; nothing was published. The issues are listed on the document."
	case varplane.CodeRevisionConflict:
		if ve.Current != nil && ve.Expected != nil {
			return fmt.Sprintf("Someone changed this scope first: it is at generation %d, not %d. Nothing was written; look at the new head and try again.", *ve.Current, *ve.Expected)
		}
		return "Someone changed this scope first; nothing was written. Look at the new head and try again."
	case varplane.CodePayloadTooLarge:
		return "The document is larger than the server accepts."
	case varplane.CodeLimitExceeded:
		return "The document passes one of the server's limits (" + ve.Limit + "): " + msg + "."
	case varplane.CodeStoreUnsupported:
		return "The server's store cannot do this: " + msg + "."
	case varplane.CodeStoreUnavailable:
		return "The store is unreachable right now; nothing was changed. Try again in a moment."
	case varplane.CodeForbidden:
		// The server's message names the right that is missing.
		return "Your token is not allowed to do this (" + msg + "). Sign in with a token that has that right, or ask whoever manages the tokens to grant it."
	case varplane.CodeUnauthorized:
		return "You need to sign in with a token to see this."
	case varplane.CodeIdempotencyReused:
		return "This request repeats an earlier one with different content; nothing was written."
	case varplane.CodeTooManyRequests:
		return "The server has as many live streams as it allows; try again later."
	case varplane.CodeScopeOwned:
		return "This scope belongs to a subsystem and changes only through it (" + msg + ")."
	case varplane.CodeChangeRequired:
		return "This scope is under a review policy: propose a change and have it approved instead."
	case varplane.CodeChangeState:
		return "The change is not in a state that allows this: " + msg + "."
	case varplane.CodeRevisionReclaimed:
		return "That generation's document is no longer kept (retention)."
	case varplane.CodeConfirmationRequired:
		return "Instances read this scope in the last hour, so it was not deactivated: " + msg + "."
	case varplane.CodeUnknownComponent:
		return "No such component: " + msg + "."
	case varplane.CodeInvalidConfiguration:
		return "The configuration does not pass its schema; see the issues."
	}
	return "The server refused: " + msg + "."
}
