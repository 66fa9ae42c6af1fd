package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// HistoryCommand lists a scope's audit log: GET {base}/admin/history.
type HistoryCommand struct {
	m *Main
}

// Run parses args and prints every event of the scope, oldest first.
func (c *HistoryCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("history", "--scope SCOPE [flags]", `
List every event of a scope's append-only audit log, oldest first: revisions
created, activations (rollbacks included), deactivations and rejections, with
generation, actor, reason and time. With -o json the documents are included.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to list (required)")
	cl, err := cf.parseScoped(fs, args, scope, c.m.Stdout)
	if err != nil {
		return err
	}
	resp, err := cl.do(ctx, http.MethodGet, "/admin/history", url.Values{"scope": {*scope}}, nil, nil)
	if err != nil {
		return err
	}
	return emit(c.m.Stdout, cf.json(), resp.body, func() error {
		var out struct {
			Scope  string `json:"scope"`
			Events []struct {
				Kind            string    `json:"kind"`
				Revision        string    `json:"revision"`
				Generation      uint64    `json:"generation"`
				Actor           string    `json:"actor"`
				Reason          string    `json:"reason"`
				RejectionReason string    `json:"rejectionReason"`
				Timestamp       time.Time `json:"timestamp"`
				Cascade         []struct {
					Scope string `json:"scope"`
				} `json:"cascade"`
			} `json:"events"`
		}
		if err := decodeAnswer(resp.body, &out); err != nil {
			return err
		}
		if len(out.Events) == 0 {
			_, err := fmt.Fprintf(c.m.Stdout, "%s has no events\n", out.Scope)
			return err
		}
		tw := tabwriter.NewWriter(c.m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tKIND\tGEN\tREVISION\tACTOR\tREASON")
		for _, ev := range out.Events {
			gen := "-"
			if ev.Kind == "activated" || ev.Kind == "deactivated" {
				gen = fmt.Sprint(ev.Generation)
			}
			reason := ev.Reason
			if ev.RejectionReason != "" {
				reason = ev.RejectionReason
			}
			if len(ev.Cascade) > 0 {
				names := make([]string, len(ev.Cascade))
				for i, d := range ev.Cascade {
					names[i] = d.Scope
				}
				reason = strings.TrimSpace(reason + " (also " + strings.Join(names, ", ") + ")")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", shortTime(ev.Timestamp), ev.Kind, gen, shortRevision(ev.Revision), dash(ev.Actor), dash(reason))
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
