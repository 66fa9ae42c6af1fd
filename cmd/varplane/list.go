package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
)

// ListCommand lists scopes: GET {base}/admin/scopes, every page.
type ListCommand struct {
	m *Main
}

// Run parses args and prints the scopes in scope order, following the pages
// to the end unless --limit asks for one page.
func (c *ListCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("list", "[PREFIX] [--limit N [--after SCOPE]] [flags]", `
List the scopes the server knows (every scope that has appeared in its log),
sorted, with their state, generation, revision and last change. PREFIX (also
--prefix) keeps the prefix itself and the scopes below it, as a watch prefix
does. Only the scopes the token may audit or read are listed; one it may
only read shows no last change (that is the audit log's). Without --limit every
page is fetched; with it one page is printed, and the next one is --after the
scope printed last ("next:" says which).`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	prefix := fs.String("prefix", "", "list this scope and those below it (or the first argument)")
	after := fs.String("after", "", "start after this scope (the next: of the previous page)")
	limit := fs.Int("limit", 0, "print one page of at most N scopes (1 to 1000)")
	internal := fs.Bool("internal", false, "list the project's own records too (change requests, policies, principals: the scopes under varplane and varplane-control)")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := scopeArg(pos, prefix); err != nil {
		return err
	}
	if *limit < 0 || *limit > 1000 {
		return usagef("--limit must be from 1 to 1000")
	}
	if *after != "" && *limit == 0 {
		return usagef("--after pages: give --limit with it")
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	var page varplane.ScopePage
	if *limit > 0 {
		page, err = a.Scopes(ctx, client.ScopesQuery{Prefix: varplane.Scope(*prefix), After: varplane.Scope(*after), Limit: *limit, Internal: *internal})
	} else {
		page.Items, err = a.AllScopesOf(ctx, client.ScopesQuery{Prefix: varplane.Scope(*prefix), Internal: *internal})
	}
	if err != nil {
		return classify(ctx, err)
	}
	if page.Items == nil {
		page.Items = []varplane.ScopeSummary{}
	}
	return emit(c.m.Stdout, cf.json(), page, func() error {
		if len(page.Items) == 0 {
			_, err := fmt.Fprintln(c.m.Stdout, "no scopes")
			return err
		}
		tw := tabwriter.NewWriter(c.m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SCOPE\tSTATE\tGEN\tREVISION\tCHANGED\tBY")
		for _, s := range page.Items {
			state, changed, by := "inactive", "-", "-"
			if s.Active {
				state = "active"
			}
			if lc := s.LastChange; lc != nil {
				changed, by = shortTime(lc.Timestamp), dash(lc.Actor)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Scope, state, s.Generation, shortRevision(string(s.Revision)), changed, by)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if page.Next != "" {
			_, err := fmt.Fprintf(c.m.Stdout, "next: varplane list --limit %d --after %s\n", *limit, page.Next)
			return err
		}
		return nil
	})
}
