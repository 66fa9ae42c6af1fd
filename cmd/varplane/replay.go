package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ReplayCommand shows a scope as of a generation: GET {base}/admin/replay.
type ReplayCommand struct {
	m *Main
}

// Run parses args and prints the replayed head. A store without a log answers
// store-unsupported (exit 1).
func (c *ReplayCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("replay", "--scope SCOPE --to-generation N [flags]", `
Time travel: show what a scope served right after generation N, rebuilt from
the store's log. Only persistent stores (file, redis) keep the log; the memory
store answers store-unsupported.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to replay (required)")
	var gen uintFlag
	fs.Var(&gen, "to-generation", "generation to replay to (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("scope", *scope); err != nil {
		return err
	}
	if !gen.set {
		return usagef("--to-generation is required")
	}
	cl, err := cf.client(c.m.Stdout)
	if err != nil {
		return err
	}
	q := url.Values{"scope": {*scope}, "toGeneration": {strconv.FormatUint(gen.value, 10)}}
	resp, err := cl.do(ctx, http.MethodGet, "/admin/replay", q, nil, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, cf.json(), resp.body, func() error {
		var out struct {
			Scope       string          `json:"scope"`
			Active      bool            `json:"active"`
			Generation  uint64          `json:"generation"`
			Revision    string          `json:"revision"`
			SchemaID    string          `json:"schemaId"`
			EffectiveAt time.Time       `json:"effectiveAt"`
			Document    json.RawMessage `json:"document"`
		}
		if err := decodeAnswer(resp.body, &out); err != nil {
			return err
		}
		w := c.m.Stdout
		if !out.Active {
			_, err := fmt.Fprintf(w, "%s at generation %d: no head (served nothing)\n", out.Scope, out.Generation)
			return err
		}
		fmt.Fprintf(w, "%s at generation %d: revision %s (effective %s)\n", out.Scope, out.Generation, out.Revision, shortTime(out.EffectiveAt))
		if out.SchemaID != "" {
			fmt.Fprintf(w, "schemaId: %s\n", out.SchemaID)
		}
		return printJSON(w, out.Document)
	})
}

// printJSON writes raw indented, followed by a newline.
func printJSON(w io.Writer, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	return emit(w, true, raw, nil)
}
