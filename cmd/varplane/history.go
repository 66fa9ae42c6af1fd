package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/varplane/varplane"
)

// HistoryCommand lists a scope's audit log: GET {base}/admin/history.
type HistoryCommand struct {
	m *Main
}

// Run parses args and prints every event of the scope, oldest first.
func (c *HistoryCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("history", "SCOPE [flags]", `
List every event of a scope's append-only audit log, oldest first: revisions
created, activations, deactivations and rejections, with generation, actor
(the authenticated caller, "for" the actor it claimed with --actor), reason
and time. A rollback is an activation marked "rollback of G" (the generation
it rolled back; "rollbackOf" with -o json). With -o json the documents are
included.
SCOPE may also be given as --scope.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to list (or the first argument)")
	a, err := c.m.openScoped(fs, &cf, args, scope)
	if err != nil {
		return err
	}
	events, err := a.History(ctx, varplane.Scope(*scope))
	if err != nil {
		return classify(ctx, err)
	}
	if events == nil {
		events = []varplane.Event{}
	}
	out := struct {
		Scope  varplane.Scope   `json:"scope"`
		Events []varplane.Event `json:"events"`
	}{varplane.Scope(*scope), events}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		if len(events) == 0 {
			_, err := fmt.Fprintf(c.m.Stdout, "%s has no events\n", out.Scope)
			return err
		}
		tw := tabwriter.NewWriter(c.m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tKIND\tGEN\tREVISION\tACTOR\tREASON")
		for _, ev := range events {
			gen := "-"
			if ev.Kind == varplane.EventActivated || ev.Kind == varplane.EventDeactivated {
				gen = fmt.Sprint(ev.Generation)
			}
			reason := ev.Reason
			if ev.RejectionReason != "" {
				reason = ev.RejectionReason
			}
			if len(ev.Cascade) > 0 {
				names := make([]string, len(ev.Cascade))
				for i, d := range ev.Cascade {
					names[i] = string(d.Scope)
				}
				reason = strings.TrimSpace(reason + " (also " + strings.Join(names, ", ") + ")")
			}
			actor := dash(ev.Actor)
			if ev.Unauthenticated {
				// A server without tokens records what the client
				// claimed; say so, as the event does.
				actor += " (unauthenticated)"
			}
			if ev.OnBehalfOf != "" {
				actor += " for " + ev.OnBehalfOf
			}
			kind := string(ev.Kind)
			if ev.RollbackOf != 0 {
				kind += fmt.Sprintf(" (rollback of %d)", ev.RollbackOf)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", shortTime(ev.Timestamp), kind, gen, shortRevision(string(ev.Revision)), actor, dash(reason))
		}
		return tw.Flush()
	})
}

// shortRevision abbreviates a digest for tables; -o json has it whole.
func shortRevision(r string) string {
	if len(r) > len("sha256:")+12 {
		return r[:len("sha256:")+12] + "…"
	}
	return dash(r)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
