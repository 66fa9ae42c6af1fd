// Command varplane runs the varplane control plane (varplane serve) and talks
// to a running one (create, activate, rollback, get, watch, …).
//
// Every command is a small struct with a Run(ctx, args) method and its own
// flag.FlagSet; Main dispatches to them and turns their errors into exit
// codes that scripts can trust:
//
//	0  success
//	1  the server refused the request (conflict, invalid, not found, forbidden, …)
//	2  usage: bad flags, missing arguments, unreadable input
//	3  the server could not be reached (connection refused, timeout)
//
// Concurrency: a Main runs one command at a time; the end-to-end tests create
// one Main per invocation.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// Exit codes of the varplane command.
const (
	ExitOK          = 0
	ExitRefused     = 1
	ExitUsage       = 2
	ExitUnreachable = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := NewMain().Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Main is the varplane program with its standard streams and environment made
// explicit, so that tests can run commands in-process.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (VARPLANE_SERVER, VARPLANE_TOKEN, …).
	Getenv func(string) string

	// jsonErrors is set by -o json: errors are reported as one JSON object
	// on stderr (and a server's refusal also as its body on stdout).
	jsonErrors bool
	// flagOut holds what the flag package prints while jsonErrors is set,
	// so that stderr stays one JSON object (help is copied out).
	flagOut bytes.Buffer
	// serverPath and base are the path of --server and the base, for the
	// hint of a route-not-found answer.
	serverPath, base string
	// terminal reports whether a stream is a terminal (isTerminal when nil;
	// tests stand in for one).
	terminal func(f any) bool
	// lastFlags is the flag set of the command that ran last (completion
	// reads the flags from it).
	lastFlags *flag.FlagSet
}

