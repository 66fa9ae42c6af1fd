package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/varplane/varplane"
)

// Kind is what a request does, as the Authorizer sees it.
type Kind string

// The request kinds. Audit is distinct from read so that the audit trail
// (actors, reasons, past documents) can be guarded without closing the data
// plane.
const (
	KindRead   Kind = "read"   // GET {base}, {base}/batch, {base}/watch
	KindAudit  Kind = "audit"  // GET {base}/admin/*
	KindMutate Kind = "mutate" // POST {base}/admin/*
)

// Request is what an Authorizer decides on. Scope is taken from the query
// (key, group, scope, prefix) for reads and audits and from the already
// parsed, size-limited body for mutations; it is empty only for a validate
// request without a scope. Subtree is set when the request covers Scope and
// all its descendants (a watch prefix). Token is the bearer token of the
// Authorization header, empty when there is none.
type Request struct {
	Kind    Kind
	Scope   varplane.Scope
	Subtree bool
	Token   string
	Method  string
	Path    string
}

// Authorizer decides whether a request may proceed. Authorize returns nil to
// allow; a *varplane.Error with code forbidden (403) or unauthorized (401) to
// deny; any other error (or a panic) fails the request closed with 500
// internal, and nothing of the error reaches the client. It is called once
// per scope a request names, concurrently from many requests.
type Authorizer interface {
	Authorize(ctx context.Context, req Request) error
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, req Request) error

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, req Request) error { return f(ctx, req) }

// AllowAll allows every request. Passing it explicitly as Options.Authorizer
// documents the choice and silences the warning NewHandler prints when no
// authorizer is given.
var AllowAll Authorizer = allowAll{}

type allowAll struct{}

func (allowAll) Authorize(context.Context, Request) error { return nil }

var (
	warnAllowAll sync.Once
	warnOut      io.Writer = os.Stderr // replaced by tests
)

