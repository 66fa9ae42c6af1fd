package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// PolicyCommand manages review policies ({base}/control/policies): which
// scopes take their changes only through reviewed changes, and what a
// change needs before it publishes.
type PolicyCommand struct {
	m *Main
}

const policyUsage = `list|get|set|delete ...`

const policyHelp = `Subcommands:
  list                  every policy whose scope you may audit
  get SCOPE             the policy that covers SCOPE (the longest covering one), if any
  set SCOPE --approvals N [--roles R1,R2] [--canary]
                        put a policy on SCOPE and its descendants (needs the role control:policies)
  delete SCOPE          remove the policy set on SCOPE itself
`

// policyView is a policy as the control API answers it.
type policyView struct {
	Scope     string   `json:"scope"`
	Approvals int      `json:"approvals"`
	Roles     []string `json:"roles,omitempty"`
	Canary    bool     `json:"canary,omitempty"`
}

func (p policyView) String() string {
	s := fmt.Sprintf("%s: %d approval(s)", p.Scope, p.Approvals)
	if len(p.Roles) > 0 {
		s += " by a holder of " + strings.Join(p.Roles, " or ")
	}
	if p.Canary {
		s += ", after a passed canary window"
	}
	return s
}

// Run dispatches to the subcommand.
func (c *PolicyCommand) Run(ctx context.Context, args []string) error {
	sub, rest, err := subcommand(c.m, "policy", policyUsage, policyHelp, args)
	if err != nil {
		return err
	}
	var cf clientFlags
	fs := c.m.newFlagSet("policy "+sub, "[SCOPE] [flags]", "Review policies: "+sub+".")
	cf.register(fs, c.m.Getenv)
	approvals := fs.Int("approvals", 0, "approvals a change needs, by distinct identities other than its author (set; at least 1)")
	roles := fs.String("roles", "", "comma-separated roles of which each approver must hold one (set; none: any identity that may mutate the scope)")
	canary := fs.Bool("canary", false, "a change needs a passed canary window before it publishes (set)")
	scope, rest := firstArg(rest)
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	switch sub {
	case "list", "get", "set", "delete":
	default:
		return usagef("varplane policy: unknown subcommand %q (%s)", sub, policyUsage)
	}
	if sub != "list" {
		if err := requireFlag("scope (the first argument)", scope); err != nil {
			return err
		}
	}
	if sub == "set" && *approvals < 1 {
		return usagef("policy set needs --approvals N (at least 1)")
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	switch sub {
	case "set":
		var p policyView
		body := struct {
			Approvals int      `json:"approvals"`
			Roles     []string `json:"roles,omitempty"`
			Canary    bool     `json:"canary"`
		}{*approvals, splitList(*roles), *canary}
		if err := a.Call(ctx, http.MethodPut, "/control/policies/"+url.PathEscape(scope), nil, body, &p); err != nil {
			return classify(ctx, err)
		}
		return emit(c.m.Stdout, cf.json(), p, func() error { _, err := fmt.Fprintf(c.m.Stdout, "policy %s\n", p); return err })
	case "delete":
		if err := a.Call(ctx, http.MethodDelete, "/control/policies/"+url.PathEscape(scope), nil, nil, nil); err != nil {
			return classify(ctx, err)
		}
		return emit(c.m.Stdout, cf.json(), map[string]string{"deleted": scope}, func() error {
			_, err := fmt.Fprintf(c.m.Stdout, "deleted the policy on %s\n", scope)
			return err
		})
	}
	var list struct {
		Policies []policyView `json:"policies"`
	}
	if err := a.Call(ctx, http.MethodGet, "/control/policies", nil, nil, &list); err != nil {
		return classify(ctx, err)
	}
	if sub == "get" {
		p, ok := covering(list.Policies, scope)
		if !ok {
			return emit(c.m.Stdout, cf.json(), map[string]any{"scope": scope, "policy": nil}, func() error {
				_, err := fmt.Fprintf(c.m.Stdout, "no policy covers %s: direct writes are allowed\n", scope)
				return err
			})
		}
		return emit(c.m.Stdout, cf.json(), map[string]any{"scope": scope, "policy": p}, func() error {
			_, err := fmt.Fprintf(c.m.Stdout, "%s is covered by the policy on %s\n", scope, p)
			return err
		})
	}
	return emit(c.m.Stdout, cf.json(), list, func() error {
		if len(list.Policies) == 0 {
			_, err := fmt.Fprintln(c.m.Stdout, "no review policies")
			return err
		}
		for _, p := range list.Policies {
			fmt.Fprintf(c.m.Stdout, "%s\n", p)
		}
		return nil
	})
}

// covering returns the longest policy whose scope is scope or an ancestor,
// as the server applies them.
func covering(list []policyView, scope string) (policyView, bool) {
	var best policyView
	found := false
	for _, p := range list {
		if (p.Scope == scope || strings.HasPrefix(scope, p.Scope+".")) && (!found || len(p.Scope) > len(best.Scope)) {
			best, found = p, true
		}
	}
	return best, found
}
