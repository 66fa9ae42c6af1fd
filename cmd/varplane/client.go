package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/internal/wire"
)

// Defaults of the client flags.
const (
	defaultServer        = "http://127.0.0.1:8790"
	defaultBase          = "/vars"
	defaultClientTimeout = 10 * time.Second
	maxResponseBytes     = 64 << 20
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	server  string
	token   string
	base    string
	output  string
	timeout time.Duration
	tls     tlsClientFlags
}

// register adds the shared flags to fs, taking defaults from the environment.
func (c *clientFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.server, "server", envOr(getenv, "VARPLANE_SERVER", defaultServer), "server URL (env VARPLANE_SERVER)")
	fs.StringVar(&c.token, "token", getenv("VARPLANE_TOKEN"), "bearer token sent as Authorization (env VARPLANE_TOKEN)")
	fs.StringVar(&c.base, "base", envOr(getenv, "VARPLANE_BASE", defaultBase), "path the var API is mounted under (env VARPLANE_BASE)")
	fs.StringVar(&c.output, "o", "text", "output format: text or json (one JSON document; errors as one JSON object on stderr)")
	fs.DurationVar(&c.timeout, "timeout", defaultClientTimeout, "timeout of each request")
	c.tls.register(fs, getenv)
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// json reports whether -o json was asked for.
func (c *clientFlags) json() bool { return c.output == "json" }

// admin checks the shared flags and returns the SDK's admin client for them
// (client.Admin: every route, the full *varplane.Error through the wire
// layer); the commands only print what it returns. With -o json, Main
// reports errors as JSON.
func (c *clientFlags) admin(m *Main) (*client.Admin, error) {
	switch c.output {
	case "text", "json":
	default:
		return nil, usagef("-o must be text or json, not %q", c.output)
	}
	m.jsonErrors = c.json()
	if c.timeout <= 0 {
		return nil, usagef("--timeout must be positive")
	}
	u, err := url.Parse(c.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, usagef("--server must be an http:// or https:// URL, not %q", redactURL(c.server))
	}
	// Refused here, never shown: the transport would fail on it later and
	// look like an unreachable server.
	if strings.ContainsFunc(c.token, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, usagef("--token (env VARPLANE_TOKEN) holds a control character or a line break")
	}
	base, err := cleanBase(c.base)
	if err != nil {
		return nil, &usageError{err: err}
	}
	m.serverPath, m.base = strings.TrimRight(u.Path, "/"), base
	if base == "" {
		base = "/" // the root; an empty Base would be the default
	}
	tlsConfig, err := c.tls.config()
	if err != nil {
		return nil, &usageError{err: err}
	}
	var hc *http.Client
	if tlsConfig != nil {
		hc = wire.NewHTTPClient(tlsConfig, c.timeout)
	}
	a, err := client.NewAdmin(c.server, client.AdminOptions{Base: base, Token: c.token, HTTPClient: hc, Timeout: c.timeout, MaxResponseBytes: maxResponseBytes})
	if err != nil {
		return nil, &usageError{err: err}
	}
	return a, nil
}

// cleanBase returns base with one leading slash and no trailing slash; "/"
// becomes "" (the root).
func cleanBase(base string) (string, error) {
	if strings.ContainsAny(base, "?#") {
		return "", fmt.Errorf("--base %q must be a path", base)
	}
	base = "/" + strings.Trim(base, "/")
	if base == "/" {
		return "", nil
	}
	return base, nil
}

// classify turns what an Admin call returned into the CLI's error kinds: a
// *varplane.Error stays as is (exit 1), a transport failure becomes an
// *unreachableError (exit 3), the caller's cancellation is ctx.Err().
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ve *varplane.Error
	if errors.As(err, &ve) {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return &unreachableError{err: ue.Err}
	}
	return err
}