func defaultAuthorizer() Authorizer {
	warnAllowAll.Do(func() {
		fmt.Fprintln(warnOut, "varplane: WARNING: no authorizer configured; every request is allowed (set httpapi.Options.Authorizer, e.g. from a tokens file)")
	})
	return AllowAll
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header (scheme case-insensitive), or "".
func bearerToken(r *http.Request) string {
	// Direct map access: the server canonicalizes header names already.
	vs := r.Header["Authorization"]
	if len(vs) == 0 {
		return ""
	}
	v := vs[0]
	const scheme = "bearer "
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(v[len(scheme):])
}

// Grant is what one bearer token may do. Empty Kinds allows every kind;
// empty Prefixes allows every scope. A prefix ending in "." matches the
// scopes below it ("a." matches "a.b" but not "a"); any other prefix matches
// that scope and its descendants ("b" matches "b" and "b.c", not "bc"); "*"
// matches everything. ID and Roles are carried for identity-aware
// authorizers and are not interpreted here.
type Grant struct {
	Token    string
	Kinds    []Kind
	Prefixes []string
	ID       string
	Roles    []string
}

func (g *Grant) allows(req Request) bool {
	if len(g.Kinds) > 0 {
		ok := false
		for _, k := range g.Kinds {
			ok = ok || k == req.Kind
		}
		if !ok {
			return false
		}
	}
	if len(g.Prefixes) == 0 {
		return true
	}
	for _, p := range g.Prefixes {
		if prefixMatches(p, string(req.Scope)) {
			return true
		}
	}
	return false
}

func prefixMatches(p, s string) bool {
	switch {
	case p == "*":
		return true
	case strings.HasSuffix(p, "."):
		return strings.HasPrefix(s, p) && len(s) > len(p)
	default:
		return s == p || varplane.Scope(s).IsDescendantOf(varplane.Scope(p))
	}
}

// ScopedAuthorizer maps bearer tokens to grants. A request without a token is
// 401 unauthorized; an unknown token, or a known one whose grant does not
// cover the request's kind and scope, is 403 forbidden. Tokens are compared
// in constant time by their SHA-256 digests, and every grant is examined
// whatever matches, so timing reveals nothing about which token is close.
type ScopedAuthorizer struct {
	grants []scopedGrant
}

type scopedGrant struct {
	digest [sha256.Size]byte
	grant  Grant
}

// Scoped returns an authorizer for grants. It returns an error when a grant
// has an empty token, a token with whitespace, an unknown kind, or when two
// grants share a token.
func Scoped(grants []Grant) (*ScopedAuthorizer, error) {
	a := &ScopedAuthorizer{}
	seen := map[[sha256.Size]byte]bool{}
	for i, g := range grants {
		if g.Token == "" || strings.ContainsAny(g.Token, " \t\r\n") {
			return nil, fmt.Errorf("grant %d: token is empty or contains whitespace", i+1)
		}
		for _, k := range g.Kinds {
			if k != KindRead && k != KindAudit && k != KindMutate {
				return nil, fmt.Errorf("grant %d: unknown kind %q (want read, audit or mutate)", i+1, k)
			}
		}
		d := sha256.Sum256([]byte(g.Token))
		if seen[d] {
			return nil, fmt.Errorf("grant %d: token given twice", i+1)
		}
		seen[d] = true
		a.grants = append(a.grants, scopedGrant{digest: d, grant: g})
	}
	return a, nil
}

// StaticTokens returns an authorizer that accepts any of tokens for every
// kind and scope (for development and CI). It returns an error as Scoped.
func StaticTokens(tokens []string) (*ScopedAuthorizer, error) {
	grants := make([]Grant, len(tokens))
	for i, t := range tokens {
		grants[i] = Grant{Token: t}
	}
	return Scoped(grants)
}

// Lookup returns the grant of token, or false. The comparison is constant
// time per grant.
func (a *ScopedAuthorizer) Lookup(token string) (Grant, bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.grants {
		if subtle.ConstantTimeCompare(d[:], a.grants[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Grant{}, false
	}
	return a.grants[found].grant, true
}

// Authorize implements Authorizer.
func (a *ScopedAuthorizer) Authorize(_ context.Context, req Request) error {
	if req.Token == "" {
		return varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
	}
	g, ok := a.Lookup(req.Token)
	if !ok {
		return varplane.Errorf(varplane.CodeForbidden, "the token is not accepted")
	}
	if !g.allows(req) {
		return varplane.Errorf(varplane.CodeForbidden, "the token does not allow %s on this scope", req.Kind)
	}
	return nil
}

// LoadTokenFile reads a tokens file (see ParseTokens) from path. An error
// in the file is a *TokenFileError naming path and the line.
func LoadTokenFile(path string) ([]Grant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open tokens file: %w", err)
	}
	defer f.Close()
	grants, err := ParseTokens(f)
	if err != nil {
		var te *TokenFileError
		if errors.As(err, &te) {
			te.Path = path
		}
		return nil, err
	}
	return grants, nil
}

// TokenFileError is an error of a tokens file. It names the line and the
// reason, and never holds a token: a token may be what is wrong, and an
// error reaches logs that a token must not.
type TokenFileError struct {
	Path   string // the file, when known (set by LoadTokenFile)
	Line   int    // 1-based
	Reason string
}

// Error returns "tokens file [PATH ]line N: reason".
func (e *TokenFileError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("tokens file line %d: %s", e.Line, e.Reason)
	}
	return fmt.Sprintf("tokens file %s line %d: %s", e.Path, e.Line, e.Reason)
}

// maxTokenLine bounds one line of a tokens file.
const maxTokenLine = 64 << 10

// ParseTokens parses the tokens file format: one grant per line, the token
// first, then optional space-separated attributes:
//
//	# comment; blank lines are ignored
//	s3cr3t-ci-token
//	reader-token kinds=read prefixes=agentic.,billing
//	alice-token id=alice roles=system:configuration:get,system:configuration:list
//
// Attributes are kinds= (read, audit, mutate), prefixes= (a scope, a scope
// followed by ".", or "*"; see Grant), id= and roles= (comma-separated
// lists without empty items). A token may not start with '#' nor contain
// '='; a '#' word after the token starts a comment.
//
// Anything else is refused with a *TokenFileError naming the line: an
// unknown attribute, an attribute given twice or without a value, an
// unknown kind, a malformed prefix, a stray word, a token given twice, a
// line longer than 64 KiB. The error never quotes the token, nor any word
// that might be one (an attribute name or kind is quoted only when it is a
// short lowercase word), so that a typo can neither silently widen or
// narrow access nor leak a secret into a log.
func ParseTokens(r io.Reader) ([]Grant, error) {
	var grants []Grant
	firstLine := map[string]int{} // token → the line that gave it
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxTokenLine)
	line := 0
	for sc.Scan() {
		line++
		g, ok, err := parseTokenLine(sc.Text())
		if err != nil {
			return nil, &TokenFileError{Line: line, Reason: err.Error()}
		}
		if !ok {
			continue
		}
		if first, dup := firstLine[g.Token]; dup {
			return nil, &TokenFileError{Line: line, Reason: fmt.Sprintf("the token of line %d is given again", first)}
		}
		firstLine[g.Token] = line
		grants = append(grants, g)
	}
	if err := sc.Err(); err != nil {
		reason := "read: " + err.Error()
		if errors.Is(err, bufio.ErrTooLong) {
			reason = fmt.Sprintf("longer than %d bytes", maxTokenLine)
		}
		return nil, &TokenFileError{Line: line + 1, Reason: reason}
	}
	return grants, nil
}

