package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// SetCommand stores a document and makes it a scope's head in one commit:
// POST {base}/admin/publish.
type SetCommand struct {
	m *Main
}

// Run parses args and publishes. A document the server finds invalid is a
// *ServerError with code revision-invalid; a scope that moved is
// revision-conflict carrying currentGeneration, and nothing changes.
func (c *SetCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("set", "SCOPE [-f FILE] [--expected-generation N] [flags]", `
Store a document as a revision of SCOPE (or find it stored) and make it the
head, in one commit that is all or nothing. With --expected-generation the
commit happens only when the scope is still at that generation; without it,
set reads the scope's generation first and publishes against that, so a
commit made in between is still refused (revision-conflict), never
overwritten.

The document is read from -f FILE, or from stdin when -f is absent or "-". It
may be JSON or YAML, as for create. SCOPE may also be given as --scope.`)
	var cf clientFlags
	var mf mutationFlags
	var expected uintFlag
	cf.register(fs, c.m.Getenv)
	mf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to set, e.g. agentic.lanes.vinci (or the first argument)")
	file := fs.String("f", "", "file holding the document (JSON or YAML); stdin when absent or -")
	fs.Var(&expected, "expected-generation", "generation the scope must be at (default: its current one, read first)")
	schemaID := fs.String("schema-id", "", "schemaId to validate the document against")
	schemaVersion := fs.String("schema-version", "", "schema version, recorded with the revision")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if err := fs.Set("scope", args[0]); err != nil {
			return err
		}
		args = args[1:]
	}
	cl, err := cf.parseScoped(fs, args, scope, c.m.Stdout)
	if err != nil {
		return err
	}
	doc, err := readDocument(*file, c.m.Stdin)
	if err != nil {
		return err
	}
	if !expected.set {
		resp, err := cl.do(ctx, http.MethodGet, "/admin/status", url.Values{"scope": {*scope}}, nil, nil)
		if err != nil {
			return err
		}
		var st struct {
			Generation uint64 `json:"generation"`
		}
		if err := decodeAnswer(resp.body, &st); err != nil {
			return err
		}
		expected.value = st.Generation
	}
	req := struct {
		Scope              string          `json:"scope"`
		Document           json.RawMessage `json:"document"`
		ExpectedGeneration uint64          `json:"expectedGeneration"`
		SchemaID           string          `json:"schemaId,omitempty"`
		SchemaVersion      string          `json:"schemaVersion,omitempty"`
		Actor              string          `json:"actor,omitempty"`
		Reason             string          `json:"reason,omitempty"`
		IdempotencyKey     string          `json:"idempotencyKey,omitempty"`
	}{*scope, doc, expected.value, *schemaID, *schemaVersion, mf.actor, mf.reason, mf.idempotencyKey}
	resp, err := cl.do(ctx, http.MethodPost, "/admin/publish", nil, req, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, cf.json(), resp.body, func() error {
		var out struct {
			activation
			Created bool `json:"created"`
		}
		if err := decodeAnswer(resp.body, &out); err != nil {
			return err
		}
		how := "created"
		if !out.Created {
			how = "already stored"
		}
		_, err := fmt.Fprintf(c.m.Stdout, "set %s generation %d revision %s (%s)\n", out.Scope, out.Generation, out.Revision, how)
		return err
	})
}
