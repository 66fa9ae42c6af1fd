package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/internal/migrate"
	"github.com/varplane/varplane/schema"
)

// MigrateCommand moves documents into and out of a store directly, without
// a server: publish, bootstrap, export. Its exit codes are those of the
// migration tool: 0 done, 1 data rejected or a write failed, 2 usage.
type MigrateCommand struct {
	m *Main
}

// migrateSubcommands are the subcommands of migrate, in the order -h lists them.
var migrateSubcommands = []struct {
	name, summary string
	new           func(m *Main) command
}{
	{"publish", "publish a directory of documents into a store, root first, never overwriting", func(m *Main) command { return &MigratePublishCommand{m: m} }},
	{"bootstrap", "name the first administrator and print its token, once", func(m *Main) command { return &MigrateBootstrapCommand{m: m} }},
	{"export", "write every head of a store as a directory publish accepts", func(m *Main) command { return &MigrateExportCommand{m: m} }},
}

// Run dispatches to the subcommand args[0].
func (c *MigrateCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := c.m.Stderr
		if len(args) > 0 {
			w = c.m.Stdout
		}
		fmt.Fprint(w, `Usage: varplane migrate <publish|bootstrap|export> [flags]

Work on a store directly (file:PATH, redis://…), without a server. Exit
codes: 0 done, 1 data rejected or a write failed, 2 usage.

Subcommands:
`)
		for _, s := range migrateSubcommands {
			fmt.Fprintf(w, "  %-9s %s\n", s.name, s.summary)
		}
		if len(args) == 0 {
			return &usageError{err: errors.New("migrate: a subcommand is required"), reported: true}
		}
		return nil
	}
	for _, s := range migrateSubcommands {
		if s.name == args[0] {
			return s.new(c.m).Run(ctx, args[1:])
		}
	}
	return usagef("migrate: unknown subcommand %q (want publish, bootstrap or export)", args[0])
}

// openMigrationStore opens the store spec names for a migration, and an
// engine over it that reserves the access scope (the tool writes it as its
// owner). Store warnings go to stderr.
func openMigrationStore(ctx context.Context, flagName, spec string, stderr io.Writer, validator varplane.Validator) (*varplane.Engine, func(), error) {
	if spec == "" {
		return nil, nil, usagef("--%s STORE_URL is required (file:PATH or redis://HOST:PORT)", flagName)
	}
	if strings.HasPrefix(spec, "memory:") {
		return nil, nil, usagef("--%s memory: would be lost when the command ends; name a file: or redis:// store", flagName)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	store, _, err := openStore(octx, spec, redisFlags{}, log)
	if err != nil {
		return nil, nil, err
	}
	e := varplane.NewEngine(store, varplane.Options{Validator: validator, Logger: log, Owners: []varplane.Owner{access.Owner}})
	return e, func() { e.Close(); _ = store.Close() }, nil
}

// migrateOwned are the subsystems whose scopes migrate publish writes in
// their name, each checking its documents first: the access control's
// principals (the engine above reserves its scope).
var migrateOwned = []migrate.Owned{{Owner: access.Owner, Check: func(doc []byte) error {
	_, err := access.ParseDocument(doc)
	return err
}}}

// migrationFailure reports err as the tool does: a rejection lists every
// problem, anything else is one line; both exit 1.
func migrationFailure(err error) error {
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	var re *migrate.RejectedError
	if errors.As(err, &re) {
		return &refusedError{msg: "error: " + re.Error()}
	}
	return &refusedError{msg: "error: " + err.Error()}
}

// printReport writes one line per document and a summary, or the report as
// JSON.
func printReport(w io.Writer, asJSON bool, rep *migrate.Report) error {
	if rep == nil {
		return nil
	}
	if asJSON {
		return writeJSON(w, rep)
	}
	for _, d := range rep.Documents {
		switch d.Status {
		case migrate.StatusSkipped:
			fmt.Fprintf(w, "skipped   %s → %s (already published identically, %s)\n", d.Path, d.Scope, d.Revision)
		default:
			fmt.Fprintf(w, "%-9s %s → %s generation %d %s\n", d.Status, d.Path, d.Scope, d.Generation, d.Revision)
		}
	}
	if rep.Exported > 0 {
		_, err := fmt.Fprintf(w, "exported %d document(s)\n", rep.Exported)
		return err
	}
	_, err := fmt.Fprintf(w, "published %d, skipped %d\n", rep.Published, rep.Skipped)
	return err
}

func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return usagef("-o must be text or json, not %q", o)
	}
	return nil
}

// MigratePublishCommand is `migrate publish`.
type MigratePublishCommand struct {
	m *Main
}

