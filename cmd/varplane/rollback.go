package main

import (
	"context"
	"net/http"
)

// RollbackCommand re-activates an earlier revision as a new generation:
// POST {base}/admin/rollback.
type RollbackCommand struct {
	m *Main
}

// Run parses args and rolls back. A missing target is a not-found
// *varplane.Error, a stale generation a revision-conflict one.
func (c *RollbackCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("rollback", "--scope SCOPE --expected-generation N [--to-revision sha256:… | --to-generation G] [flags]", `
Re-activate an earlier revision of a scope as a NEW generation: history only
grows. The target is --to-revision, or the revision activated at
--to-generation, or by default the revision that was active before the
current one. Guarded by --expected-generation like activate.`)
	var g guardedFlags
	g.register(fs, c.m.Getenv, "roll back")
	toRevision := fs.String("to-revision", "", "revision to re-activate")
	var toGeneration uintFlag
	fs.Var(&toGeneration, "to-generation", "re-activate the revision that generation G activated")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := g.check(); err != nil {
		return err
	}
	if *toRevision != "" && toGeneration.set {
		return usagef("give --to-revision or --to-generation, not both")
	}
	cl, err := g.client(c.m.Stdout)
	if err != nil {
		return err
	}
	req := struct {
		Scope              string  `json:"scope"`
		ExpectedGeneration uint64  `json:"expectedGeneration"`
		ToRevision         string  `json:"toRevision,omitempty"`
		ToGeneration       *uint64 `json:"toGeneration,omitempty"`
		Actor              string  `json:"actor,omitempty"`
		Reason             string  `json:"reason,omitempty"`
		IdempotencyKey     string  `json:"idempotencyKey,omitempty"`
	}{Scope: g.scope, ExpectedGeneration: g.expected.value, ToRevision: *toRevision,
		Actor: g.actor, Reason: g.reason, IdempotencyKey: g.idempotencyKey}
	if toGeneration.set {
		req.ToGeneration = &toGeneration.value
	}
	resp, err := cl.do(ctx, http.MethodPost, "/admin/rollback", nil, req, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, g.json(), resp.body, func() error {
		return printActivation(c.m, "rolled back", resp.body)
	})
}
