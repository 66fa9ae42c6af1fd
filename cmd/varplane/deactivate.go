package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
)

// DeactivateCommand clears a scope's head and its subtree:
// POST {base}/admin/deactivate.
type DeactivateCommand struct {
	m *Main
}

// Run parses args and deactivates. A stale --expected-generation is a
// revision-conflict *varplane.Error. With --dry-run it only lists what the
// cascade would clear; in a terminal, a cascade over more than one scope
// asks first unless --yes.
func (c *DeactivateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("deactivate", "SCOPE [--expected-generation N] [--dry-run] [--yes] [flags]", `
Clear the head of a scope so that it serves nothing, together with every active
descendant (deactivating "a" clears "a.b" and "a.b.c") in one atomic commit.
Each cleared scope takes its own next generation. Guarded by
--expected-generation; without it the scope's current generation is read
first (and said on stderr).

--dry-run lists the scopes the commit would clear (the scope and its active
descendants, as the server lists them now) and changes nothing. When stdin is
a terminal and the commit would clear more than one scope, deactivate asks
for confirmation first; --yes skips the question (scripts never get it).

Deletion protection: while live instances hold the scope or a scope below it
(their status in the last hour lists it), the server refuses with
confirmation-required naming them. In a terminal deactivate shows them and
asks you to type the scope to go ahead; a script is refused (exit 1) unless
it passes --force.`)
	var g guardedFlags
	g.register(fs, c.m.Getenv, "deactivate")
	dryRun := fs.Bool("dry-run", false, "list what would be deactivated; change nothing")
	yes := fs.Bool("yes", false, "do not ask for confirmation of a cascade")
	force := fs.Bool("force", false, "deactivate even while live instances hold the scope (deletion protection)")
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
	var expected varplane.Generation
	if !*dryRun {
		// Read before the cascade is listed, so that the question shows
		// what the guarded commit will clear.
		if expected, err = g.generation(ctx, c.m, a, "deactivate"); err != nil {
			return err
		}
	}
	terminal := c.m.terminal
	if terminal == nil {
		terminal = isTerminal
	}
	ask := !*yes && !*dryRun && terminal(c.m.Stdin)
	if *dryRun || ask {
		hit, err := c.cascade(ctx, a, scope)
		if err != nil {
			return err
		}
		if *dryRun {
			return emit(c.m.Stdout, g.json(), struct {
				Scope  varplane.Scope          `json:"scope"`
				Scopes []varplane.ScopeSummary `json:"scopes"`
			}{scope, hit}, func() error {
				if len(hit) == 0 {
					_, err := fmt.Fprintf(c.m.Stdout, "would deactivate nothing: neither %s nor any scope below it is active\n", scope)
					return err
				}
				for _, s := range hit {
					fmt.Fprintf(c.m.Stdout, "would deactivate %s (active at generation %d, revision %s)\n", s.Scope, s.Generation, shortRevision(string(s.Revision)))
				}
				return nil
			})
		}
		if len(hit) > 1 {
			fmt.Fprintf(c.m.Stderr, "deactivate %s clears %d active scopes:\n", scope, len(hit))
			for _, s := range hit {
				fmt.Fprintf(c.m.Stderr, "  %s (generation %d)\n", s.Scope, s.Generation)
			}
			fmt.Fprint(c.m.Stderr, "proceed? [y/N] ")
			line, _ := bufio.NewReader(c.m.Stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
				return &refusedError{msg: "deactivate: not confirmed; nothing changed"}
			}
		}
	}
	req := varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: expected,
		Actor: g.actor, Reason: g.reason, IdempotencyKey: g.idempotencyKey, Force: *force}
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
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, g.json(), out, func() error {
		fmt.Fprintf(c.m.Stdout, "deactivated %s generation %d\n", out.Scope, out.Generation)
		for _, d := range out.Cascade {
			fmt.Fprintf(c.m.Stdout, "  also deactivated %s generation %d\n", d.Scope, d.Generation)
		}
		return nil
	})
}

// cascade lists the active scopes a deactivation of scope would clear now:
// the scope itself and its active descendants, from the scope listing. The
// scope's status is read first: the listing leaves out what the token may
// not audit, and a token that may not audit the scope itself gets that
// refusal rather than an empty list.
func (c *DeactivateCommand) cascade(ctx context.Context, a *client.Admin, scope varplane.Scope) ([]varplane.ScopeSummary, error) {
	if _, err := a.Status(ctx, scope); err != nil {
		return nil, classify(ctx, err)
	}
	all, err := a.AllScopes(ctx, scope)
	if err != nil {
		return nil, classify(ctx, err)
	}
	hit := []varplane.ScopeSummary{}
	for _, s := range all {
		if s.Active {
			hit = append(hit, s)
		}
	}
	return hit, nil
}
