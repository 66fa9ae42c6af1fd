package httpapi

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/varplane/varplane"
)

var (
	warnAllowAll sync.Once
	warnOut      io.Writer = os.Stderr // replaced by tests
)

func defaultAuthorizer() varplane.Authorizer {
	warnAllowAll.Do(func() {
		fmt.Fprintln(warnOut, "varplane: WARNING: no authorizer configured; every request is allowed (set httpapi.Options.Authorizer, e.g. from a tokens file)")
	})
	return varplane.AllowAll
}
