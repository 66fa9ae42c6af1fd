package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// StatusCommand shows a scope's state: GET {base}/admin/status.
type StatusCommand struct {
	m *Main
}

// Run parses args and prints the status of the scope.
func (c *StatusCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("status", "--scope SCOPE [flags]", `
Show whether a scope has an active head, its generation (the value to pass as
--expected-generation to the next activate, deactivate or rollback), its
revision, the store serving it and its last rejected revision.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to inspect (required)")
	cl, err := cf.parseScoped(fs, args, scope, c.m.Stdout)
	if err != nil {
		return err
	}
	resp, err := cl.do(ctx, http.MethodGet, "/admin/status", url.Values{"scope": {*scope}}, nil, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, cf.json(), resp.body, func() error {
		var out struct {
			Scope        string `json:"scope"`
			Active       bool   `json:"active"`
			Generation   uint64 `json:"generation"`
			Revision     string `json:"revision"`
			Source       string `json:"source"`
			LastRejected *struct {
				RejectionReason string    `json:"rejectionReason"`
				Timestamp       time.Time `json:"timestamp"`
			} `json:"lastRejected"`
		}
		if err := decodeAnswer(resp.body, &out); err != nil {
			return err
		}
		w := c.m.Stdout
		state := "inactive (serves nothing)"
		if out.Active {
			state = "active"
		}
		fmt.Fprintf(w, "scope:       %s\n", out.Scope)
		fmt.Fprintf(w, "state:       %s\n", state)
		fmt.Fprintf(w, "generation:  %d\n", out.Generation)
		if out.Revision != "" {
			fmt.Fprintf(w, "revision:    %s\n", out.Revision)
		}
		fmt.Fprintf(w, "source:      %s\n", out.Source)
		if r := out.LastRejected; r != nil {
			fmt.Fprintf(w, "rejected:    %s (%s)\n", r.RejectionReason, shortTime(r.Timestamp))
		}
		return nil
	})
}
