package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/varplane/varplane/control"
)

// InstancesCommand lists the fleet: GET {base}/control/instances, or
// {base}/control/documents/{scope}/instances for one scope, every page.
type InstancesCommand struct {
	m *Main
}

// Run parses args and prints the instances in id order, following the
// pages to the end unless --limit asks for one page.
func (c *InstancesCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("instances", "[SCOPE] [--limit N [--after ID]] [flags]", `
List the instances that report to the server (instance caches and SDK
consumers, by their status heartbeat, in the last hour), in id order: whether
each is live (its status at most a minute old) or was last seen longer ago
(listed as "last seen" with its age, and counted nowhere), its labels, and per scope the generation and revision it installed,
how many generations it is behind the head and for how long, then the
documents it rejected (installed as failed, or a canary candidate it
reported errors for) and its last canary report. With SCOPE (also --scope)
each instance shows that scope alone. Only the scopes the token may audit are
shown. Without --limit every page is fetched; with it one page is printed, and
the next one is --after the id printed last ("next:" says which).`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "show this scope alone (or the first argument)")
	after := fs.String("after", "", "start after this instance id (the next: of the previous page)")
	limit := fs.Int("limit", 0, fmt.Sprintf("print one page of at most N instances (1 to %d)", control.MaxFleetLimit))
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := scopeArg(pos, scope); err != nil {
		return err
	}
	if *limit < 0 || *limit > control.MaxFleetLimit {
		return usagef("--limit must be from 1 to %d", control.MaxFleetLimit)
	}
	if *after != "" && *limit == 0 {
		return usagef("--after pages: give --limit with it")
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	path := "/control/instances"
	if *scope != "" {
		path = "/control/documents/" + url.PathEscape(*scope) + "/instances"
	}
	var page control.FleetPage
	cursor := *after
	for {
		q := url.Values{}
		if cursor != "" {
			q.Set("after", cursor)
		}
		if *limit > 0 {
			q.Set("limit", strconv.Itoa(*limit))
		} else {
			q.Set("limit", strconv.Itoa(control.MaxFleetLimit))
		}
		var p control.FleetPage
		if err := a.Call(ctx, http.MethodGet, path, q, nil, &p); err != nil {
			return classify(ctx, err)
		}
		page.AsOf, page.FreshSeconds, page.Unknown, page.Next = p.AsOf, p.FreshSeconds, p.Unknown, p.Next
		page.WindowsOmitted = max(page.WindowsOmitted, p.WindowsOmitted)
		page.Instances = append(page.Instances, p.Instances...)
		if *limit > 0 || p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if page.Instances == nil {
		page.Instances = []control.FleetInstance{}
	}
	return emit(c.m.Stdout, cf.json(), page, func() error {
		if err := printFleet(c.m.Stdout, &page); err != nil {
			return err
		}
		if *limit > 0 && page.Next != "" {
			next := "varplane instances"
			if *scope != "" {
				next += " " + *scope
			}
			_, err := fmt.Fprintf(c.m.Stdout, "next: %s --limit %d --after %s\n", next, *limit, page.Next)
			return err
		}
		return nil
	})
}

// printFleet prints a fleet page as a table of instances and their scopes,
// followed by each instance's labels, rejections and last report.
func printFleet(w io.Writer, page *control.FleetPage) error {
	if page.Unknown != "" {
		_, err := fmt.Fprintf(w, "instances unknown: %s\n", page.Unknown)
		return err
	}
	if len(page.Instances) == 0 {
		_, err := fmt.Fprintln(w, "no instances")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tSTATUS\tAGE\tSCOPE\tGEN\tBEHIND\tREVISION")
	for _, in := range page.Instances {
		status := "live"
		if !in.Live {
			status = "last seen"
		}
		if !in.Ready {
			status += ",not-ready"
		}
		age := seconds(in.AgeSeconds)
		if len(in.Scopes) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\n", in.Instance, status, age)
		}
		for i, s := range in.Scopes {
			name, st, ag := in.Instance, status, age
			if i > 0 {
				name, st, ag = "", "", ""
			}
			rev := shortRevision(string(s.Revision))
			if s.Failed {
				rev += " (failed)"
			}
			if s.Rollout != "" {
				rev += " (serving " + shortRevision(string(s.Serving)) + " of rollout " + s.Rollout + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", name, st, ag, s.Scope, s.Generation, behind(s), rev)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, in := range page.Instances {
		if len(in.Labels) > 0 {
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
				kv = append(kv, k+"="+in.Labels[k])
			}
			fmt.Fprintf(w, "%s: labels %s\n", in.Instance, strings.Join(kv, " "))
		}
		if in.ScopesOmitted > 0 {
			fmt.Fprintf(w, "%s: %d more scopes not shown (give SCOPE to see one)\n", in.Instance, in.ScopesOmitted)
		}
		for _, r := range in.Rejections {
			switch r.Kind {
			case control.RejectionDecode:
				fmt.Fprintf(w, "%s: rejected %s generation %d %s: installed as failed (did not decode)\n", in.Instance, r.Scope, r.Generation, shortRevision(string(r.Revision)))
			default:
				fmt.Fprintf(w, "%s: rejected the candidate of change %s (%s, window %s): %d errors %s\n", in.Instance, r.Change, r.Scope, r.Window, r.Errors, dash(r.Error))
			}
		}
		if r := in.LastReport; r != nil {
			fmt.Fprintf(w, "%s: last report %s on change %s (%s): decoded %d, errors %d\n", in.Instance, shortTime(r.At), r.Change, r.Scope, r.Decoded, r.Errors)
		}
	}
	if page.WindowsOmitted > 0 {
		fmt.Fprintf(w, "reports of %d more open canary windows not read\n", page.WindowsOmitted)
	}
	return nil
}

// behind says how far an installed scope is behind its head.
func behind(s control.FleetScope) string {
	switch {
	case s.Head == 0:
		return "?"
	case s.Behind == 0:
		return "-"
	case s.BehindSeconds > 0:
		return fmt.Sprintf("%d (%s)", s.Behind, seconds(s.BehindSeconds))
	}
	return strconv.FormatUint(s.Behind, 10)
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
