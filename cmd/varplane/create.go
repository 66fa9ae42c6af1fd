package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// CreateCommand stores a document as a revision: POST {base}/admin/revisions.
type CreateCommand struct {
	m *Main
}

// Run parses args and creates the revision. A document the server finds
// invalid is a *varplane.Error with code revision-invalid and its issues.
func (c *CreateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("create", "SCOPE [-f FILE] [flags]", `
Store a document as a new immutable revision of a scope. The revision is the
SHA-256 of the document's canonical JSON, so creating the same document twice
returns the same revision (reported as unchanged). Creating does not activate:
use "varplane activate" with the printed revision, or "varplane set" to do
both in one commit. SCOPE may also be given as --scope.

The document is read from -f FILE (--file), or from stdin when absent or "-".
It may be JSON or YAML (a .yaml/.yml file, or any input that is not JSON).
YAML is read by the YAML 1.2 core schema, as the server reads it: an integer
with a leading zero (010) is refused as ambiguous (write 10, 0o10 or "010"),
and anchors, aliases and merge keys are refused.`)
	var cf clientFlags
	var mf mutationFlags
	cf.register(fs, c.m.Getenv)
	mf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope of the document, e.g. agentic.lanes.vinci (or the first argument)")
	file := fileFlag(fs)
	schemaID := fs.String("schema-id", "", "schemaId to validate the document against")
	schemaVersion := fs.String("schema-version", "", "schema version, recorded with the revision")
	a, err := c.m.openScoped(fs, &cf, args, scope)
	if err != nil {
		return err
	}
	doc, err := readDocument(*file, c.m.Stdin)
	if err != nil {
		return err
	}
	out, err := a.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: varplane.Scope(*scope), Document: doc,
		SchemaID: *schemaID, SchemaVersion: *schemaVersion, Actor: mf.actor, Reason: mf.reason, IdempotencyKey: mf.idempotencyKey})
	if err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		verb := "created"
		if !out.Created {
			verb = "unchanged (revision already stored)"
		}
		_, err := fmt.Fprintf(c.m.Stdout, "%s %s revision %s\n  scope is at generation %d; activate with: varplane activate %s --revision %s --expected-generation %d\n",
			verb, out.Scope, out.Revision, out.Generation, out.Scope, out.Revision, out.Generation)
		return err
	})
}
