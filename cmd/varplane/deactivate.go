package main

import (
	"context"
	"fmt"
	"net/http"
)

// DeactivateCommand clears a scope's head and its subtree:
// POST {base}/admin/deactivate.
type DeactivateCommand struct {
	m *Main
}

// Run parses args and deactivates. A stale --expected-generation is a
// revision-conflict *varplane.Error.
func (c *DeactivateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("deactivate", "--scope SCOPE --expected-generation N [flags]", `
Clear the head of a scope so that it serves nothing, together with every active
descendant (deactivating "a" clears "a.b" and "a.b.c") in one atomic commit.
Each cleared scope takes its own next generation. Guarded like activate.`)
	var g guardedFlags
	g.register(fs, c.m.Getenv, "deactivate")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := g.check(); err != nil {
		return err
	}
	cl, err := g.client(c.m.Stdout)
	if err != nil {
		return err
	}
	req := struct {
		Scope              string `json:"scope"`
		ExpectedGeneration uint64 `json:"expectedGeneration"`
		Actor              string `json:"actor,omitempty"`
		Reason             string `json:"reason,omitempty"`
		IdempotencyKey     string `json:"idempotencyKey,omitempty"`
	}{g.scope, g.expected.value, g.actor, g.reason, g.idempotencyKey}
	resp, err := cl.do(ctx, http.MethodPost, "/admin/deactivate", nil, req, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, g.json(), resp.body, func() error {
		var out struct {
			Scope      string `json:"scope"`
			Generation uint64 `json:"generation"`
			Cascade    []struct {
				Scope      string `json:"scope"`
				Generation uint64 `json:"generation"`
			} `json:"cascade"`
		}
		if err := decodeAnswer(resp.body, &out); err != nil {
			return err
		}
		fmt.Fprintf(c.m.Stdout, "deactivated %s generation %d\n", out.Scope, out.Generation)
		for _, d := range out.Cascade {
			fmt.Fprintf(c.m.Stdout, "  also deactivated %s generation %d\n", d.Scope, d.Generation)
		}
		return nil
	})
}
