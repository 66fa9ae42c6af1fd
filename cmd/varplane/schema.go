package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/varplane/varplane"
)

// SchemaCommand lists the schemas a server loaded and manages the bindings
// of scope prefixes to them ({base}/admin/schemas; docs/schemas.md).
type SchemaCommand struct {
	m *Main
}

const schemaUsage = `list|bind|unbind ...`

const schemaHelp = `Subcommands:
  list                  the schemas the server loaded and the bindings you may audit
  bind PREFIX SCHEMA [--dry-run] [--force]
                        validate every write to PREFIX and below against SCHEMA (the longest
                        bound prefix wins); the current heads SCHEMA rejects are listed, and
                        binding over them is refused unless --force (needs the role control:schemas)
  unbind PREFIX         remove the binding set on PREFIX itself
`

// bindingPreview is a binding preview as the API answers it.
type bindingPreview struct {
	Prefix   string `json:"prefix"`
	SchemaID string `json:"schemaId"`
	Previous string `json:"previous,omitempty"`
	Checked  int    `json:"checked"`
	Rejected []struct {
		Scope      string           `json:"scope"`
		Generation int64            `json:"generation"`
		Revision   string           `json:"revision"`
		Issues     []varplane.Issue `json:"issues"`
	} `json:"rejected"`
	RejectedCount int  `json:"rejectedCount"`
	Bound         bool `json:"bound"`
}

// Run dispatches to the subcommand.
func (c *SchemaCommand) Run(ctx context.Context, args []string) error {
	sub, rest, err := subcommand(c.m, "schema", schemaUsage, schemaHelp, args)
	if err != nil {
		return err
	}
	switch sub {
	case "list", "bind", "unbind":
	default:
		return usagef("varplane schema: unknown subcommand %q (%s)", sub, schemaUsage)
	}
	var cf clientFlags
	fs := c.m.newFlagSet("schema "+sub, "[PREFIX [SCHEMA]] [flags]", "Schemas and their bindings: "+sub+".")
	cf.register(fs, c.m.Getenv)
	dryRun := fs.Bool("dry-run", false, "bind: list the current heads the schema rejects and bind nothing")
	force := fs.Bool("force", false, "bind: bind even though the schema rejects current heads (they stay live; their next write must pass)")
	want := map[string]int{"list": 0, "bind": 2, "unbind": 1}[sub]
	pos, err := parseArgs(fs, rest, want)
	if err != nil {
		return err
	}
	if len(pos) != want {
		return usagef("varplane schema %s takes %d argument(s) (%s)", sub, want, schemaUsage)
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	switch sub {
	case "bind":
		prefix, id := pos[0], pos[1]
		var p bindingPreview
		body := map[string]any{"schemaId": id, "dryRun": *dryRun, "force": *force}
		if err := a.Call(ctx, http.MethodPut, "/admin/schemas/bindings/"+url.PathEscape(prefix), nil, body, &p); err != nil {
			return classify(ctx, err)
		}
		return emit(c.m.Stdout, cf.json(), p, func() error { return c.printPreview(p, *dryRun) })
	case "unbind":
		if err := a.Call(ctx, http.MethodDelete, "/admin/schemas/bindings/"+url.PathEscape(pos[0]), nil, nil, nil); err != nil {
			return classify(ctx, err)
		}
		return emit(c.m.Stdout, cf.json(), map[string]string{"unbound": pos[0]}, func() error {
			_, err := fmt.Fprintf(c.m.Stdout, "unbound %s\n", pos[0])
			return err
		})
	}
	var list struct {
		Schemas  []string                 `json:"schemas"`
		Bindings []varplane.SchemaBinding `json:"bindings"`
	}
	if err := a.Call(ctx, http.MethodGet, "/admin/schemas", nil, nil, &list); err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), list, func() error {
		if len(list.Schemas) == 0 {
			fmt.Fprintln(c.m.Stdout, "no schemas loaded (serve --documents DIR loads them)")
		} else {
			fmt.Fprintln(c.m.Stdout, "schemas:")
			for _, id := range list.Schemas {
				fmt.Fprintf(c.m.Stdout, "  %s\n", id)
			}
		}
		if len(list.Bindings) == 0 {
			_, err := fmt.Fprintln(c.m.Stdout, "no bindings")
			return err
		}
		fmt.Fprintln(c.m.Stdout, "bindings (the longest bound prefix wins):")
		for _, b := range list.Bindings {
			fmt.Fprintf(c.m.Stdout, "  %s -> %s\n", b.Prefix, b.SchemaID)
		}
		return nil
	})
}

func (c *SchemaCommand) printPreview(p bindingPreview, dryRun bool) error {
	w := c.m.Stdout
	switch {
	case dryRun:
		fmt.Fprintf(w, "dry run: binding %s to %s would check %d current head(s); %d rejected\n", p.Prefix, p.SchemaID, p.Checked, p.RejectedCount)
	case p.Previous == p.SchemaID:
		fmt.Fprintf(w, "%s was already bound to %s\n", p.Prefix, p.SchemaID)
	default:
		fmt.Fprintf(w, "bound %s to %s (%d current head(s) checked, %d rejected)\n", p.Prefix, p.SchemaID, p.Checked, p.RejectedCount)
	}
	if p.Previous != "" && p.Previous != p.SchemaID {
		fmt.Fprintf(w, "  replaces %s\n", p.Previous)
	}
	for _, r := range p.Rejected {
		fmt.Fprintf(w, "  rejected: %s (generation %d)\n", r.Scope, r.Generation)
		printIssues(w, r.Issues, "    ")
	}
	if more := p.RejectedCount - len(p.Rejected); more > 0 {
		fmt.Fprintf(w, "  and %d more\n", more)
	}
	return nil
}

// subcommand splits args into a subcommand of the command name and its
// arguments; with none (or a flag first) it prints the usage and help on
// stderr, and is flag.ErrHelp for -h and a usage error otherwise.
func subcommand(m *Main, name, usage, help string, args []string) (string, []string, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(m.Stderr, "Usage: varplane %s %s\n\n%s", name, usage, help)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return "", nil, flag.ErrHelp
		}
		return "", nil, usagef("varplane %s needs a subcommand", name)
	}
	return args[0], args[1:], nil
}
