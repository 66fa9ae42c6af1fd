package httpapi

import (
	"log/slog"
	"sync"

	"github.com/varplane/varplane"
)

// warnAllowAll makes the warning of a handler built without an authorizer
// one per process, however many handlers an embedder builds.
var warnAllowAll sync.Once

// defaultAuthorizer is the authorizer of a handler built without one:
// varplane.AllowAll, with a warning on log the first time. A server that
// allows everything on purpose passes varplane.AllowAll itself and says so
// in its own words (varplane serve points at --tokens).
func defaultAuthorizer(log *slog.Logger) varplane.Authorizer {
	warnAllowAll.Do(func() {
		log.Warn("no authorizer configured: every request is allowed (set Options.Authorizer, for example to an access.Scoped of a tokens file)")
	})
	return varplane.AllowAll
}