// printServerError writes a refusal and its details, one a line, to w:
// "error: <code>: <message>", then each detail the error carries under its
// wire name, in name order (values as JSON, issues one a line).
func printServerError(w io.Writer, e *varplane.Error) {
	fmt.Fprintf(w, "error: %s\n", e.Error())
	if e.Current != nil {
		fmt.Fprintf(w, "  currentGeneration: %d\n", *e.Current)
	}
	if e.Expected != nil {
		fmt.Fprintf(w, "  expectedGeneration: %d\n", *e.Expected)
	}
	if e.Hint != "" {
		fmt.Fprintf(w, "  hint: %s\n", jsontext.AppendString(nil, e.Hint))
	}
	if e.Issues != nil {
		fmt.Fprintf(w, "  issues:\n")
		printIssues(w, e.Issues, "    ")
	}
	if e.Limit != "" {
		fmt.Fprintf(w, "  limit: %s\n", jsontext.AppendString(nil, e.Limit))
	}
	if e.Scope != "" {
		fmt.Fprintf(w, "  scope: %s\n", jsontext.AppendString(nil, string(e.Scope)))
	}
}

func printIssues(w io.Writer, issues []varplane.Issue, indent string) {
	for _, is := range issues {
		p := is.Path
		if p == "" {
			p = "(document)"
		}
		fmt.Fprintf(w, "%s%s at %s: %s\n", indent, is.Code, p, is.Message)
	}
}

// emit writes v to w as indented JSON (one document, one final newline)
// when asJSON is set, and otherwise calls text.
func emit(w io.Writer, asJSON bool, v any, text func() error) error {
	if !asJSON {
		return text()
	}
	return writeJSON(w, v)
}

// writeJSON writes v as indented JSON (the project's one JSON writer: no
// HTML escaping) followed by exactly one newline.
func writeJSON(w io.Writer, v any) error {
	b, err := jsontext.Marshal(v)
	if err != nil {
		return err
	}
	return printJSON(w, b)
}

// printJSON writes raw indented, followed by exactly one newline (whatever
// whitespace raw ends with).
func printJSON(w io.Writer, raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	_, err := w.Write(append(jsontext.Indent(raw), '\n'))
	return err
}

// requireFlag returns a usage error when the flag name was left empty.
func requireFlag(name, value string) error {
	if value == "" {
		return usagef("--%s is required", name)
	}
	return nil
}

// uintFlag is an optional non-negative integer flag: set reports whether it
// was given.
type uintFlag struct {
	value uint64
	set   bool
}

func (f *uintFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return fmt.Sprint(f.value)
}

func (f *uintFlag) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return errors.New("must be a non-negative integer")
	}
	f.value, f.set = v, true
	return nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}

// mutationFlags are the audit fields every mutation accepts.
type mutationFlags struct {
	actor          string
	reason         string
	idempotencyKey string
}

func (f *mutationFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.actor, "actor", envOr(getenv, "VARPLANE_ACTOR", ""), "who makes the change, recorded in the audit log (env VARPLANE_ACTOR)")
	fs.StringVar(&f.reason, "reason", "", "why, recorded in the audit log")
	fs.StringVar(&f.idempotencyKey, "idempotency-key", "", "client key: repeating the request with the same key returns the first result and changes nothing")
}

// shortTime renders t for human output.
func shortTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// guardedFlags are the flags of every mutation guarded by a generation
// (activate, deactivate, rollback): the client and audit flags, the scope
// (first argument or --scope) and --expected-generation. The scope is
// required; --expected-generation only when required is set (activate):
// deactivate and rollback read the current one (generation).
type guardedFlags struct {
	clientFlags
	mutationFlags
	scope    string
	expected uintFlag
	required bool
}

// register adds the flags to fs; verb names the action in --scope's help.
func (g *guardedFlags) register(fs *flag.FlagSet, getenv func(string) string, verb string) {
	g.clientFlags.register(fs, getenv)
	g.mutationFlags.register(fs, getenv)
	fs.StringVar(&g.scope, "scope", "", "scope to "+verb+" (or the first argument)")
	help := "generation the scope must be at (default: its current one, read first)"
	if g.required {
		help = "generation the scope must be at (required)"
	}
	fs.Var(&g.expected, "expected-generation", help)
}

// check reports a missing scope, or a missing --expected-generation when
// it is required, as a usage error.
func (g *guardedFlags) check() error {
	if err := requireScope(g.scope); err != nil {
		return err
	}
	if g.required && !g.expected.set {
		return usagef("--expected-generation is required (0 for a scope never activated; see varplane status)")
	}
	return nil
}

