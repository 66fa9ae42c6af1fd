package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/varplane/varplane"
)

// dryRunUsage is the --dry-run flag's help, the same for every write.
const dryRunUsage = "ask the server to check the write as it would make it (your token's rights, review policies, owned scopes, the generation, the document) and change nothing; exits 1 with the refusal when the write would be refused"

// dryRunFlag registers --dry-run on a write command. The server answers a
// dry run (?dryRun=true) down the path of the write itself, so a dry run
// that passes meets no refusal the write would meet, other than a commit
// made in between.
func dryRunFlag(fs *flag.FlagSet) *bool { return fs.Bool("dry-run", false, dryRunUsage) }

// wouldBeRefused marks the refusal of a dry run as such: the message says
// that the write would be refused and that nothing changed; the code,
// details and hint are the write's own.
func wouldBeRefused(verb string, dry bool, err error) error {
	var ve *varplane.Error
	if !dry || !errors.As(err, &ve) {
		return err
	}
	cp := *ve
	cp.Message = fmt.Sprintf("%s would be refused (dry run; nothing changed): %s", verb, varplane.ErrorMessage(ve))
	return &cp
}

// dryNote is the last line of a dry run's text output.
func dryNote(m *Main) error {
	_, err := fmt.Fprintln(m.Stdout, "dry run: the server accepts this write; nothing changed")
	return err
}

// printDeactivation writes what a deactivation did, or, for a dry run,
// what it would do.
func printDeactivation(m *Main, out varplane.DeactivationResult) error {
	if !out.DryRun {
		fmt.Fprintf(m.Stdout, "deactivated %s generation %d\n", out.Scope, out.Generation)
		for _, d := range out.Cascade {
			fmt.Fprintf(m.Stdout, "  also deactivated %s generation %d\n", d.Scope, d.Generation)
		}
		return nil
	}
	if !out.WasActive && len(out.Cascade) == 0 {
		fmt.Fprintf(m.Stdout, "would deactivate nothing: neither %s nor any scope below it is active (the commit would still take generation %d)\n", out.Scope, out.Generation)
	} else {
		how := "active"
		if !out.WasActive {
			how = "not active"
		}
		fmt.Fprintf(m.Stdout, "would deactivate %s at generation %d (%s now)\n", out.Scope, out.Generation, how)
		for _, d := range out.Cascade {
			fmt.Fprintf(m.Stdout, "would deactivate %s at generation %d (below it)\n", d.Scope, d.Generation)
		}
	}
	return dryNote(m)
}
