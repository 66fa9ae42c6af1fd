package main

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
)

// GetCommand reads what a scope serves: GET {base}?key= or ?group=.
type GetCommand struct {
	m *Main
}

// Run parses args and prints the scope's values. A scope without a head is a
// no-head *varplane.Error (exit 1); an unchanged head with --if-none-match is a
// success that prints "not modified".
func (c *GetCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("get", "SCOPE [--value] [--if-none-match REVISION] [flags]", `
Read the values a scope serves, as consumers do (the data plane). A key (it
contains a dot) is served as {"<key>": document}; a group (one segment) passes
its document through. SCOPE may also be given as --scope, --key or --group.
--value prints only the document. The ETag is the revision: with
--if-none-match set to the revision you hold, an unchanged head answers "not
modified" with no body.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to read: a key (with a dot) or a group (or the first argument)")
	key := fs.String("key", "", "key scope to read, e.g. agentic.lanes.vinci")
	group := fs.String("group", "", "group scope to read, e.g. agentic")
	value := fs.Bool("value", false, "print only the document (JSON), nothing else")
	ifNoneMatch := fs.String("if-none-match", "", "revision (ETag) you hold; an unchanged head answers not modified")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := scopeArg(pos, scope); err != nil {
		return err
	}
	n := 0
	for _, s := range []string{*scope, *key, *group} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return usagef("give exactly one scope: the first argument, --scope, --key or --group")
	}
	sc := varplane.Scope(*scope + *key + *group)
	switch {
	case *key != "" && sc.IsGroup():
		return usagef("--key %q must contain a dot (a group is --group)", *key)
	case *group != "" && sc.IsKey():
		return usagef("--group %q must not contain a dot (a key is --key)", *group)
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	out, err := a.Read(ctx, sc, varplane.Revision(*ifNoneMatch))
	if err != nil {
		return classify(ctx, err)
	}
	if out.NotModified {
		if cf.json() || *value {
			return nil
		}
		_, err := fmt.Fprintf(c.m.Stdout, "not modified (still %s)\n", out.Revision)
		return err
	}
	if *value {
		doc, err := out.Document(sc)
		if err != nil {
			return fmt.Errorf("cannot read the server's answer: %w", err)
		}
		return printJSON(c.m.Stdout, doc)
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		fmt.Fprintf(c.m.Stdout, "%s generation %d revision %s (effective %s)\n", sc, out.Generation, out.Revision, shortTime(out.EffectiveAt))
		return printJSON(c.m.Stdout, out.Values)
	})
}
