package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// StatusCommand shows a scope's state: GET {base}/admin/status.
type StatusCommand struct {
	m *Main
}

// Run parses args and prints the status of the scope.
func (c *StatusCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("status", "SCOPE [flags]", `
Show whether a scope has an active head, its generation (the value to pass as
--expected-generation to the next activate, deactivate or rollback), its
revision, the store serving it and its last rejected revision. SCOPE may also
be given as --scope.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to inspect (or the first argument)")
	a, err := c.m.openScoped(fs, &cf, args, scope)
	if err != nil {
		return err
	}
	st, err := a.Status(ctx, varplane.Scope(*scope))
	if err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), st, func() error {
		w := c.m.Stdout
		state := "inactive (serves nothing)"
		if st.Active {
			state = "active"
		}
		fmt.Fprintf(w, "scope:       %s\n", st.Scope)
		fmt.Fprintf(w, "state:       %s\n", state)
		fmt.Fprintf(w, "generation:  %d\n", st.Generation)
		if st.Revision != "" {
			fmt.Fprintf(w, "revision:    %s\n", st.Revision)
		}
		fmt.Fprintf(w, "source:      %s\n", st.Source)
		if r := st.LastRejected; r != nil {
			fmt.Fprintf(w, "rejected:    %s (%s)\n", r.RejectionReason, shortTime(r.Timestamp))
		}
		if st.Chain.Seq > 0 {
			fmt.Fprintf(w, "chain:       seq %d %s\n", st.Chain.Seq, st.Chain.Hash)
		}
		return nil
	})
}
