package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// ValidateCommand checks a document without storing it:
// POST {base}/admin/validate.
type ValidateCommand struct {
	m *Main
}

// Run parses args and validates the document. An invalid document is a
// refusal (exit 1) after its issues are printed.
func (c *ValidateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("validate", "[SCOPE] [-f FILE] [--schema-id ID] [flags]", `
Check a document as "varplane create" would, without storing anything. With a
scope (the first argument or --scope) under a schema binding (varplane
schema list) the document is checked against the bound schema, and
--schema-id naming another one is an issue; with a scope naming a group
(one segment, no dot) the group shape rule applies: every top-level key
must start with "<group>.". Exits 1 when the document is invalid, after
listing its issues.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope the document is meant for (optional; or the first argument)")
	file := fileFlag(fs)
	schemaID := fs.String("schema-id", "", "schemaId to validate the document against")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := scopeArg(pos, scope); err != nil {
		return err
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	doc, err := readDocument(*file, c.m.Stdin)
	if err != nil {
		return err
	}
	out, err := a.Validate(ctx, varplane.ValidateRequest{Document: doc, SchemaID: *schemaID, Scope: varplane.Scope(*scope)})
	if err != nil {
		return classify(ctx, err)
	}
	if out.Issues == nil {
		out.Issues = []varplane.Issue{}
	}
	err = emit(c.m.Stdout, cf.json(), out, func() error {
		against := ""
		switch {
		case out.BoundBy != "":
			against = fmt.Sprintf(" against %s (bound to %s)", out.SchemaID, out.BoundBy)
		case out.SchemaID != "":
			against = " against " + out.SchemaID
		}
		if out.Valid {
			_, err := fmt.Fprintln(c.m.Stdout, "valid"+against)
			return err
		}
		fmt.Fprintf(c.m.Stdout, "invalid%s: %d issue(s)\n", against, len(out.Issues))
		printIssues(c.m.Stdout, out.Issues, "  ")
		return nil
	})
	if err == nil && !out.Valid {
		return &refusedError{}
	}
	return err
}
