package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane/control"
)

// WaitCommand is `varplane wait SCOPE --generation N`: it waits until a
// share of the live instances has installed generation N of SCOPE, for CI
// pipelines (GET {base}/control/documents/{scope}/wait, asked again every
// minute at most until --timeout).
type WaitCommand struct {
	m *Main
}

// Run parses args, waits and exits 0 once the share is met; 1 on a
// rejection (with --fail-on-rejections) or at the timeout.
func (c *WaitCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("wait", "SCOPE --generation N [--min 95%] [--timeout D] [--fail-on-rejections] [flags]", `
Wait until --min of the live instances that hold SCOPE (their status at most a
minute old) have installed generation N or a later one. Exits 0 when they
have; 1 when --timeout passes first, or, with --fail-on-rejections, as soon
as an instance installed the generation as failed (it could not decode it);
3 when the server does not answer. The progress is printed as it moves.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	var gen uintFlag
	fs.Var(&gen, "generation", "the generation to wait for (required)")
	minText := fs.String("min", "100%", "the share of the live instances that must have installed it (95% or 95)")
	// --timeout, every client command's, is here how long to wait in all;
	// each request holds at most control.MaxWait.
	tf := fs.Lookup("timeout")
	tf.Usage, tf.DefValue = "how long to wait in all", "5m0s"
	_ = tf.Value.Set(tf.DefValue)
	timeout := &cf.timeout
	failOnRejections := fs.Bool("fail-on-rejections", false, "exit 1 as soon as an instance rejects the generation")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("wait needs a scope (the first argument)")
	}
	scope := pos[0]
	if !gen.set || gen.value == 0 {
		return usagef("--generation is required (at least 1)")
	}
	share, err := strconv.ParseFloat(strings.TrimSuffix(*minText, "%"), 64)
	if err != nil || share < 0 || share > 100 {
		return usagef("--min must be a share from 0 to 100 percent, such as 95%%")
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	deadline := time.Now().Add(*timeout)
	total := *timeout
	cf.timeout = control.MaxWait + 15*time.Second
	timeout = &total
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	last := ""
	for {
		hold := min(time.Until(deadline), control.MaxWait)
		if hold < 0 {
			hold = 0
		}
		q := url.Values{"generation": {strconv.FormatUint(gen.value, 10)}, "min": {strconv.FormatFloat(share, 'f', -1, 64)},
			"timeout": {hold.Round(time.Millisecond).String()}}
		var p control.WaitProgress
		if err := a.Call(ctx, http.MethodGet, "/control/documents/"+url.PathEscape(scope)+"/wait", q, nil, &p); err != nil {
			return classify(ctx, err)
		}
		line := fmt.Sprintf("%s generation %d: %d of %d live instances (%.1f%%, want %.1f%%)", p.Scope, p.Generation, p.Installed, p.Live, p.Share, p.Min)
		if len(p.Rejected) > 0 {
			line += fmt.Sprintf(", rejected by %s", strings.Join(p.Rejected, ", "))
			if p.RejectedOmitted > 0 {
				line += fmt.Sprintf(" and %d more", p.RejectedOmitted)
			}
		}
		if line != last && !cf.json() {
			fmt.Fprintln(c.m.Stdout, line)
			last = line
		}
		done := p.Met || (*failOnRejections && len(p.Rejected) > 0) || p.Unknown != "" || !time.Now().Before(deadline)
		if !done {
			continue
		}
		if cf.json() {
			if err := writeJSON(c.m.Stdout, p); err != nil {
				return err
			}
		}
		switch {
		case p.Unknown != "":
			return &refusedError{msg: "wait: " + p.Unknown}
		case *failOnRejections && len(p.Rejected) > 0:
			return &refusedError{msg: fmt.Sprintf("wait: generation %d of %s was rejected by %d instance(s)", p.Generation, p.Scope, len(p.Rejected)+p.RejectedOmitted)}
		case p.Met:
			return nil
		}
		return &refusedError{msg: fmt.Sprintf("wait: timed out after %v: %d of %d live instances have generation %d of %s (want %.1f%%)", *timeout, p.Installed, p.Live, p.Generation, p.Scope, p.Min)}
	}
}
