package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// RollbackCommand re-activates an earlier revision as a new generation:
// POST {base}/admin/rollback.
type RollbackCommand struct {
	m *Main
}

// Run parses args and rolls back. A missing target is a not-found
// *varplane.Error, a stale generation a revision-conflict one.
func (c *RollbackCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("rollback", "SCOPE [--expected-generation N] [--to-revision REV | --to-generation G] [flags]", `
Re-activate an earlier revision of a scope as a NEW generation: history only
grows. The target is --to-revision (sha256:… or a unique prefix of its
digits), or the revision activated at --to-generation, or by default the
revision that was active before the current one. Guarded by
--expected-generation; without it the scope's current generation is read
first (and said on stderr). A scope under a review policy refuses a direct
rollback: propose it with varplane change rollback. --dry-run asks the
server whether it would roll back (and to what), and changes nothing.`)
	var g guardedFlags
	g.register(fs, c.m.Getenv, "roll back")
	toRevision := fs.String("to-revision", "", "revision to re-activate: sha256:… or a unique prefix")
	var toGeneration uintFlag
	fs.Var(&toGeneration, "to-generation", "re-activate the revision that generation G activated")
	dryRun := dryRunFlag(fs)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := scopeArg(pos, &g.scope); err != nil {
		return err
	}
	if err := requireScope(g.scope); err != nil {
		return err
	}
	if *toRevision != "" && toGeneration.set {
		return usagef("give --to-revision or --to-generation, not both")
	}
	a, err := g.admin(c.m)
	if err != nil {
		return err
	}
	scope := varplane.Scope(g.scope)
	expected, err := g.generation(ctx, c.m, a, "rollback")
	if err != nil {
		return err
	}
	req := varplane.RollbackRequest{Scope: scope, ExpectedGeneration: expected,
		Actor: g.actor, Reason: g.reason, IdempotencyKey: g.idempotencyKey, DryRun: *dryRun}
	if *toRevision != "" {
		if req.ToRevision, err = resolveRevision(ctx, a, scope, *toRevision); err != nil {
			return err
		}
	}
	if toGeneration.set {
		gen := varplane.Generation(toGeneration.value)
		req.ToGeneration = &gen
	}
	out, err := a.Rollback(ctx, req)
	if err != nil {
		target := ""
		if toGeneration.set {
			target = fmt.Sprintf(" --to-generation %d", toGeneration.value)
		}
		return classify(ctx, wouldBeRefused("rollback", *dryRun, underPolicy(err, fmt.Sprintf("%s is under a review policy: propose the rollback as a change with `varplane change rollback %s%s`, then have it approved and published", scope, scope, target))))
	}
	return emit(c.m.Stdout, g.json(), out, func() error { return printActivation(c.m, "rolled back", out) })
}
