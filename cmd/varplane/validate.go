package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

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
	fs := c.m.newFlagSet("validate", "[-f FILE] [--scope SCOPE] [--schema-id ID] [flags]", `
Check a document as "varplane create" would, without storing anything. With
--scope naming a group (one segment, no dot) the group shape rule applies:
every top-level key must start with "<group>.". Exits 1 when the document is
invalid, after listing its issues.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope the document is meant for (optional)")
	file := fs.String("f", "", "file holding the document (JSON or YAML); stdin when absent or -")
	schemaID := fs.String("schema-id", "", "schemaId to validate the document against")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cl, err := cf.client(c.m.Stdout)
	if err != nil {
		return err
	}
	doc, err := readDocument(*file, c.m.Stdin)
	if err != nil {
		return err
	}
	req := struct {
		Document json.RawMessage `json:"document"`
		SchemaID string          `json:"schemaId,omitempty"`
		Scope    string          `json:"scope,omitempty"`
	}{doc, *schemaID, *scope}
	resp, err := cl.do(ctx, http.MethodPost, "/admin/validate", nil, req, nil)
	if err != nil {
		return err
	}
	var out struct {
		Valid  bool             `json:"valid"`
		Issues []varplane.Issue `json:"issues"`
	}
	if err := decodeAnswer(resp.body, &out); err != nil {
		return err
	}
	err = emit(c.m.Stdout, cf.json(), resp.body, func() error {
		if out.Valid {
			_, err := fmt.Fprintln(c.m.Stdout, "valid")
			return err
		}
		fmt.Fprintf(c.m.Stdout, "invalid: %d issue(s)\n", len(out.Issues))
		printIssues(c.m.Stdout, out.Issues, "  ")
		return nil
	})
	if err == nil && !out.Valid {
		return &refusedError{}
	}
	return err
}