// NewMain returns a Main wired to the process's streams and environment.
func NewMain() *Main {
	return &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// command is one subcommand.
type command interface {
	Run(ctx context.Context, args []string) error
}

type commandInfo struct {
	name    string
	summary string
	new     func(m *Main) command
}

// commands lists every subcommand in the order --help shows them: the one
// table of the command, written out (no command registers itself).
var commands = []commandInfo{
	{"serve", "run the control plane (HTTP API) on a store", func(m *Main) command { return &ServeCommand{m: m} }},
	{"create", "store a document as a new immutable revision of a scope", func(m *Main) command { return &CreateCommand{m: m} }},
	{"validate", "check a document without storing it", func(m *Main) command { return &ValidateCommand{m: m} }},
	{"activate", "make a revision the head of a scope (guarded by --expected-generation)", func(m *Main) command { return &ActivateCommand{m: m} }},
	{"set", "store a document and make it the head of a scope in one commit", func(m *Main) command { return &SetCommand{m: m} }},
	{"deactivate", "clear the head of a scope and of its active descendants", func(m *Main) command { return &DeactivateCommand{m: m} }},
	{"rollback", "re-activate an earlier revision as a new generation", func(m *Main) command { return &RollbackCommand{m: m} }},
	{"status", "show whether a scope has a head, its generation and revision", func(m *Main) command { return &StatusCommand{m: m} }},
	{"history", "list the audit log of a scope", func(m *Main) command { return &HistoryCommand{m: m} }},
	{"replay", "show a scope as it was right after a generation (persistent stores)", func(m *Main) command { return &ReplayCommand{m: m} }},
	{"list", "list the scopes (paged, sorted) with their state and last change", func(m *Main) command { return &ListCommand{m: m} }},
	{"diff", "show what changed in a scope between two generations or revisions", func(m *Main) command { return &DiffCommand{m: m} }},
	{"get", "read the values a scope serves (the data plane), with ETag support", func(m *Main) command { return &GetCommand{m: m} }},
	{"watch", "follow commits to scopes as they happen (Server-Sent Events)", func(m *Main) command { return &WatchCommand{m: m} }},
	{"config", "component configuration: deploy manifests, conceal secrets", func(m *Main) command { return &ConfigCommand{m: m} }},
	{"token", "manage the principals held in the store: create, list, revoke", func(m *Main) command { return &TokenCommand{m: m} }},
	{"migrate", "publish a directory into a store, bootstrap the first administrator, export", func(m *Main) command { return &MigrateCommand{m: m} }},
	{"verify", "check the audit log's chain end to end: a log file, a store or an export", func(m *Main) command { return &VerifyCommand{m: m} }},
	{"version", "print the version and VCS revision of this build", func(m *Main) command { return &VersionCommand{m: m} }},
	{"completion", "print a shell completion script (bash, zsh or fish)", func(m *Main) command { return &CompletionCommand{m: m} }},
	{"change", "reviewed changes: propose, rollback, show, list, approve, reject, withdraw, publish, rebase", func(m *Main) command { return &ChangeCommand{m: m} }},
	{"rollout", "progressive delivery: start a change's rollout in steps, list, show, pause, resume, abort", func(m *Main) command { return &RolloutCommand{m: m} }},
	{"wait", "wait until a share of the live instances has installed a generation (for CI)", func(m *Main) command { return &WaitCommand{m: m} }},
	{"policy", "review policies: list, get, set, delete", func(m *Main) command { return &PolicyCommand{m: m} }},
	{"schema", "schemas and their bindings to scope prefixes: list, bind, unbind", func(m *Main) command { return &SchemaCommand{m: m} }},
	{"instances", "list the fleet: each instance's installed revisions, lag, rejections and last report", func(m *Main) command { return &InstancesCommand{m: m} }},
	{"compact", "reclaim old revisions' documents from a file store's log offline (every event kept)", func(m *Main) command { return &CompactCommand{m: m} }},
}

// Run runs the command named by args[0] and returns the process exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	if m.Getenv == nil {
		m.Getenv = func(string) string { return "" }
	}
	if m.Stdin == nil {
		m.Stdin = strings.NewReader("")
	}
	if len(args) == 0 {
		m.usage(m.Stderr)
		return ExitUsage
	}
	m.jsonErrors = wantsJSON(args)
	switch args[0] {
	case "-version", "--version":
		return m.exit((&VersionCommand{m: m}).Run(ctx, args[1:]))
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return m.Run(ctx, []string{args[1], "-h"})
		}
		m.usage(m.Stdout)
		return ExitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return m.exit(c.new(m).Run(ctx, args[1:]))
		}
	}
	if m.jsonErrors {
		return m.exit(usagef("unknown command %q (see varplane --help)", args[0]))
	}
	fmt.Fprintf(m.Stderr, "varplane: unknown command %q\n\n", args[0])
	m.usage(m.Stderr)
	return ExitUsage
}

// wantsJSON reports whether args ask for -o json, before any flag set has
// parsed them, so that even a usage error is reported as JSON.
func wantsJSON(args []string) bool {
	for i, a := range args {
		switch a {
		case "--":
			return false
		case "-o", "--o":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		case "-o=json", "--o=json":
			return true
		}
	}
	return false
}

func (m *Main) usage(w io.Writer) {
	fmt.Fprint(w, `varplane — a control plane for runtime configuration documents.

Every change is an immutable, content-addressed revision; going live is an
explicit activation guarded by the scope's generation; every change lands in
an append-only audit log; rollback is one call.

Usage:
  varplane <command> [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Client commands talk to --server (env VARPLANE_SERVER, default
http://127.0.0.1:8790) with an optional bearer --token (env VARPLANE_TOKEN).
A scope is the first argument (or --scope; get and watch tell a key from a
group by its dot); a revision may be a unique prefix of its digits. They
print readable text by default and one JSON document with -o json, errors
then being one JSON object on stderr.

Exit codes: 0 ok, 1 refused by the server, 2 usage, 3 server unreachable.

Run "varplane <command> -h" for the flags of one command.
`)
}

