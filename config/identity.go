package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// The roles of the values service. Roles are hierarchical: a role holds
// every role below it, so "system" and "system:configuration" both hold
// RoleGet and RoleCreate.
const (
	RoleGet    = "system:configuration:get"
	RoleCreate = "system:configuration:create"
)

// Identity is the caller of a request: its ID is recorded as the originator
// of what it creates.
type Identity struct {
	ID    string
	Roles []string
}

// Anonymous is the identity of every caller under AllowAll: id "anonymous",
// holding every role of this service (through the root role "system").
var Anonymous = Identity{ID: "anonymous", Roles: []string{"system"}}

// Has reports whether the identity holds role: it has role itself or an
// ancestor of it ("system:configuration" holds "system:configuration:get").
func (id Identity) Has(role string) bool {
	for _, r := range id.Roles {
		if r == role || strings.HasPrefix(role, r+":") {
			return true
		}
	}
	return false
}

// IdentityResolver finds the identity of a request. It returns ok false when
// the request carries none (answered 401) and an error when it cannot decide
// (answered 500: authorization fails closed).
type IdentityResolver func(r *http.Request) (Identity, bool, error)

// AllowAll resolves every request to Anonymous.
func AllowAll() IdentityResolver {
	return func(*http.Request) (Identity, bool, error) { return Anonymous, true, nil }
}

// TokenEntry maps one static token to an identity and its roles.
type TokenEntry struct {
	Token string   `json:"token"`
	ID    string   `json:"id"`
	Roles []string `json:"roles"`
}

// StaticTokens resolves a request by its token, read from "Authorization:
// Token <t>" or "Authorization: Bearer <t>", or from the password of HTTP
// Basic authentication (so that a browser can open the page). A request
// without a token, or with one that is not listed, has no identity. Tokens
// are compared in constant time.
func StaticTokens(entries []TokenEntry) IdentityResolver {
	list := append([]TokenEntry(nil), entries...)
	return func(r *http.Request) (Identity, bool, error) {
		tok := requestToken(r)
		if tok == "" {
			return Identity{}, false, nil
		}
		for _, e := range list {
			if subtle.ConstantTimeCompare([]byte(e.Token), []byte(tok)) == 1 {
				return Identity{ID: e.ID, Roles: e.Roles}, true, nil
			}
		}
		return Identity{}, false, nil
	}
}

func requestToken(r *http.Request) string {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok {
		return ""
	}
	switch strings.ToLower(scheme) {
	case "token", "bearer":
		return strings.TrimSpace(tok)
	}
	return ""
}

// ParseTokens reads a static token file in one of two forms.
//
// The line form is the core server's token file, extended: one token a line,
// blank lines and lines starting with '#' ignored, each token optionally
// followed by `id=<id>` and `roles=<role>,<role>`. A token without an id is
// known as "token:" plus the first 8 hex digits of its SHA-256 (so logs never
// show it), and one without roles holds "system", every role: a plain token
// file keeps meaning "these tokens may do everything".
//
// The structured form (JSON, or YAML unless file ends in .json) is a list of
// entries or an object with a `tokens` list. Each entry needs `token` and `id`
// (a `name` field is accepted in its place) and may list `roles`; without
// roles it holds none. Other fields (such as the core API's `kinds`) are
// ignored, so one file can serve both.
func ParseTokens(file string, data []byte) ([]TokenEntry, error) {
	if lineForm(data) {
		return parseTokenLines(file, data)
	}
	v, err := DecodeFile(file, data)
	if err != nil {
		return nil, decodeErr(file, err)
	}
	list, ok := v.([]any)
	if m, isMap := v.(map[string]any); isMap {
		list, ok = m["tokens"].([]any)
	}
	if !ok {
		return nil, manifestErr(file, "", "a token file is a list of {token, id, roles} or an object with such a tokens list")
	}
	out := make([]TokenEntry, 0, len(list))
	for i, x := range list {
		at := fmt.Sprintf("/tokens/%d", i)
		m, ok := x.(map[string]any)
		if !ok {
			return nil, manifestErr(file, at, "an entry must be an object")
		}
		e := TokenEntry{}
		e.Token, _ = m["token"].(string)
		if e.Token == "" {
			return nil, manifestErr(file, at+"/token", "token is required")
		}
		if e.ID, _ = m["id"].(string); e.ID == "" {
			e.ID, _ = m["name"].(string)
		}
		if e.ID == "" {
			return nil, manifestErr(file, at+"/id", "id is required")
		}
		if rs, present := m["roles"]; present {
			arr, ok := rs.([]any)
			if !ok {
				return nil, manifestErr(file, at+"/roles", "roles must be a list of strings")
			}
			for j, r := range arr {
				s, ok := r.(string)
				if !ok || s == "" {
					return nil, manifestErr(file, fmt.Sprintf("%s/roles/%d", at, j), "a role must be a non-empty string")
				}
				e.Roles = append(e.Roles, s)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// lineForm reports whether a token file is in the line form: its first
// meaningful line does not open a JSON or YAML structure.
func lineForm(data []byte) bool {
	for _, line := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		return !strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "[") && !strings.HasPrefix(l, "{") && !strings.HasPrefix(l, "tokens:")
	}
	return true
}

func parseTokenLines(file string, data []byte) ([]TokenEntry, error) {
	var out []TokenEntry
	for n, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		at := fmt.Sprintf("line %d", n+1)
		e := TokenEntry{Token: fields[0]}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			switch {
			case ok && k == "id" && v != "":
				e.ID = v
			case ok && k == "roles":
				for _, r := range strings.Split(v, ",") {
					if r != "" {
						e.Roles = append(e.Roles, r)
					}
				}
			default:
				return nil, manifestErr(file, "", "%s: expected id=<id> or roles=<role>,<role> after the token", at)
			}
		}
		if e.ID == "" {
			sum := sha256.Sum256([]byte(e.Token))
			e.ID = "token:" + hex.EncodeToString(sum[:4])
		}
		if e.Roles == nil {
			e.Roles = []string{"system"}
		}
		out = append(out, e)
	}
	return out, nil
}

// LoadTokens reads the static token file at path; see ParseTokens.
func LoadTokens(path string) ([]TokenEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read token file: %w", err)
	}
	return ParseTokens(path, data)
}

// errNoIdentity and errNoRole are the answers of authorize.
var (
	errNoIdentity = &errorAnswer{status: http.StatusUnauthorized, code: "unauthorized", msg: "authentication required"}
	errNoRole     = func(role string) *errorAnswer {
		return &errorAnswer{status: http.StatusForbidden, code: "forbidden", msg: "the role " + role + " is required"}
	}
)

// authorize returns the caller when it holds role.
func authorize(resolve IdentityResolver, r *http.Request, role string) (Identity, error) {
	id, ok, err := resolve(r)
	if err != nil {
		return Identity{}, fmt.Errorf("resolve identity: %w", err)
	}
	if !ok {
		return Identity{}, errNoIdentity
	}
	if !id.Has(role) {
		return Identity{}, errNoRole(role)
	}
	return id, nil
}

// errorAnswer is an HTTP answer decided by the handler itself.
type errorAnswer struct {
	status int
	code   string
	msg    string
}

func (e *errorAnswer) Error() string { return e.msg }
