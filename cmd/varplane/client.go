package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/jsontext"
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
	fs.StringVar(&c.output, "o", "text", "output format: text or json (the server's JSON, one document)")
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

// client checks the shared flags and returns a client for them. With -o
// json, error bodies are also written to stdout.
func (c *clientFlags) client(stdout io.Writer) (*apiClient, error) {
	switch c.output {
	case "text", "json":
	default:
		return nil, usagef("-o must be text or json, not %q", c.output)
	}
	if c.timeout <= 0 {
		return nil, usagef("--timeout must be positive")
	}
	u, err := url.Parse(c.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
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
	tlsConfig, err := c.tls.config()
	if err != nil {
		return nil, &usageError{err: err}
	}
	root := strings.TrimRight(u.String(), "/")
	cl := &apiClient{
		root:  root + base,
		token: c.token,
		http:  wire.NewHTTPClient(tlsConfig, c.timeout),
	}
	if c.json() {
		cl.errJSON = stdout
	}
	return cl, nil
}

// cleanBase returns base with one leading slash and no trailing slash; "/"
// becomes "".
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

// apiClient sends requests to one server's var API.
type apiClient struct {
	root  string // scheme://host[:port]{base}
	token string
	http  *http.Client
	// errJSON, when set (-o json), receives the body of an error answer, so
	// that scripts can read its details from stdout as well.
	errJSON io.Writer
}

// response is a server answer below 400.
type response struct {
	status int
	header http.Header
	body   []byte
}

// newRequest builds a request for path (relative to the base) with the
// token, a JSON body when body is not nil (wire.NewRequest), and header.
func (c *apiClient) newRequest(ctx context.Context, method, path string, query url.Values, body any, header http.Header) (*http.Request, error) {
	target := c.root + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := wire.NewRequest(ctx, method, target, c.token, body)
	if err != nil {
		return nil, &usageError{err: err}
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return req, nil
}

// do sends one request to path (relative to the base) and returns the answer.
// A 4xx/5xx answer is the *varplane.Error the server sent (wire.ParseError:
// its code and details; a proxy's page is the code of its status, never its
// text); a transport failure is an *unreachableError; the caller's
// cancellation is ctx.Err().
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body any, header http.Header) (*response, error) {
	req, err := c.newRequest(ctx, method, path, query, body, header)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &unreachableError{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, &unreachableError{err: fmt.Errorf("read answer of %s %s: %w", method, path, err)}
	}
	if resp.StatusCode >= 400 {
		if c.errJSON != nil && json.Valid(data) {
			_ = emit(c.errJSON, true, data, nil)
		}
		return nil, wire.ParseError(resp.StatusCode, data)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
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

// emit writes the raw JSON body to w when json is set (indented, one
// document), and otherwise calls text.
func emit(w io.Writer, asJSON bool, body []byte, text func() error) error {
	if !asJSON {
		return text()
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		_, err = w.Write(body)
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// decodeAnswer decodes a success body into v; a body the client cannot read
// is reported as a server fault.
func decodeAnswer(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("cannot decode the server's answer: %w", err)
	}
	return nil
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
// (activate, deactivate, rollback): the client and audit flags, --scope and
// --expected-generation, both required.
type guardedFlags struct {
	clientFlags
	mutationFlags
	scope    string
	expected uintFlag
}

// register adds the flags to fs; verb names the action in --scope's help.
func (g *guardedFlags) register(fs *flag.FlagSet, getenv func(string) string, verb string) {
	g.clientFlags.register(fs, getenv)
	g.mutationFlags.register(fs, getenv)
	fs.StringVar(&g.scope, "scope", "", "scope to "+verb+" (required)")
	fs.Var(&g.expected, "expected-generation", "generation the scope must be at (required)")
}

// check reports a missing --scope or --expected-generation as a usage error.
func (g *guardedFlags) check() error {
	if err := requireFlag("scope", g.scope); err != nil {
		return err
	}
	if !g.expected.set {
		return usagef("--expected-generation is required (0 for a scope never activated; see varplane status)")
	}
	return nil
}

// parseScoped parses args into fs, requires --scope (whose value scope
// points at) and returns the client: the opening of every command that
// names one scope.
func (c *clientFlags) parseScoped(fs *flag.FlagSet, args []string, scope *string, stdout io.Writer) (*apiClient, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := requireFlag("scope", *scope); err != nil {
		return nil, err
	}
	return c.client(stdout)
}
