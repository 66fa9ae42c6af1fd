package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/varplane/varplane/control"
	"github.com/varplane/varplane/rollout"
)

// RolloutCommand is `varplane rollout SUBCOMMAND`: a change's publish in
// steps (docs/rollouts.md), under {base}/control.
type RolloutCommand struct {
	m *Main
}

const rolloutUsage = `start|list|show|pause|resume|abort ...`

const rolloutHelp = `Subcommands:
  start CHANGE --strategy S [--max-rejections N] [--max-lag D] [--gate-check NAME]... [--note TEXT]
                        publish an approved change in steps; S is linear:N:BAKE (N equal steps),
                        exponential:FIRST%:BAKE (doubling from FIRST%) or labels:SEL;SEL:BAKE
                        (each SEL k=v[,k=v], then everyone); the head moves after the last step
  list [--scope S]      the rollouts in progress
  show ID               a rollout: its steps, the share served, each gate and its evidence, its events
  pause ID [--note]     freeze the step (its instances keep the new revision)
  resume ID [--note]    start the step's bake again
  abort ID [--note]     end the rollout: every instance back to the head, the change back to where it was
`

// Run dispatches to the subcommand.
func (c *RolloutCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(c.m.Stderr, "Usage: varplane rollout %s\n\n%s", rolloutUsage, rolloutHelp)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return flag.ErrHelp
		}
		return usagef("varplane rollout needs a subcommand")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "start":
		return c.start(ctx, rest)
	case "list":
		return c.list(ctx, rest)
	case "show", "pause", "resume", "abort":
		return c.one(ctx, sub, rest)
	}
	return usagef("varplane rollout: unknown subcommand %q (%s)", sub, rolloutUsage)
}

func (c *RolloutCommand) start(ctx context.Context, args []string) error {
	var cf clientFlags
	fs := c.m.newFlagSet("rollout start", "CHANGE --strategy S [flags]", "Publish an approved change in steps; its head moves once the last step has baked.")
	cf.register(fs, c.m.Getenv)
	strategy := fs.String("strategy", "", "linear:N:BAKE, exponential:FIRST%:BAKE or labels:SEL;SEL:BAKE (required)")
	maxRejections := fs.Int("max-rejections", 0, "instances that may reject the revision before the rollout rolls back")
	maxLag := fs.Duration("max-lag", 0, "how long the selected instances have to serve a step's revision (default 2m)")
	var checks listFlag
	fs.Var(&checks, "gate-check", "a check (serve --gate or --check NAME=URL) asked during each bake (repeatable)")
	note := fs.String("note", "", "why")
	id, args := firstArg(args)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("change id (the first argument)", id); err != nil {
		return err
	}
	if err := requireFlag("--strategy", *strategy); err != nil {
		return err
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	gates := control.Gates{MaxRejections: *maxRejections, Checks: checks}
	gates.MaxLag = rollout.Duration(*maxLag)
	body := map[string]any{"strategy": *strategy, "gates": gates}
	if *note != "" {
		body["note"] = *note
	}
	var out json.RawMessage
	if err := a.Call(ctx, http.MethodPost, "/control/changes/"+url.PathEscape(id)+":rollout", nil, body, &out); err != nil {
		return classify(ctx, err)
	}
	return c.show(&cf, out)
}

func (c *RolloutCommand) list(ctx context.Context, args []string) error {
	var cf clientFlags
	fs := c.m.newFlagSet("rollout list", "[--scope S] [flags]", "List the rollouts in progress.")
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "this scope's rollout only")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	q := url.Values{}
	if *scope != "" {
		q.Set("scope", *scope)
	}
	var out json.RawMessage
	if err := a.Call(ctx, http.MethodGet, "/control/rollouts", q, nil, &out); err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		var list struct {
			Rollouts []control.Rollout `json:"rollouts"`
		}
		if err := json.Unmarshal(out, &list); err != nil {
			return fmt.Errorf("decode the rollouts: %w", err)
		}
		if len(list.Rollouts) == 0 {
			_, err := io.WriteString(c.m.Stdout, "no rollout in progress\n")
			return err
		}
		for _, r := range list.Rollouts {
			fmt.Fprintf(c.m.Stdout, "%s %s %s step %d/%d %s change %s\n", r.ID, r.Scope, r.State, r.Step+1, r.Steps, rollout.Percent(r.Share), r.Change)
		}
		return nil
	})
}

func (c *RolloutCommand) one(ctx context.Context, sub string, args []string) error {
	var cf clientFlags
	id, note, a, err := c.m.idAndNote(&cf, "rollout", sub, "a rollout", args)
	if err != nil {
		return err
	}
	out, err := showOrAct(ctx, a, "rollouts", id, sub, note)
	if err != nil {
		return classify(ctx, err)
	}
	return c.show(&cf, out)
}

func (c *RolloutCommand) show(cf *clientFlags, body json.RawMessage) error {
	return emit(c.m.Stdout, cf.json(), body, func() error {
		var r control.Rollout
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("decode the rollout: %w", err)
		}
		return printRollout(c.m.Stdout, &r)
	})
}

func printRollout(w io.Writer, r *control.Rollout) error {
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %s %s %s (change %s, revision %s on base %d)\n", r.ID, r.Scope, r.State, r.Change, r.Revision, r.Base)
	for i, st := range r.Strategy.Steps {
		mark := " "
		if i == r.Step && r.Serves() {
			mark = ">"
		}
		what := rollout.Percent(st.Share)
		if len(st.Selector) > 0 {
			what = "instances with " + st.Selector.String()
		}
		fmt.Fprintf(&b, " %s step %d/%d: %s, bake %v\n", mark, i+1, len(r.Strategy.Steps), what, time.Duration(st.Bake))
	}
	if r.Serves() {
		fmt.Fprintf(&b, "  step started %s\n", r.StepStartedAt.Format(time.RFC3339))
	}
	for _, g := range r.GateStates {
		fmt.Fprintf(&b, "  gate %s: %s\n", g.Gate, g.State)
		for _, ev := range g.Evidence {
			fmt.Fprintf(&b, "    %s\n", ev)
		}
	}
	for _, ev := range r.Events {
		fmt.Fprintf(&b, "  %s %s by %s at step %d", ev.At.Format(time.RFC3339), ev.Kind, ev.By, ev.Step)
		if ev.Note != "" {
			fmt.Fprintf(&b, ": %s", ev.Note)
		}
		b.WriteString("\n")
	}
	if r.Generation != 0 {
		fmt.Fprintf(&b, "  published as generation %d\n", r.Generation)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
