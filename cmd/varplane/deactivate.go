package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/varplane/varplane"
)

// DeactivateCommand clears a scope's head and its subtree:
// POST {base}/admin/deactivate.
type DeactivateCommand struct {
	m *Main
}

// Run parses args and deactivates. A stale --expected-generation is a
// revision-conflict *varplane.Error. With --dry-run the server checks the
// deactivation as it would commit it and answers what it would clear, or
// the refusal the commit would meet; in a terminal, a cascade asks first
// unless --yes, listing what the server's dry run found.
func (c *DeactivateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("deactivate", "SCOPE [--expected-generation N] [--dry-run] [--yes] [flags]", `
Clear the head of a scope so that it serves nothing, together with every active
descendant (deactivating "a" clears "a.b" and "a.b.c") in one atomic commit.
Each cleared scope takes its own next generation. Guarded by
--expected-generation; without it the scope's current generation is read
first (and said on stderr).

--dry-run asks the server to check the deactivation as it would commit it
(your token's rights, review policies and owned scopes over the whole
cascade, the generation) and lists the scopes it would clear; it changes
nothing, and exits 1 with the refusal when the deactivation would be
refused. When stdin is a terminal and the commit would clear more than one
active scope, deactivate asks for confirmation first; --yes skips the question
(scripts never get it).

Deletion protection: while instances held the scope or a scope below it in
the last hour (a status of theirs written in the last hour lists it, whether
they are live now or were last seen minutes ago), the server refuses with
confirmation-required naming each with when it last said so, e.g.
"web-3 (12 min ago)" (a dry run says so too). In a terminal
deactivate shows them and asks you to type the scope to go ahead; a script
is refused (exit 1) unless it passes --force.`)
	var g guardedFlags
	g.register(fs, c.m.Getenv, "deactivate")
	dryRun := dryRunFlag(fs)
	yes := fs.Bool("yes", false, "do not ask for confirmation of a cascade")
	force := fs.Bool("force", false, "deactivate even while instances held the scope in the last hour (deletion protection)")
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
	a, err := g.admin(c.m)
	if err != nil {
		return err
	}
	scope := varplane.Scope(g.scope)
	// Read before the cascade is listed, so that the question shows what
	// the guarded commit will clear.
	expected, err := g.generation(ctx, c.m, a, "deactivate")
	if err != nil {
		return err
	}
	req := varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: expected,
		Actor: g.actor, Reason: g.reason, IdempotencyKey: g.idempotencyKey, Force: *force}
	refused := func(dry bool, err error) error {
		// The refusal names the scope under the policy: the scope itself
		// or one its cascade would clear.
		under := scope
		var ve *varplane.Error
		if errors.As(err, &ve) && ve.Scope != "" {
			under = ve.Scope
		}
		hint := fmt.Sprintf("%s is under a review policy, and a deactivation does not go through review: deactivate the scopes outside the policy one by one, or see `varplane policy get %s`", under, under)
		if under == scope {
			hint = fmt.Sprintf("%s is under a review policy, and a deactivation does not go through review: see `varplane policy get %s`; whoever manages the policies can lift it (`varplane policy delete`) for the deactivation", scope, scope)
		}
		return classify(ctx, wouldBeRefused("deactivate", dry, underPolicy(err, hint)))
	}
	terminal := c.m.terminal
	if terminal == nil {
		terminal = isTerminal
	}
	ask := !*yes && !*dryRun && terminal(c.m.Stdin)
	if *dryRun || ask {
		dry := req
		dry.DryRun = true
		plan, err := a.Deactivate(ctx, dry)
		switch {
		case ask && varplane.ErrorCode(err) == varplane.CodeConfirmationRequired:
			// Deletion protection: the write below meets it and asks
			// for the scope's name instead of the cascade's yes.
		case err != nil:
			// Asked before the question: the write itself would meet
			// this refusal, so it is the write's (a dry run's only when
			// the user asked for one).
			return refused(*dryRun, err)
		case *dryRun:
			return emit(c.m.Stdout, g.json(), plan, func() error { return printDeactivation(c.m, plan) })
		case len(plan.Cascade)+btoi(plan.WasActive) > 1:
			n := len(plan.Cascade) + btoi(plan.WasActive)
			fmt.Fprintf(c.m.Stderr, "deactivate %s clears %d active scopes:\n", scope, n)
			if plan.WasActive {
				fmt.Fprintf(c.m.Stderr, "  %s (to generation %d)\n", scope, plan.Generation)
			}
			for _, s := range plan.Cascade {
				fmt.Fprintf(c.m.Stderr, "  %s (to generation %d)\n", s.Scope, s.Generation)
			}
			fmt.Fprint(c.m.Stderr, "proceed? [y/N] ")
			line, _ := bufio.NewReader(c.m.Stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
				return &refusedError{msg: "deactivate: not confirmed; nothing changed"}
			}
		}
	}
	out, err := a.Deactivate(ctx, req)
	if varplane.ErrorCode(err) == varplane.CodeConfirmationRequired {
		if !terminal(c.m.Stdin) {
			var se *varplane.Error
			if errors.As(err, &se) && se.Hint == "" {
				se.Hint = "pass --force to deactivate anyway"
			}
			return classify(ctx, err)
		}
		fmt.Fprintf(c.m.Stderr, "%s\ntype %s to deactivate it anyway: ", varplane.ErrorMessage(err), scope)
		line, _ := bufio.NewReader(c.m.Stdin).ReadString('\n')
		if strings.TrimSpace(line) != string(scope) {
			return &refusedError{msg: "deactivate: not confirmed; nothing changed"}
		}
		req.Force = true
		out, err = a.Deactivate(ctx, req)
	}
	if err != nil {
		return refused(false, err)
	}
	return emit(c.m.Stdout, g.json(), out, func() error { return printDeactivation(c.m, out) })
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
