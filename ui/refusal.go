package ui

import (
	"errors"

	"github.com/varplane/varplane"
)

// refusal says, for a confirmation page, what refuses the write its form
// would send (the server's dry run of it answered err) and what to do
// instead. A refusal that names another scope than the page's (a scope of
// a deactivation's cascade) names it.
func refusal(err error, scope varplane.Scope) string {
	var ve *varplane.Error
	if errors.As(err, &ve) && ve.Scope != "" && ve.Scope != scope {
		switch ve.Code {
		case varplane.CodeChangeRequired:
			return "This would be refused: " + string(ve.Scope) + ", below " + string(scope) +
				", is under a review policy, and a deactivation does not go through review. Deactivate the scopes outside the policy one by one, or have the policy lifted (Policies)."
		case varplane.CodeScopeOwned:
			return "This would be refused: " + string(ve.Scope) + ", below " + string(scope) +
				", belongs to a subsystem and changes only through it (" + varplane.ErrorMessage(ve) + ")."
		}
	}
	return "This would be refused: " + Sentence(err)
}
