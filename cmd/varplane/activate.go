package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// ActivateCommand makes a stored revision a scope's head:
// POST {base}/admin/activate.
type ActivateCommand struct {
	m *Main
}

// Run parses args and activates. A stale --expected-generation is a
// revision-conflict *varplane.Error carrying currentGeneration.
func (c *ActivateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("activate", "SCOPE --revision REV --expected-generation N [flags]", `
Make a stored revision the head of a scope, at the next generation. The
activation happens only when the scope is still at --expected-generation (the
generation you last saw: 0 for a scope never activated); otherwise the server
answers revision-conflict with the current generation and nothing changes.
REV is sha256:… as create prints it, or a unique prefix of its digits (as
history shows it); it may also be the second argument. --dry-run asks the
server whether it would activate, and changes nothing.`)
	g := guardedFlags{required: true}
	g.register(fs, c.m.Getenv, "activate")
	revision := fs.String("revision", "", "revision to activate: sha256:… or a unique prefix (required)")
	dryRun := dryRunFlag(fs)
	pos, err := parseArgs(fs, args, 2)
	if err != nil {
		return err
	}
	if err := scopeArg(pos, &g.scope); err != nil {
		return err
	}
	if len(pos) == 2 {
		if err := scopeArg(pos[1:], revision); err != nil {
			return err
		}
	}
	if err := g.check(); err != nil {
		return err
	}
	if err := requireFlag("revision", *revision); err != nil {
		return err
	}
	a, err := g.admin(c.m)
	if err != nil {
		return err
	}
	scope := varplane.Scope(g.scope)
	rev, err := resolveRevision(ctx, a, scope, *revision)
	if err != nil {
		return err
	}
	out, err := a.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev, ExpectedGeneration: varplane.Generation(g.expected.value),
		Actor: g.actor, Reason: g.reason, IdempotencyKey: g.idempotencyKey, DryRun: *dryRun})
	if err != nil {
		return classify(ctx, wouldBeRefused("activate", *dryRun, err))
	}
	return emit(c.m.Stdout, g.json(), out, func() error { return printActivation(c.m, "activated", out) })
}

// printActivation writes what an activation (verb: activated, rolled
// back) did, or, for a dry run, what it would do.
func printActivation(m *Main, verb string, out varplane.ActivationResult) error {
	if out.DryRun {
		fmt.Fprintf(m.Stdout, "would be %s: %s generation %d revision %s\n", verb, out.Scope, out.Generation, out.Revision)
		return dryNote(m)
	}
	_, err := fmt.Fprintf(m.Stdout, "%s %s generation %d revision %s\n", verb, out.Scope, out.Generation, out.Revision)
	return err
}
