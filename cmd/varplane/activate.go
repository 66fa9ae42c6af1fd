package main

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// ActivateCommand makes a stored revision a scope's head:
// POST {base}/admin/activate.
type ActivateCommand struct {
	m *Main
}

// Run parses args and activates. A stale --expected-generation is a
// revision-conflict *varplane.Error carrying currentGeneration.
func (c *ActivateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("activate", "--scope SCOPE --revision sha256:… --expected-generation N [flags]", `
Make a stored revision the head of a scope, at the next generation. The
activation happens only when the scope is still at --expected-generation (the
generation you last saw: 0 for a scope never activated); otherwise the server
answers revision-conflict with the current generation and nothing changes.`)
	var g guardedFlags
	g.register(fs, c.m.Getenv, "activate")
	revision := fs.String("revision", "", "revision to activate, sha256:… as printed by create (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := g.check(); err != nil {
		return err
	}
	if err := requireFlag("revision", *revision); err != nil {
		return err
	}
	cl, err := g.client(c.m.Stdout)
	if err != nil {
		return err
	}
	req := struct {
		Scope              string `json:"scope"`
		Revision           string `json:"revision"`
		ExpectedGeneration uint64 `json:"expectedGeneration"`
		Actor              string `json:"actor,omitempty"`
		Reason             string `json:"reason,omitempty"`
		IdempotencyKey     string `json:"idempotencyKey,omitempty"`
	}{g.scope, *revision, g.expected.value, g.actor, g.reason, g.idempotencyKey}
	resp, err := cl.do(ctx, http.MethodPost, "/admin/activate", nil, req, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, g.json(), resp.body, func() error {
		return printActivation(c.m, "activated", resp.body)
	})
}

// activation is the answer of activate and rollback.
type activation struct {
	Scope       string    `json:"scope"`
	Generation  uint64    `json:"generation"`
	Revision    string    `json:"revision"`
	EffectiveAt time.Time `json:"effectiveAt"`
}

func printActivation(m *Main, verb string, body []byte) error {
	var out activation
	if err := decodeAnswer(body, &out); err != nil {
		return err
	}
	_, err := fmt.Fprintf(m.Stdout, "%s %s generation %d revision %s\n", verb, out.Scope, out.Generation, out.Revision)
	return err
}
