package varplane

import "fmt"

// CheckRollbackMark refuses (bad-request) an event whose RollbackOf is set
// where no rollback can be: on any event but an activation, or naming a
// generation that is not before the event's own. Every store checks it
// before it commits an event, so that the mark a history shows is one a
// rollback wrote.
func CheckRollbackMark(ev *Event) error {
	if ev.RollbackOf == 0 || (ev.Kind == EventActivated && ev.RollbackOf < ev.Generation) {
		return nil
	}
	return &Error{Code: CodeBadRequest, Scope: ev.Scope, Message: fmt.Sprintf(
		"%s event for scope %q at generation %d names rollbackOf %d: only an activation rolls back, and only an earlier generation", ev.Kind, ev.Scope, ev.Generation, ev.RollbackOf)}
}
