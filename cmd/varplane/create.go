package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// CreateCommand stores a document as a revision: POST {base}/admin/revisions.
type CreateCommand struct {
	m *Main
}

// Run parses args and creates the revision. A document the server finds
// invalid is a *varplane.Error with code revision-invalid and its issues.
func (c *CreateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("create", "--scope SCOPE [-f FILE] [flags]", `
Store a document as a new immutable revision of a scope. The revision is the
SHA-256 of the document's canonical JSON, so creating the same document twice
returns the same revision (reported as unchanged). Creating does not activate:
use "varplane activate" with the printed revision.

The document is read from -f FILE, or from stdin when -f is absent or "-". It
may be JSON or YAML (a .yaml/.yml file, or any input that is not JSON). YAML
is read by the YAML 1.2 core schema, as the server reads it: an integer with
a leading zero (010) is refused as ambiguous (write 10, 0o10 or "010"), and
anchors, aliases and merge keys are refused.`)
	var cf clientFlags
	var mf mutationFlags
	cf.register(fs, c.m.Getenv)
	mf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope of the document, e.g. agentic.lanes.vinci (required)")
	file := fs.String("f", "", "file holding the document (JSON or YAML); stdin when absent or -")
	schemaID := fs.String("schema-id", "", "schemaId to validate the document against")
	schemaVersion := fs.String("schema-version", "", "schema version, recorded with the revision")
	cl, err := cf.parseScoped(fs, args, scope, c.m.Stdout)
	if err != nil {
		return err
	}
	doc, err := readDocument(*file, c.m.Stdin)
	if err != nil {
		return err
	}
	req := struct {
		Scope          string          `json:"scope"`
		Document       json.RawMessage `json:"document"`
		SchemaID       string          `json:"schemaId,omitempty"`
		SchemaVersion  string          `json:"schemaVersion,omitempty"`
		Actor          string          `json:"actor,omitempty"`
		Reason         string          `json:"reason,omitempty"`
		IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	}{*scope, doc, *schemaID, *schemaVersion, mf.actor, mf.reason, mf.idempotencyKey}
	resp, err := cl.do(ctx, http.MethodPost, "/admin/revisions", nil, req, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, cf.json(), resp.body, func() error {
		var out struct {
			Scope      string `json:"scope"`
			Revision   string `json:"revision"`
			Generation uint64 `json:"generation"`
			Created    bool   `json:"created"`
		}
		if err := decodeAnswer(resp.body, &out); err != nil {
			return err
		}
		verb := "created"
		if !out.Created {
			verb = "unchanged (revision already stored)"
		}
		_, err := fmt.Fprintf(c.m.Stdout, "%s %s revision %s\n  scope is at generation %d; activate with: varplane activate --scope %s --revision %s --expected-generation %d\n",
			verb, out.Scope, out.Revision, out.Generation, out.Scope, out.Revision, out.Generation)
		return err
	})
}
