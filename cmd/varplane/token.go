package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/varplane/varplane/access"
)

// TokenCommand manages the principals held in the store (serve
// --access-control) through {base}/access/tokens: create, list, revoke.
type TokenCommand struct {
	m *Main
}

// tokenSubcommands are the subcommands of token, in the order -h lists them.
var tokenSubcommands = []struct {
	name, summary string
	new           func(m *Main) command
}{
	{"create", "create a principal and print its token, once", func(m *Main) command { return &TokenCreateCommand{m: m} }},
	{"list", "list the principals (never their tokens)", func(m *Main) command { return &TokenListCommand{m: m} }},
	{"revoke", "revoke a principal: its token is refused from then on", func(m *Main) command { return &TokenRevokeCommand{m: m} }},
}

// Run dispatches to the subcommand args[0].
func (c *TokenCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := c.m.Stderr
		if len(args) > 0 {
			w = c.m.Stdout
		}
		fmt.Fprint(w, "Usage: varplane token <create|list|revoke> [flags]\n\nManage the principals a server with --access-control holds in its store.\n\nSubcommands:\n")
		for _, s := range tokenSubcommands {
			fmt.Fprintf(w, "  %-7s %s\n", s.name, s.summary)
		}
		if len(args) == 0 {
			return &usageError{err: fmt.Errorf("token: a subcommand is required"), reported: true}
		}
		return nil
	}
	for _, s := range tokenSubcommands {
		if s.name == args[0] {
			return s.new(c.m).Run(ctx, args[1:])
		}
	}
	return usagef("token: unknown subcommand %q (want create, list or revoke)", args[0])
}

// TokenCreateCommand is `token create`: POST {base}/access/tokens.
type TokenCreateCommand struct {
	m *Main
}

// Run creates the principal and prints its token once.
func (c *TokenCreateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("token create", "--id NAME [--kinds …] [--prefixes …] [--roles …] [flags]", `
Create a principal in the store and print its bearer token. The token is
shown this once: the store keeps only its SHA-256 digest. Without --kinds
the token allows every kind (read, audit, mutate), without --prefixes every
scope; --roles are its roles on role-guarded routes (admin administers
tokens; varplane:instance files instance statuses and canary reports).
Needs a token that holds the admin role, and gives only kinds, prefixes
and roles that token holds itself.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	id := fs.String("id", "", "the principal's id, recorded as the actor of what it writes (letters, digits, . _ @ -)")
	kinds := fs.String("kinds", "", "comma-separated kinds it may use: read, audit, mutate (default every kind)")
	prefixes := fs.String("prefixes", "", `comma-separated scope prefixes it may use ("a." below a, "a" a and below, "*") (default every scope)`)
	roles := fs.String("roles", "", "comma-separated roles (admin, system:configuration, …)")
	reason := fs.String("reason", "", "reason recorded in the access scope's history")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("id", *id); err != nil {
		return err
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	req := map[string]any{"id": *id, "kinds": splitList(*kinds), "prefixes": splitList(*prefixes), "roles": splitList(*roles), "reason": *reason}
	var out access.Created
	if err := a.Call(ctx, http.MethodPost, "/access/tokens", nil, req, &out); err != nil {
		// The principal may have been stored with a token nobody saw.
		return classify(ctx, withOutcomeHint(err, fmt.Sprintf("principal %s may have been created with a token that was never shown: "+
			"`varplane token list` tells; if it is listed, `varplane token revoke %s` and create it again", *id, *id)))
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		fmt.Fprintf(c.m.Stdout, "created principal %s (generation %d)\n", out.ID, out.Generation)
		fmt.Fprintf(c.m.Stdout, "token: %s\n", out.Token)
		fmt.Fprintln(c.m.Stderr, "The token is shown once: store it now.")
		return nil
	})
}

// TokenListCommand is `token list`: GET {base}/access/tokens.
type TokenListCommand struct {
	m *Main
}

// Run lists the principals, one a line.
func (c *TokenListCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("token list", "[flags]", `
List the principals held in the store: id, kinds, prefixes, roles, and who
created them when. Tokens are never shown (the store does not keep them).`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	var out struct {
		Principals []access.Info `json:"principals"`
	}
	if err := a.Call(ctx, http.MethodGet, "/access/tokens", nil, nil, &out); err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		tw := tabwriter.NewWriter(c.m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKINDS\tPREFIXES\tROLES\tCREATED\tBY")
		for _, p := range out.Principals {
			kinds := make([]string, len(p.Kinds))
			for i, k := range p.Kinds {
				kinds[i] = string(k)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, orAll(kinds), orAll(p.Prefixes), orDash(p.Roles), p.CreatedAt.Format(time.RFC3339), p.CreatedBy)
		}
		return tw.Flush()
	})
}

func orAll(l []string) string {
	if len(l) == 0 {
		return "(all)"
	}
	return strings.Join(l, ",")
}

func orDash(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}

// TokenRevokeCommand is `token revoke`: DELETE {base}/access/tokens/{id}.
type TokenRevokeCommand struct {
	m *Main
}

// Run revokes the principal.
func (c *TokenRevokeCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("token revoke", "--id NAME [flags]", `
Revoke a principal: its token is refused at once by the server that answers,
and by every other replica as soon as the change reaches it (at most one
revalidation interval on Redis). The access scope's history keeps who
revoked it and when. NAME may also be the first argument.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	id := fs.String("id", "", "the principal to revoke")
	reason := fs.String("reason", "", "reason recorded in the access scope's history")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if err := fs.Set("id", args[0]); err != nil {
			return err
		}
		args = args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("id", *id); err != nil {
		return err
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	var query url.Values
	if *reason != "" {
		query = url.Values{"reason": {*reason}}
	}
	var out struct {
		ID         string `json:"id"`
		Generation uint64 `json:"generation"`
	}
	if err := a.Call(ctx, http.MethodDelete, "/access/tokens/"+url.PathEscape(*id), query, nil, &out); err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		_, err := fmt.Fprintf(c.m.Stdout, "revoked principal %s (generation %d)\n", out.ID, out.Generation)
		return err
	})
}