// parseTokenLine parses one line of a tokens file; ok is false for a blank
// or comment line. Its errors never quote the token.
func parseTokenLine(text string) (g Grant, ok bool, err error) {
	fields := strings.Fields(text)
	if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
		return Grant{}, false, nil
	}
	if strings.Contains(fields[0], "=") {
		return Grant{}, false, errors.New("the token must come first and may not contain '='")
	}
	g.Token = fields[0]
	seen := map[string]bool{}
	for i, f := range fields[1:] {
		word := i + 2
		if strings.HasPrefix(f, "#") {
			break
		}
		name, value, hasEq := strings.Cut(f, "=")
		if !hasEq {
			// Not echoed: a stray word may be a second secret.
			return Grant{}, false, fmt.Errorf("word %d is not name=value (one token a line)", word)
		}
		if !quotable(name) {
			return Grant{}, false, fmt.Errorf("word %d: unknown attribute (want id=, roles=, kinds= or prefixes=)", word)
		}
		if seen[name] {
			return Grant{}, false, fmt.Errorf("attribute %q given twice", name)
		}
		seen[name] = true
		if value == "" {
			return Grant{}, false, fmt.Errorf("attribute %q has no value", name)
		}
		list := strings.Split(value, ",")
		for j, item := range list {
			if item == "" {
				return Grant{}, false, fmt.Errorf("attribute %q: item %d is empty", name, j+1)
			}
		}
		switch name {
		case "kinds":
			for j, k := range list {
				if kind := Kind(k); kind != KindRead && kind != KindAudit && kind != KindMutate {
					if quotable(k) {
						return Grant{}, false, fmt.Errorf("unknown kind %q (want read, audit or mutate)", k)
					}
					return Grant{}, false, fmt.Errorf("kinds: item %d is not a kind (want read, audit or mutate)", j+1)
				}
				g.Kinds = append(g.Kinds, Kind(k))
			}
		case "prefixes":
			for j, p := range list {
				if p != "*" && !varplane.Scope(strings.TrimSuffix(p, ".")).Valid() {
					return Grant{}, false, fmt.Errorf(`prefixes: item %d is not a scope, a scope followed by ".", or "*"`, j+1)
				}
			}
			g.Prefixes = list
		case "roles":
			g.Roles = list
		case "id":
			g.ID = value
		default:
			return Grant{}, false, fmt.Errorf("unknown attribute %q (want id=, roles=, kinds= or prefixes=)", name)
		}
	}
	return g, true, nil
}

// quotable reports whether a word of a tokens file may appear in an error:
// a short lowercase word, as attribute names and kinds are, and as a token
// worth the name is not.
func quotable(s string) bool {
	if len(s) == 0 || len(s) > 16 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}
