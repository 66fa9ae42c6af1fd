package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// SetCommand stores a document and makes it a scope's head in one commit:
// POST {base}/admin/publish.
type SetCommand struct {
	m *Main
}

// Run parses args and publishes. A document the server finds invalid is a
// *varplane.Error with code revision-invalid; a scope that moved is
// revision-conflict carrying currentGeneration, and nothing changes.
func (c *SetCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("set", "SCOPE [-f FILE] [--expected-generation N] [flags]", `
Store a document as a revision of SCOPE (or find it stored) and make it the
head, in one commit that is all or nothing; it prints the new generation.
With --expected-generation the commit happens only when the scope is still
at that generation; without it, set reads the scope's generation first, says
so on stderr, and publishes against that, so a commit made in between is
still refused (revision-conflict), never overwritten.

The document is read from -f FILE (--file), or from stdin when absent or "-".
It may be JSON or YAML, as for create. SCOPE may also be given as --scope.
--dry-run asks the server whether it would publish (the document validated,
the rights, policies and generation checked), and changes nothing.`)
	var cf clientFlags
	var mf mutationFlags
	var expected uintFlag
	cf.register(fs, c.m.Getenv)
	mf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to set, e.g. agentic.lanes.vinci (or the first argument)")
	file := fileFlag(fs)
	fs.Var(&expected, "expected-generation", "generation the scope must be at (default: its current one, read first)")
	schemaID := fs.String("schema-id", "", "schemaId to validate the document against")
	schemaVersion := fs.String("schema-version", "", "schema version, recorded with the revision")
	dryRun := dryRunFlag(fs)
	a, err := c.m.openScoped(fs, &cf, args, scope)
	if err != nil {
		return err
	}
	doc, err := readDocument(*file, c.m.Stdin)
	if err != nil {
		return err
	}
	sc := varplane.Scope(*scope)
	if !expected.set {
		gen, err := readGeneration(ctx, c.m, a, sc, "set", cf.json())
		if err != nil {
			return err
		}
		expected.value = uint64(gen)
	}
	out, err := a.Publish(ctx, varplane.PublishRequest{Scope: sc, Document: doc, ExpectedGeneration: varplane.Generation(expected.value),
		SchemaID: *schemaID, SchemaVersion: *schemaVersion, Actor: mf.actor, Reason: mf.reason, IdempotencyKey: mf.idempotencyKey, DryRun: *dryRun})
	if err != nil {
		return classify(ctx, wouldBeRefused("set", *dryRun, underPolicy(err, fmt.Sprintf("%s is under a review policy: propose the document as a change with `varplane change propose %s -f FILE`, then have it approved and published", sc, sc))))
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		how := "created"
		if !out.Created {
			how = "already stored"
		}
		if out.DryRun {
			if out.Created {
				how = "would be created"
			}
			fmt.Fprintf(c.m.Stdout, "would set %s generation %d revision %s (%s)\n", out.Scope, out.Generation, out.Revision, how)
			return dryNote(c.m)
		}
		_, err := fmt.Fprintf(c.m.Stdout, "set %s generation %d revision %s (%s)\n", out.Scope, out.Generation, out.Revision, how)
		return err
	})
}