// exit maps a command's error to an exit code and reports it on stderr:
// as text, or with -o json as one JSON object {"code", "error", details…}
// (the server's error body for a refusal, which also goes to stdout as it
// always has; "usage", "unreachable" or "error" otherwise).
func (m *Main) exit(err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		_, _ = m.flagOut.WriteTo(m.Stderr)
		return ExitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		switch {
		case m.jsonErrors:
			m.jsonError("usage", ue.err.Error())
		case !ue.reported:
			fmt.Fprintf(m.Stderr, "varplane: %v\n", ue.err)
		}
		return ExitUsage
	}
	var se *varplane.Error
	if errors.As(err, &se) {
		m.routeHint(se)
		outcomeHint(se)
		if m.jsonErrors {
			body := wire.BodyOf(se)
			_ = writeJSON(m.Stdout, body)
			b, _ := jsontext.Marshal(body)
			fmt.Fprintf(m.Stderr, "%s\n", b)
		} else {
			printServerError(m.Stderr, se)
		}
		return ExitRefused
	}
	var re *refusedError
	if errors.As(err, &re) {
		if re.msg != "" {
			if m.jsonErrors {
				m.jsonError("refused", re.msg)
			} else {
				fmt.Fprintln(m.Stderr, re.msg)
			}
		}
		return ExitRefused
	}
	var ne *unreachableError
	if errors.As(err, &ne) {
		if m.jsonErrors {
			m.jsonError("unreachable", "server unreachable: "+ne.err.Error())
		} else {
			fmt.Fprintf(m.Stderr, "error: server unreachable: %v\n", ne.err)
		}
		return ExitUnreachable
	}
	if m.jsonErrors {
		m.jsonError("error", err.Error())
	} else {
		fmt.Fprintf(m.Stderr, "error: %v\n", err)
	}
	return ExitRefused
}

// jsonError writes {"code": code, "error": msg} as one line on stderr.
func (m *Main) jsonError(code, msg string) {
	b, _ := jsontext.Marshal(struct {
		Code  string `json:"code"`
		Error string `json:"error"`
	}{code, msg})
	fmt.Fprintf(m.Stderr, "%s\n", b)
}

// routeHint adds a hint to a route-not-found answer that has none when
// --server carries a path of its own: the var API's path is --base, and a
// server URL ending in it doubles it.
func (m *Main) routeHint(e *varplane.Error) {
	if e.Code != varplane.CodeNotFound || e.Hint != "" || m.serverPath == "" || !strings.Contains(e.Message, "no such route") {
		return
	}
	e.Hint = fmt.Sprintf("--server carries the path %s, so requests go to %s%s/…; give the server's root URL as --server and the var API's path as --base (default %s)",
		m.serverPath, m.serverPath, m.base, defaultBase)
}

// outcomeHint tells what to do about a write whose outcome is unknown (the
// store or the connection went silent after the write was sent): it may
// have happened, so neither "retry blindly" nor "nothing changed" is safe
// advice.
func outcomeHint(e *varplane.Error) {
	if e.Code != varplane.CodeOutcomeUnknown || e.Hint != "" {
		return
	}
	e.Hint = "the write may or may not have happened: look with `varplane status` or `varplane history` before trying again; " +
		"a repeat with the same --idempotency-key is safe (it answers the first result if the write landed), and a repeat " +
		"with the same --expected-generation is refused as a conflict if it did"
}

// withOutcomeHint gives an outcome-unknown error of a write that has no
// idempotency key or expected generation (a change's publish, a token's
// creation) the hint that fits it instead of outcomeHint's; err is
// returned either way.
func withOutcomeHint(err error, hint string) error {
	var se *varplane.Error
	if errors.As(err, &se) && se.Code == varplane.CodeOutcomeUnknown && se.Hint == "" {
		se.Hint = hint
	}
	return err
}

// usageError marks an error as the caller's mistake (exit 2). reported is set
// when the flag package already printed it.
type usageError struct {
	err      error
	reported bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// refusedError is a refusal that is not an HTTP error body, such as a
// document that validate found invalid (exit 1).
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// unreachableError is a transport failure: nothing answered (exit 3).
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return "server unreachable: " + e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// newFlagSet returns a FlagSet for command name whose usage shows synopsis
// and a description before the flags.
func (m *Main) newFlagSet(name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet("varplane "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	if m.jsonErrors {
		fs.SetOutput(&m.flagOut)
	}
	m.lastFlags = fs
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: varplane %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err: err, reported: true}
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q (every input is a flag; see -h)", fs.Name(), fs.Arg(0))
	}
	return nil
}
