package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/internal/jsonpatch"
)

// DiffCommand shows what changed in a scope between two points of its
// history, as an RFC 6902 JSON Patch computed here (internal/jsonpatch) from
// GET {base}/admin/history.
type DiffCommand struct {
	m *Main
}

// diffSide is one end of a diff: the document a generation served or a
// revision holds (nil: no head).
type diffSide struct {
	label    string
	revision varplane.Revision
	document json.RawMessage
}

// ANSI colours of the text diff.
const (
	colorRed    = "\x1b[31m"
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
	colorBold   = "\x1b[1m"
	colorReset  = "\x1b[0m"
)

// Run parses args and prints the patch from FROM to TO.
func (c *DiffCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("diff", "SCOPE FROM TO [--color auto|always|never] [flags]", `
Show what changed in a scope between FROM and TO, each a generation (a number:
what the scope served right after it; nothing after a deactivation) or a
revision (sha256:… or a unique prefix of its digits; write sha256:1234 for a
prefix of digits only). The change is an RFC 6902 JSON Patch: "+ path: value"
added, "- path: value" removed, "~ path: old → new" replaced, one a line,
coloured in a terminal. With -o json it prints the patch itself (a JSON
array that RFC 6902 tools apply to FROM). It reads the scope's history, so it
works on every store.`)
	var cf clientFlags
	cf.register(fs, c.m.Getenv)
	scope := fs.String("scope", "", "scope to compare (or the first argument)")
	colour := fs.String("color", "auto", "colour the text diff: auto (in a terminal, unless NO_COLOR is set), always or never")
	pos, err := parseArgs(fs, args, 3)
	if err != nil {
		return err
	}
	if *scope != "" {
		pos = append([]string{*scope}, pos...)
	}
	if len(pos) != 3 {
		return usagef("diff takes SCOPE FROM TO (generations or revisions)")
	}
	var useColour bool
	switch *colour {
	case "auto":
		useColour = isTerminal(c.m.Stdout) && c.m.Getenv("NO_COLOR") == ""
	case "always":
		useColour = true
	case "never":
	default:
		return usagef("--color must be auto, always or never, not %q", *colour)
	}
	sc := varplane.Scope(pos[0])
	for _, arg := range pos[1:] {
		if _, err := client.ParseRevisionPrefix(arg); err != nil && !isGeneration(arg) {
			return usagef("%q is neither a generation nor a revision (prefix)", arg)
		}
	}
	a, err := cf.admin(c.m)
	if err != nil {
		return err
	}
	events, err := a.History(ctx, sc)
	if err != nil {
		return classify(ctx, err)
	}
	from, err := diffEnd(sc, events, pos[1])
	if err != nil {
		return err
	}
	to, err := diffEnd(sc, events, pos[2])
	if err != nil {
		return err
	}
	patch, err := jsonpatch.DiffBounded(ctx, orNull(from.document), orNull(to.document), jsonpatch.Bounds{Old: !cf.json()})
	if err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	if cf.json() {
		return writeJSON(c.m.Stdout, patch)
	}
	return printPatch(c.m.Stdout, sc, from, to, patch, useColour)
}

// isGeneration reports whether s is written as a generation: decimal digits.
func isGeneration(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil && !strings.HasPrefix(s, "+")
}

func orNull(doc json.RawMessage) []byte {
	if doc == nil {
		return []byte("null")
	}
	return doc
}

// diffEnd finds what arg names in the scope's history: a generation's head
// (by its activated or deactivated event) or a revision's document.
func diffEnd(scope varplane.Scope, events []varplane.Event, arg string) (diffSide, error) {
	docs := map[varplane.Revision]json.RawMessage{}
	for _, ev := range events {
		if ev.Kind == varplane.EventRevisionCreated && ev.Document != nil {
			docs[ev.Revision] = ev.Document
		}
	}
	if isGeneration(arg) {
		gen, _ := strconv.ParseUint(arg, 10, 64)
		side := diffSide{label: "generation " + arg + " (no head)"}
		if gen == 0 {
			return side, nil
		}
		for _, ev := range events {
			if ev.Generation != varplane.Generation(gen) || (ev.Kind != varplane.EventActivated && ev.Kind != varplane.EventDeactivated) {
				continue
			}
			if ev.Kind == varplane.EventActivated {
				side.revision, side.document = ev.Revision, docs[ev.Revision]
				side.label = "generation " + arg + " (" + shortRevision(string(ev.Revision)) + ")"
			}
			return side, nil
		}
		return diffSide{}, varplane.Errorf(varplane.CodeNotFound, "%s never reached generation %s", scope, arg)
	}
	hex, _ := client.ParseRevisionPrefix(arg)
	rev, err := client.MatchRevision(events, hex)
	if err != nil {
		return diffSide{}, err
	}
	doc, ok := docs[rev]
	if !ok {
		return diffSide{}, varplane.Errorf(varplane.CodeNotFound, "the history of %s does not hold the document of %s", scope, rev)
	}
	return diffSide{label: "revision " + shortRevision(string(rev)), revision: rev, document: doc}, nil
}

// printPatch writes the patch one operation a line, with the old value of
// what it removes or replaces (the patch's Old).
func printPatch(w io.Writer, scope varplane.Scope, from, to diffSide, patch jsonpatch.Patch, colour bool) error {
	paint := func(code, s string) string {
		if !colour {
			return s
		}
		return code + s + colorReset
	}
	fmt.Fprintln(w, paint(colorBold, fmt.Sprintf("--- %s %s", scope, from.label)))
	fmt.Fprintln(w, paint(colorBold, fmt.Sprintf("+++ %s %s", scope, to.label)))
	if len(patch) == 0 {
		_, err := fmt.Fprintln(w, "no differences")
		return err
	}
	colours := map[string]string{jsonpatch.OpAdd: colorGreen, jsonpatch.OpRemove: colorRed}
	for _, op := range patch {
		c, ok := colours[op.Op]
		if !ok {
			c = colorYellow
		}
		if _, err := fmt.Fprintln(w, paint(c, jsonpatch.Line(op.Op, op.Path, op.Old, op.Value, "(document)", "→"))); err != nil {
			return err
		}
	}
	return nil
}
