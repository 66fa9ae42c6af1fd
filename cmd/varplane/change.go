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

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/control"
)

// ChangeCommand is `varplane change SUBCOMMAND`: the change requests of the
// control API ({base}/control/changes).
type ChangeCommand struct {
	m *Main
}

// changeView is the part of a change the text output shows.
type changeView struct {
	ID         string    `json:"id"`
	Scope      string    `json:"scope"`
	Base       uint64    `json:"base"`
	Revision   string    `json:"revision"`
	Author     string    `json:"author"`
	State      string    `json:"state"`
	Note       string    `json:"note"`
	ProposedAt time.Time `json:"proposedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	Approvals  []struct {
		By string `json:"by"`
	} `json:"approvals"`
	Checks []struct {
		Name     string `json:"name"`
		Passed   bool   `json:"passed"`
		SchemaID string `json:"schemaId"`
		Issues   []struct {
			Code, Path, Message string
		} `json:"issues"`
	} `json:"checks"`
	Published *struct {
		Generation uint64 `json:"generation"`
		By         string `json:"by"`
	} `json:"published"`
	AfterPublish *struct {
		Outcome string   `json:"outcome"`
		Reason  string   `json:"reason"`
		Moved   []string `json:"moved"`
	} `json:"afterPublish"`
	Canary *client.CanaryWindow `json:"canary"`
	// Rollout is the rollout that publishes (or published, or rolled
	// back) the change in steps.
	Rollout string `json:"rollout"`
}

const changeUsage = `propose|rollback|show|list|approve|reject|withdraw|publish|rebase ...`

// Run dispatches to the subcommand.
func (c *ChangeCommand) Run(ctx context.Context, args []string) error {
	sub, rest, err := subcommand(c.m, "change", changeUsage, changeHelp, args)
	if err != nil {
		return err
	}
	switch sub {
	case "propose":
		return c.propose(ctx, rest)
	case "show":
		return c.transition(ctx, sub, rest)
	case "list":
		return c.list(ctx, rest)
	case "approve", "reject", "withdraw", "publish":
		return c.transition(ctx, sub, rest)
	case "rebase":
		return c.rebase(ctx, rest)
	case "rollback":
		return c.rollback(ctx, rest)
	}
	return usagef("varplane change: unknown subcommand %q (%s)", sub, changeUsage)
}

const changeHelp = `Subcommands:
  propose SCOPE [-f FILE] [--base-generation N] [--note TEXT] [--schema-id ID]
                        propose a document (JSON or YAML; stdin without -f) on base generation N
                        (default: the scope's current generation)
  rollback SCOPE [--to-generation N] [--note TEXT]
                        propose a change whose document is generation N's (default: the one
                        before the current generation): a rollback under a review policy
  show ID               show a change (and its canary window's reports, per instance)
  list [--scope S] [--state open|STATE]
                        list changes, newest first
  approve ID [--note]   approve (never your own change)
  reject ID [--note]    reject
  withdraw ID [--note]  withdraw your own change
  publish ID            publish: the head moves only if it is still at the change's base
  rebase ID [--base-generation N]
                        move a change onto N (default: the current generation) and check it again
`

// flags returns a FlagSet for subcommand sub with the client flags.
func (c *ChangeCommand) flags(sub, synopsis, what string, cf *clientFlags) *flag.FlagSet {
	fs := c.m.newFlagSet("change "+sub, synopsis, what)
	cf.register(fs, c.m.Getenv)
	return fs
}

// scoped parses a subcommand that names a scope first: the scope, and the
// client of the flags.
func (c *ChangeCommand) scoped(fs *flag.FlagSet, cf *clientFlags, args []string) (string, *client.Admin, error) {
	scope, args := firstArg(args)
	if err := parseFlags(fs, args); err != nil {
		return "", nil, err
	}
	if err := requireFlag("scope (the first argument)", scope); err != nil {
		return "", nil, err
	}
	a, err := cf.admin(c.m)
	return scope, a, err
}

// firstArg takes a leading positional argument off args.
func firstArg(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

func (c *ChangeCommand) propose(ctx context.Context, args []string) error {
	var cf clientFlags
	fs := c.flags("propose", "SCOPE [-f FILE] [--base-generation N] [flags]", "Propose a change of SCOPE's document on a base generation; the server checks it at once.", &cf)
	file := fs.String("f", "", "file holding the document (JSON or YAML); stdin when absent or -")
	var base uintFlag
	fs.Var(&base, "base-generation", "generation the change is proposed on (default: the scope's current one)")
	note := fs.String("note", "", "why the change is made")
	schemaID := fs.String("schema-id", "", "schemaId to validate the document against")
	scope, a, err := c.scoped(fs, &cf, args)
	if err != nil {
		return err
	}
	doc, err := readDocument(*file, c.m.Stdin)
	if err != nil {
		return err
	}
	if !base.set {
		if base.value, err = currentGeneration(ctx, a, scope); err != nil {
			return err
		}
	}
	req := struct {
		Scope    string          `json:"scope"`
		Base     uint64          `json:"base"`
		Document json.RawMessage `json:"document"`
		SchemaID string          `json:"schemaId,omitempty"`
		Note     string          `json:"note,omitempty"`
	}{scope, base.value, doc, *schemaID, *note}
	var ch json.RawMessage
	if err := a.Call(ctx, http.MethodPost, "/control/changes", nil, req, &ch); err != nil {
		return classify(ctx, err)
	}
	return c.show(&cf, ch)
}

// rollback proposes a change that makes scope what it was at a generation
// (POST {base}/control/documents/{scope}:rollback): the way to roll back a
// scope under a review policy. It is checked, approved and published like
// any change.
func (c *ChangeCommand) rollback(ctx context.Context, args []string) error {
	var cf clientFlags
	fs := c.flags("rollback", "SCOPE [--to-generation N] [--note TEXT] [flags]", "Propose a change whose document is the one SCOPE had at generation N (default: the generation before the current one); it is checked, approved and published like any change.", &cf)
	var to uintFlag
	fs.Var(&to, "to-generation", "the generation whose document the change brings back (default: the one before the current)")
	note := fs.String("note", "", "why the change is made")
	scope, a, err := c.scoped(fs, &cf, args)
	if err != nil {
		return err
	}
	if !to.set {
		cur, err := currentGeneration(ctx, a, scope)
		if err != nil {
			return err
		}
		if cur < 2 {
			return usagef("%s is at generation %d: there is no earlier generation to roll back to", scope, cur)
		}
		to.value = cur - 1
		if !cf.json() {
			fmt.Fprintf(c.m.Stderr, "change rollback: %s is at generation %d; proposing generation %d's document\n", scope, cur, to.value)
		}
	}
	body := struct {
		Revision uint64 `json:"revision"`
		Note     string `json:"note,omitempty"`
	}{to.value, *note}
	var ch json.RawMessage
	if err := a.Call(ctx, http.MethodPost, "/control/documents/"+url.PathEscape(scope)+":rollback", nil, body, &ch); err != nil {
		return classify(ctx, err)
	}
	return c.show(&cf, ch)
}

// currentGeneration reads scope's generation from the var API's status.
func currentGeneration(ctx context.Context, a *client.Admin, scope string) (uint64, error) {
	st, err := a.Status(ctx, varplane.Scope(scope))
	if err != nil {
		return 0, classify(ctx, err)
	}
	return uint64(st.Generation), nil
}

// transition is show (GET) and the transitions that take only a note.
func (c *ChangeCommand) transition(ctx context.Context, sub string, args []string) error {
	var cf clientFlags
	id, note, a, err := c.m.idAndNote(&cf, "change", sub, "a change request", args)
	if err != nil {
		return err
	}
	ch, err := showOrAct(ctx, a, "changes", id, sub, note)
	if sub == "publish" {
		// A change's publish has no idempotency key or expected
		// generation to repeat with: repeating it is what finishes it.
		err = withOutcomeHint(err, fmt.Sprintf("the publish may have happened: `varplane change show %s` tells its state; "+
			"`varplane change publish %s` again finishes a publish that is under way and changes nothing twice", id, id))
	}
	if err != nil {
		return classify(ctx, err)
	}
	if err := c.show(&cf, ch); err != nil || sub != "show" || cf.json() {
		return err
	}
	return c.showReports(ctx, a, ch)
}

// idAndNote parses the arguments of `varplane NOUN SUB ID [--note N]`
// (show, or a transition that takes only a note): the ID, the note (none
// for show), and the client of cf's flags. Changes and rollouts share it.
func (m *Main) idAndNote(cf *clientFlags, noun, sub, what string, args []string) (id, note string, a *client.Admin, err error) {
	fs := m.newFlagSet(noun+" "+sub, "ID [flags]", sub+" "+what+".")
	cf.register(fs, m.Getenv)
	if sub != "show" {
		fs.StringVar(&note, "note", "", "a note recorded with the "+noun+"'s event")
	}
	id, args = firstArg(args)
	if err := parseFlags(fs, args); err != nil {
		return "", "", nil, err
	}
	if err := requireFlag(noun+" id (the first argument)", id); err != nil {
		return "", "", nil, err
	}
	a, err = cf.admin(m)
	return id, note, a, err
}

// showOrAct reads the control API's object /control/{collection}/{id}
// (op "show"), or asks it op with an optional note: POST
// /control/{collection}/{id}:{op} {note?}. Changes and rollouts share it.
func showOrAct(ctx context.Context, a *client.Admin, collection, id, op, note string) (json.RawMessage, error) {
	var out json.RawMessage
	path := "/control/" + collection + "/" + url.PathEscape(id)
	if op == "show" {
		return out, a.Call(ctx, http.MethodGet, path, nil, nil, &out)
	}
	body := struct {
		Note string `json:"note,omitempty"`
	}{note}
	return out, a.Call(ctx, http.MethodPost, path+":"+op, nil, body, &out)
}

// showReports prints, under a change that opened a canary window, each
// instance's report (the doubtful ones and those that do not count toward
// the window's minimum marked with why) and the fresh
// instances that have not reported. The JSON output stays the change's
// own answer; the reports route is GET {base}/control/changes/{id}/reports.
func (c *ChangeCommand) showReports(ctx context.Context, a *client.Admin, body json.RawMessage) error {
	var ch changeView
	if err := json.Unmarshal(body, &ch); err != nil || ch.Canary == nil {
		return nil
	}
	rep, err := a.ChangeReports(ctx, ch.ID)
	if err != nil {
		return classify(ctx, err)
	}
	return printReports(c.m.Stdout, &rep)
}

func printReports(w io.Writer, rep *client.ChangeReports) error {
	var b strings.Builder
	win := rep.Window
	fmt.Fprintf(&b, "  canary window %s: %s, closes %s, at least %d instance(s)\n", win.ID, win.State, win.ClosesAt.Format(time.RFC3339), win.MinInstances)
	if win.Reason != "" {
		fmt.Fprintf(&b, "    reason: %s\n", win.Reason)
	}
	if len(rep.Reports) == 0 {
		b.WriteString("    no report yet\n")
	}
	for _, r := range rep.Reports {
		fmt.Fprintf(&b, "    report of %s: decoded %d, errors %d, at %s", r.FiledAs, r.Decoded, r.Errors, r.At.Format(time.RFC3339))
		if r.Instance != r.FiledAs {
			fmt.Fprintf(&b, ", naming instance %s", r.Instance)
		}
		if r.CandidateError != "" {
			fmt.Fprintf(&b, ", candidate error: %s", r.CandidateError)
		}
		if r.Identity != "" {
			fmt.Fprintf(&b, ", filed by %s", r.Identity)
		}
		if r.Doubtful {
			fmt.Fprintf(&b, " (doubtful: %s)", r.Doubt)
		}
		if r.Discount != "" {
			fmt.Fprintf(&b, " (does not count: %s)", r.Discount)
		}
		b.WriteString("\n")
	}
	for _, id := range rep.Unreported {
		fmt.Fprintf(&b, "    no report from %s (its status is fresh)\n", id)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (c *ChangeCommand) rebase(ctx context.Context, args []string) error {
	var cf clientFlags
	fs := c.flags("rebase", "ID [--base-generation N] [flags]", "Move a change onto a new base and check it again.", &cf)
	var base uintFlag
	fs.Var(&base, "base-generation", "the new base (default: the scope's current generation)")
	id, args := firstArg(args)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("change id (the first argument)", id); err != nil {
		return err
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	path := "/control/changes/" + url.PathEscape(id)
	if !base.set {
		var ch changeView
		if err := a.Call(ctx, http.MethodGet, path, nil, nil, &ch); err != nil {
			return classify(ctx, err)
		}
		if base.value, err = currentGeneration(ctx, a, ch.Scope); err != nil {
			return err
		}
	}
	var ch json.RawMessage
	if err := a.Call(ctx, http.MethodPost, path+":rebase", nil, struct {
		Base uint64 `json:"base"`
	}{base.value}, &ch); err != nil {
		return classify(ctx, err)
	}
	return c.show(&cf, ch)
}

func (c *ChangeCommand) list(ctx context.Context, args []string) error {
	var cf clientFlags
	fs := c.flags("list", "[--scope S] [--state STATE] [flags]", "List change requests, newest first.", &cf)
	scope := fs.String("scope", "", "only the changes of this scope")
	state := fs.String("state", "", "only changes in this state (open: every state that may still move)")
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
	if *state != "" {
		q.Set("state", *state)
	}
	var out struct {
		Changes []changeView `json:"changes"`
	}
	if err := a.Call(ctx, http.MethodGet, "/control/changes", q, nil, &out); err != nil {
		return classify(ctx, err)
	}
	return emit(c.m.Stdout, cf.json(), out, func() error {
		for _, ch := range out.Changes {
			if _, err := fmt.Fprintf(c.m.Stdout, "%s %s %s base %d by %s %s\n", ch.ID, ch.Scope, ch.State, ch.Base, ch.Author, ch.ProposedAt.Format(time.RFC3339)); err != nil {
				return err
			}
		}
		return nil
	})
}

// show prints one change: a header line, then its checks, approvals and
// publication.
func (c *ChangeCommand) show(cf *clientFlags, body json.RawMessage) error {
	return emit(c.m.Stdout, cf.json(), body, func() error {
		var ch changeView
		if err := json.Unmarshal(body, &ch); err != nil {
			return fmt.Errorf("decode the change: %w", err)
		}
		return printChange(c.m.Stdout, &ch)
	})
}

func printChange(w io.Writer, ch *changeView) error {
	var b strings.Builder
	fmt.Fprintf(&b, "change %s %s %s base %d by %s\n", ch.ID, ch.Scope, ch.State, ch.Base, ch.Author)
	if ch.Note != "" {
		fmt.Fprintf(&b, "  note: %s\n", ch.Note)
	}
	if ch.Revision != "" {
		fmt.Fprintf(&b, "  revision: %s\n", ch.Revision)
	}
	if ch.Rollout != "" {
		fmt.Fprintf(&b, "  rollout: %s (varplane rollout show %s)\n", ch.Rollout, ch.Rollout)
	}
	for _, k := range ch.Checks {
		verdict := "passed"
		if !k.Passed {
			verdict = "failed"
		}
		switch {
		case k.Name != control.SchemaCheck:
		case k.SchemaID != "":
			verdict += " against " + k.SchemaID
		default:
			// "passed" alone would read as a schema's verdict.
			verdict += " (no schema bound or named: syntax and numbers only)"
		}
		fmt.Fprintf(&b, "  check %s: %s\n", k.Name, verdict)
		for _, is := range k.Issues {
			fmt.Fprintf(&b, "    %s at %s: %s\n", is.Code, is.Path, is.Message)
		}
	}
	for _, a := range ch.Approvals {
		fmt.Fprintf(&b, "  approved by %s\n", a.By)
	}
	if p := ch.Published; p != nil {
		fmt.Fprintf(&b, "  published as generation %d by %s\n", p.Generation, p.By)
	}
	if a := ch.AfterPublish; a != nil {
		fmt.Fprintf(&b, "  after publish: %s", a.Outcome)
		if a.Reason != "" {
			fmt.Fprintf(&b, " (%s)", a.Reason)
		}
		if len(a.Moved) > 0 {
			fmt.Fprintf(&b, "; moved: %s", strings.Join(a.Moved, ", "))
		}
		b.WriteString("\n")
	}
	if ch.State != "published" && !ch.ExpiresAt.IsZero() {
		fmt.Fprintf(&b, "  expires: %s\n", ch.ExpiresAt.Format(time.RFC3339))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
