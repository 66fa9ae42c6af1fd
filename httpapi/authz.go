package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/varplane/varplane"
)

// Kind is varplane.Kind, the kind of a request as an Authorizer sees it.
type Kind = varplane.Kind

// The request kinds of the var API (see varplane.Kind).
const (
	KindRead   = varplane.KindRead   // GET {base}, {base}/batch, {base}/watch
	KindAudit  = varplane.KindAudit  // GET {base}/admin/*
	KindMutate = varplane.KindMutate // POST {base}/admin/*
)

// Authorizer is varplane.Authorizer: the one authorizer shape every entrance
// of the server calls.
type Authorizer = varplane.Authorizer

// AllowAll allows every request as varplane.Anonymous. Passing it explicitly
// as Options.Authorizer documents the choice and silences the warning
// NewHandler prints when no authorizer is given.
var AllowAll = varplane.AllowAll

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
	Kinds    []Kind
	Prefixes []string
	ID       string
	Roles    []string
}

func (g *Grant) allows(req varplane.Access) bool {
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
	digest   [sha256.Size]byte
	grant    Grant
	identity varplane.Identity
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
		a.grants = append(a.grants, scopedGrant{digest: d, grant: g, identity: grantIdentity(i, g)})
	}
	return a, nil
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

func (a *ScopedAuthorizer) lookup(token string) *scopedGrant {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.grants {
		if subtle.ConstantTimeCompare(d[:], a.grants[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &a.grants[found]
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
	if !g.grant.allows(req) {
		return varplane.Identity{}, varplane.Errorf(varplane.CodeForbidden, "the token does not allow %s on this scope", req.Kind)
	}
	return g.identity, nil
}

// LoadTokenFile reads a tokens file (see ParseTokens) from path.
func LoadTokenFile(path string) ([]Grant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open tokens file: %w", err)
	}
	defer f.Close()
	grants, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return grants, nil
}

// ParseTokens parses the tokens file format: one grant per line, the token
// first, then optional space-separated attributes:
//
//	# comment; blank lines are ignored
//	s3cr3t-ci-token
//	reader-token kinds=read prefixes=agentic.,billing
//	alice-token id=alice roles=system:configuration:get,system:configuration:list
//
// Attributes are kinds= (read, audit, mutate), prefixes= (see Grant), id= and
// roles= (comma-separated lists). An unknown attribute or an attribute given
// twice is an error naming the line, never the token, so that a typo cannot
// silently widen or narrow access. A token may not start with '#' nor contain
// '='.
func ParseTokens(r io.Reader) ([]Grant, error) {
	var grants []Grant
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if strings.Contains(fields[0], "=") {
			return nil, fmt.Errorf("line %d: the token must come first and may not contain '='", line)
		}
		g := Grant{Token: fields[0]}
		seen := map[string]bool{}
		for i, f := range fields[1:] {
			if strings.HasPrefix(f, "#") {
				break
			}
			name, value, ok := strings.Cut(f, "=")
			if !ok || value == "" {
				// Not echoed: a stray word may be a second secret.
				return nil, fmt.Errorf("line %d: word %d after the token is not name=value", line, i+2)
			}
			if seen[name] {
				return nil, fmt.Errorf("line %d: attribute %q given twice", line, name)
			}
			seen[name] = true
			list := strings.Split(value, ",")
			switch name {
			case "kinds":
				for _, k := range list {
					g.Kinds = append(g.Kinds, Kind(k))
				}
			case "prefixes":
				g.Prefixes = list
			case "roles":
				g.Roles = list
			case "id":
				g.ID = value
			default:
				return nil, fmt.Errorf("line %d: unknown attribute %q", line, name)
			}
		}
		grants = append(grants, g)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if _, err := Scoped(grants); err != nil {
		return nil, err
	}
	return grants, nil
}
