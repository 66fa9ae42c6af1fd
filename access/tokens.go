package access

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/varplane/varplane"
)

// The token grant model: what a bearer token of the static tokens file
// (serve --tokens) may do, and the authorizer over those grants. A
// principal held in the store (Principal) decides by the same rule
// (Grant.Allows).

// Grant is what one bearer token may do. Empty Kinds allows every kind;
// empty Prefixes allows every scope. A prefix ending in "." matches the
// scopes below it ("a." matches "a.b" but not "a"); any other prefix matches
// that scope and its descendants ("b" matches "b" and "b.c", not "bc"); "*"
// matches everything. ID names the caller in the audit log (a grant without
// one is named by its position, "token-<n>", never by anything derived from
// its secret). Roles are the caller's roles on role-guarded routes; a grant
// without roles holds every role when it is bare (no kinds, no prefixes) and
// none when kinds or prefixes narrow it, so a token narrowed on one API is
// never wider on another.
type Grant struct {
	Token    string
	Kinds    []varplane.Kind
	Prefixes []string
	ID       string
	Roles    []string
}

// Allows reports whether the grant covers req's kind and scope (see Grant);
// an identify request is always covered, since it only authenticates. The
// store-held principals (Principal) are grants without their secret,
// and decide by this same rule.
func (g *Grant) Allows(req varplane.Access) bool {
	if req.Kind == varplane.KindIdentify {
		return true // identify only authenticates; the route checks roles
	}
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

// ValidPrefix reports whether p is a grant's scope prefix: a scope, a scope
// followed by ".", or "*".
func ValidPrefix(p string) bool {
	return p == "*" || varplane.Scope(strings.TrimSuffix(p, ".")).Valid()
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
// The grants can be replaced while it serves (Replace: a tokens file
// reloaded); each request sees one set whole.
type ScopedAuthorizer struct {
	grants atomic.Pointer[[]scopedGrant]
}

type scopedGrant struct {
	digest   [sha256.Size]byte
	grant    Grant
	identity varplane.Identity
}

// Scoped returns an authorizer for grants. It returns an error when a grant
// has an empty token, a token with whitespace, an unknown kind, or when two
// grants share a token.
func Scoped(grants []Grant) (*ScopedAuthorizer, error) {
	a := &ScopedAuthorizer{}
	if err := a.Replace(grants); err != nil {
		return nil, err
	}
	return a, nil
}

// Replace puts grants in place of the authorizer's, at once for every
// request after it, after checking them as Scoped does; on an error the
// grants in force stay. A token no longer given is refused from then on
// (the streams it opened end at their next authorization check).
func (a *ScopedAuthorizer) Replace(grants []Grant) error {
	list, err := scopedGrants(grants)
	if err != nil {
		return err
	}
	a.grants.Store(&list)
	return nil
}

// Len returns how many grants are in force.
func (a *ScopedAuthorizer) Len() int { return len(*a.grants.Load()) }

func scopedGrants(grants []Grant) ([]scopedGrant, error) {
	var out []scopedGrant
	seen := map[[sha256.Size]byte]bool{}
	for i, g := range grants {
		if g.Token == "" || strings.ContainsAny(g.Token, " \t\r\n") {
			return nil, fmt.Errorf("grant %d: token is empty or contains whitespace", i+1)
		}
		for _, k := range g.Kinds {
			if k != varplane.KindRead && k != varplane.KindAudit && k != varplane.KindMutate {
				return nil, fmt.Errorf("grant %d: unknown kind %q (want read, audit or mutate)", i+1, k)
			}
		}
		d := sha256.Sum256([]byte(g.Token))
		if seen[d] {
			return nil, fmt.Errorf("grant %d: token given twice", i+1)
		}
		seen[d] = true
		out = append(out, scopedGrant{digest: d, grant: g, identity: grantIdentity(i, g)})
	}
	return out, nil
}

// grantIdentity is the identity a grant acts as (see Grant).
func grantIdentity(i int, g Grant) varplane.Identity {
	id := varplane.Identity{ID: g.ID, Roles: g.Roles}
	if id.ID == "" {
		id.ID = fmt.Sprintf("token-%d", i+1)
	}
	if id.Roles == nil && len(g.Kinds) == 0 && len(g.Prefixes) == 0 {
		id.Roles = []string{"*"}
	}
	return id
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
	g := a.lookup(token)
	if g == nil {
		return Grant{}, false
	}
	return g.grant, true
}

// GrantOf implements GrantSource: the grant of token without the token.
func (a *ScopedAuthorizer) GrantOf(_ context.Context, token string) (Grant, bool, error) {
	g, ok := a.Lookup(token)
	g.Token = ""
	return g, ok, nil
}

func (a *ScopedAuthorizer) lookup(token string) *scopedGrant {
	d := sha256.Sum256([]byte(token))
	grants := *a.grants.Load()
	found := -1
	for i := range grants {
		if subtle.ConstantTimeCompare(d[:], grants[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &grants[found]
}

// Authorize implements varplane.Authorizer: 401 without a token, 403 for an
// unknown token or one whose grant does not cover the request, and the
// grant's identity otherwise.
func (a *ScopedAuthorizer) Authorize(_ context.Context, req varplane.Access) (varplane.Identity, error) {
	if req.Token == "" {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeUnauthorized, "a bearer token is required")
	}
	g := a.lookup(req.Token)
	if g == nil {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "the token is not accepted")
	}
	if !g.grant.Allows(req) {
		return varplane.Identity{}, notAllowed(req)
	}
	return g.identity, nil
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
				if kind := varplane.Kind(k); kind != varplane.KindRead && kind != varplane.KindAudit && kind != varplane.KindMutate {
					if quotable(k) {
						return Grant{}, false, fmt.Errorf("unknown kind %q (want read, audit or mutate)", k)
					}
					return Grant{}, false, fmt.Errorf("kinds: item %d is not a kind (want read, audit or mutate)", j+1)
				}
				g.Kinds = append(g.Kinds, varplane.Kind(k))
			}
		case "prefixes":
			for j, p := range list {
				if !ValidPrefix(p) {
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

// notAllowed is the refusal of a token whose grant does not cover req: it
// names the right and where it was asked for, so that the caller knows
// what to ask for.
func notAllowed(req varplane.Access) error {
	where := fmt.Sprintf("%q", req.Scope)
	switch {
	case req.Scope == "":
		where = "every scope"
	case req.Subtree:
		where += " and every scope below it"
	}
	return varplane.Errorf(varplane.CodeForbidden, "the token does not allow %s on %s", req.Kind, where)
}
