package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// ReplayCommand shows a scope as of a generation: GET {base}/admin/replay.
type ReplayCommand struct {
	m *Main
}

// Run parses args and prints the replayed head. A store without a log answers
// store-unsupported (exit 1).
func (c *ReplayCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("replay", "SCOPE --to-generation N [flags]", `
Time travel: show what a scope served right after generation N, rebuilt from
the store's log. Only persistent stores (file, redis) keep the log; the memory
store answers store-unsupported. SCOPE may also be given as --scope.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to replay (or the first argument)")
	var gen uintFlag
	fs.Var(&gen, "to-generation", "generation to replay to (required)")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := scopeArg(pos, scope); err != nil {
		return err
	}
	if err := requireScope(*scope); err != nil {
		return err
	}
	if !gen.set {
		return usagef("--to-generation is required")
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	out, err := a.Replay(ctx, varplane.Scope(*scope), varplane.Generation(gen.value))
	if err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		w := c.m.Stdout
		if !out.Active {
			_, err := fmt.Fprintf(w, "%s at generation %d: no head (served nothing)\n", out.Scope, out.Generation)
			return err
		}
		at := "-"
		if out.EffectiveAt != nil {
			at = shortTime(*out.EffectiveAt)
		}
		fmt.Fprintf(w, "%s at generation %d: revision %s (effective %s)\n", out.Scope, out.Generation, out.Revision, at)
		if out.SchemaID != "" {
			fmt.Fprintf(w, "schemaId: %s\n", out.SchemaID)
		}
		return printJSON(w, out.Document)
	})
}