// Run checks and publishes the directory.
func (c *MigratePublishCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("migrate publish", "--to STORE_URL --in DIR [--root SCOPE] [--resume] [flags]", `
Publish the documents of DIR into the store: root.json (required) as the
root scope, scopes/<scope>.json or .yaml as <scope>, each checked against
the SHA-256 report.json records. Every digest is checked and every document
validated (schemas from --documents, the access scope by its decoder), and
every head read, before anything is written: any problem writes nothing.
The root is published first. A scope that already has a head stops the run
and is named; --resume skips scopes already serving the same document.
Exit 0 done, 1 rejected or a publish failed, 2 usage.`)
	to := fs.String("to", "", "store URL to publish into: file:PATH or redis://HOST:PORT")
	in := fs.String("in", "", "the directory to publish")
	root := fs.String("root", string(migrate.DefaultRoot), "the scope root.json is published as")
	resume := fs.Bool("resume", false, "skip documents already published identically (to continue an interrupted run)")
	documents := fs.String("documents", "", "directory of JSON Schemas (as serve --documents) for documents report.json names a schema for")
	output := fs.String("o", "text", "output format: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	if err := requireFlag("in", *in); err != nil {
		return err
	}
	if _, err := varplane.ParseScope(*root); err != nil {
		return usagef("--root %q: %s", *root, varplane.ErrorMessage(err))
	}
	var validator varplane.Validator
	if *documents != "" {
		reg, err := schema.LoadDir(ctx, *documents)
		if err != nil {
			return &usageError{err: fmt.Errorf("--documents: %w", err)}
		}
		validator = reg
	}
	e, closeStore, err := openMigrationStore(ctx, "to", *to, c.m.Stderr, validator)
	if err != nil {
		return migrationFailure(err)
	}
	defer closeStore()
	rep, err := migrate.Publish(ctx, e, *in, migrate.PublishOptions{Root: varplane.Scope(*root), Resume: *resume, Owned: migrateOwned})
	if perr := printReport(c.m.Stdout, *output == "json", rep); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return migrationFailure(err)
	}
	return nil
}

// MigrateBootstrapCommand is `migrate bootstrap`.
type MigrateBootstrapCommand struct {
	m *Main
}

// Run binds the first administrator and prints its token once.
func (c *MigrateBootstrapCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("migrate bootstrap", "--to STORE_URL --admin PRINCIPAL [--force] [flags]", `
Name the first administrator: write a principal PRINCIPAL holding every
kind on every scope and every role into the access scope, as a revision
whose reason is "bootstrap", and print its token (shown once). Refused
(exit 1) when an administrator exists; --force is the recovery when every
administrator is lost, and replaces PRINCIPAL's token if it exists.`)
	to := fs.String("to", "", "store URL: file:PATH or redis://HOST:PORT")
	admin := fs.String("admin", "", "id of the first administrator")
	force := fs.Bool("force", false, "bootstrap even though an administrator exists (recovery)")
	output := fs.String("o", "text", "output format: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	if err := requireFlag("admin", *admin); err != nil {
		return err
	}
	e, closeStore, err := openMigrationStore(ctx, "to", *to, c.m.Stderr, nil)
	if err != nil {
		return migrationFailure(err)
	}
	defer closeStore()
	created, err := access.NewService(e).Bootstrap(ctx, *admin, "migrate", *force)
	if err != nil {
		return migrationFailure(err)
	}
	if *output == "json" {
		return writeJSON(c.m.Stdout, created)
	}
	fmt.Fprintf(c.m.Stdout, "bootstrapped administrator %s (generation %d %s)\n", created.ID, created.Generation, created.Revision)
	fmt.Fprintf(c.m.Stdout, "token: %s\n", created.Token)
	fmt.Fprintln(c.m.Stderr, "The token is shown once: store it now.")
	return nil
}

// MigrateExportCommand is `migrate export`.
type MigrateExportCommand struct {
	m *Main
}

// Run writes the store's heads into the directory.
func (c *MigrateExportCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.newFlagSet("migrate export", "--from STORE_URL --out DIR [--root SCOPE] [flags]", `
Write every head of the store into DIR (new or empty) as a directory
migrate publish accepts: the root scope's head as root.json, every other
head as scopes/<scope>.json, and report.json with each file's SHA-256, the
schema each head names and the chain heads with their digest. history.jsonl
holds every scope's events with their links, so that "varplane verify DIR"
checks the export offline; the export refuses a store whose chain is
broken. With publish, a deployment moves between stores (file → Redis →
PostgreSQL) with one command each way.`)
	from := fs.String("from", "", "store URL to export: file:PATH or redis://HOST:PORT")
	out := fs.String("out", "", "directory to write (new or empty)")
	root := fs.String("root", string(migrate.DefaultRoot), "the scope written as root.json")
	output := fs.String("o", "text", "output format: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	if err := requireFlag("out", *out); err != nil {
		return err
	}
	if _, err := varplane.ParseScope(*root); err != nil {
		return usagef("--root %q: %s", *root, varplane.ErrorMessage(err))
	}
	e, closeStore, err := openMigrationStore(ctx, "from", *from, c.m.Stderr, nil)
	if err != nil {
		return migrationFailure(err)
	}
	defer closeStore()
	rep, err := migrate.Export(ctx, e.Store(), *out, varplane.Scope(*root))
	if perr := printReport(c.m.Stdout, *output == "json", rep); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return migrationFailure(err)
	}
	return nil
}