// generation returns --expected-generation, or, when it was not given, the
// scope's current generation read now, saying so on stderr (unless -o
// json): the guard then still refuses a change made between the read and
// the write. set, rollback and deactivate read it this way.
func (g *guardedFlags) generation(ctx context.Context, m *Main, a *client.Admin, verb string) (varplane.Generation, error) {
	if g.expected.set {
		return varplane.Generation(g.expected.value), nil
	}
	return readGeneration(ctx, m, a, varplane.Scope(g.scope), verb, g.json())
}

// readGeneration reads scope's current generation for verb and says so on
// stderr unless quiet.
func readGeneration(ctx context.Context, m *Main, a *client.Admin, scope varplane.Scope, verb string, quiet bool) (varplane.Generation, error) {
	st, err := a.Status(ctx, scope)
	if err != nil {
		var ve *varplane.Error
		if errors.As(err, &ve) && ve.Code == varplane.CodeForbidden && ve.Hint == "" {
			// The refusal names audit, which the user did not ask for:
			// say why it was needed, and how to do without it.
			cp := *ve
			cp.Hint = fmt.Sprintf("%s reads %s's current generation first, which needs audit on it; give --expected-generation N to skip that read (the %s itself needs mutate on %s)", verb, scope, verb, scope)
			err = &cp
		}
		return 0, classify(ctx, err)
	}
	if !quiet {
		fmt.Fprintf(m.Stderr, "%s: %s is at generation %d (read now; --expected-generation %d guards against a change in between)\n", verb, scope, st.Generation, st.Generation)
	}
	return st.Generation, nil
}

// underPolicy adds to a change-required refusal of a direct write the way
// to make the same change through review (hint), as the CLI spells it.
func underPolicy(err error, hint string) error {
	var ve *varplane.Error
	if errors.As(err, &ve) && ve.Code == varplane.CodeChangeRequired && ve.Hint == "" {
		cp := *ve
		cp.Hint = hint
		return &cp
	}
	return err
}

// requireScope returns a usage error when no scope was given.
func requireScope(scope string) error {
	if scope == "" {
		return usagef("a scope is required: give it as the first argument or as --scope")
	}
	return nil
}

// parseArgs parses args into fs with flags and positional arguments in any
// order (everything after a "--" is positional), and returns the positional
// ones; more than max of them is a usage error.
func parseArgs(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	var pos, tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err: err, reported: true}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	pos = append(pos, tail...)
	if len(pos) > max {
		return nil, usagef("%s: unexpected argument %q (see -h)", fs.Name(), pos[max])
	}
	return pos, nil
}

// scopeArg takes the scope from the positional arguments (the first) or the
// --scope flag into *scope: both is a usage error when they differ.
func scopeArg(pos []string, scope *string) error {
	if len(pos) == 0 {
		return nil
	}
	if *scope != "" && *scope != pos[0] {
		return usagef("the scope is given twice (%q and --scope %q)", pos[0], *scope)
	}
	*scope = pos[0]
	return nil
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// openScoped parses args (at most one positional: the scope, or --scope
// whose value scope points at), requires the scope and returns the admin
// client: the opening of every command that names one scope and nothing
// else.
func (m *Main) openScoped(fs *flag.FlagSet, cf *clientFlags, args []string, scope *string) (*client.Admin, error) {
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return nil, err
	}
	if err := scopeArg(pos, scope); err != nil {
		return nil, err
	}
	if err := requireScope(*scope); err != nil {
		return nil, err
	}
	return cf.admin(m)
}

// resolveRevision returns the revision of scope that arg names (whole, or a
// unique prefix: client.Admin.ResolveRevision). A malformed arg is a usage
// error (exit 2), caught before anything is sent.
func resolveRevision(ctx context.Context, a *client.Admin, scope varplane.Scope, arg string) (varplane.Revision, error) {
	if _, err := client.ParseRevisionPrefix(arg); err != nil {
		return "", &usageError{err: errors.New(varplane.ErrorMessage(err))}
	}
	rev, err := a.ResolveRevision(ctx, scope, arg)
	return rev, classify(ctx, err)
}
