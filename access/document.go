package access

import (
	"fmt"
	"sort"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// Scope is the reserved scope whose document holds the principals.
const Scope varplane.Scope = "varplane.access"

// OwnerName names the access subsystem in the Owner field of its writes.
const OwnerName = "access control"

// Owner reserves Scope to the access subsystem: register it in
// varplane.Options.Owners so that the var admin API answers scope-owned for
// it, and only this package's writes (which name OwnerName) reach it.
var Owner = varplane.Owner{Name: OwnerName, Owns: func(s varplane.Scope) bool { return s == Scope }}

// AdminRole is the role of an administrator: it may create, list and revoke
// principals whatever its kinds and prefixes. Bootstrap looks for a principal
// holding it ("*" holds it too).
const AdminRole = "admin"

// MaxIDBytes bounds a principal's id.
const MaxIDBytes = 64

// Document is the access scope's document.
type Document struct {
	Principals map[string]Principal `json:"principals"`
}

// Principal is one caller: the digest of its token and what it may do. It
// decides exactly as a tokens-file grant does (Grant): empty Kinds
// allow every kind, empty Prefixes every scope. Its Roles are its roles as
// given, with no implicit "*".
type Principal struct {
	TokenDigest string          `json:"tokenDigest"`
	Kinds       []varplane.Kind `json:"kinds,omitempty"`
	Prefixes    []string        `json:"prefixes,omitempty"`
	Roles       []string        `json:"roles,omitempty"`
	CreatedAt   time.Time       `json:"createdAt"`
	CreatedBy   string          `json:"createdBy,omitempty"`
}

// ParseDocument decodes and checks an access document with the strict
// decoder (wire.DecodeStored): one JSON object whose field names match
// exactly, with no unknown or repeated field, every principal with a valid
// id, a well-formed digest, known kinds and valid prefixes, and no digest
// held twice. Its errors are bad-request and never quote a digest.
func ParseDocument(b []byte) (*Document, error) {
	var d Document
	if err := wire.DecodeStored(b, &d); err != nil {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "access document: %s", varplane.ErrorMessage(err))
	}
	if d.Principals == nil {
		return nil, varplane.Errorf(varplane.CodeBadRequest, "access document: principals is required")
	}
	seen := make(map[string]string, len(d.Principals))
	for _, id := range d.ids() {
		p := d.Principals[id]
		if err := checkID(id); err != nil {
			return nil, err
		}
		// A digest has the form of a revision: "sha256:" and 64 hex digits.
		if _, err := varplane.ParseRevision(p.TokenDigest); err != nil {
			return nil, varplane.Errorf(varplane.CodeBadRequest, "access document: principal %q: tokenDigest must be sha256: and 64 lowercase hex digits", id)
		}
		if other, dup := seen[p.TokenDigest]; dup {
			return nil, varplane.Errorf(varplane.CodeBadRequest, "access document: principals %q and %q hold the same token", other, id)
		}
		seen[p.TokenDigest] = id
		if err := checkBinding(p.Kinds, p.Prefixes, p.Roles); err != nil {
			return nil, fmt.Errorf("access document: principal %q: %w", id, err)
		}
	}
	return &d, nil
}

// ids returns the principals' ids, sorted.
func (d *Document) ids() []string {
	ids := make([]string, 0, len(d.Principals))
	for id := range d.Principals {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// HasAdmin reports whether some principal holds AdminRole.
func (d *Document) HasAdmin() bool {
	for _, p := range d.Principals {
		if p.identity("").Has(AdminRole) {
			return true
		}
	}
	return false
}

func (p Principal) grant(id string) Grant {
	return Grant{ID: id, Kinds: p.Kinds, Prefixes: p.Prefixes, Roles: p.Roles}
}

func (p Principal) identity(id string) varplane.Identity {
	return varplane.Identity{ID: id, Roles: p.Roles}
}

// checkID refuses an id that is empty, too long, or holds anything but
// letters, digits and "._@-": ids appear in logs, histories and URLs.
func checkID(id string) error {
	if id == "" || len(id) > MaxIDBytes {
		return varplane.Errorf(varplane.CodeBadRequest, "a principal id must be 1 to %d bytes", MaxIDBytes)
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '@' || c == '-'
		if !ok {
			return varplane.Errorf(varplane.CodeBadRequest, "a principal id holds only letters, digits and . _ @ -")
		}
	}
	return nil
}

// checkBinding refuses unknown kinds, malformed prefixes and empty roles.
func checkBinding(kinds []varplane.Kind, prefixes, roles []string) error {
	for i, k := range kinds {
		if k != varplane.KindRead && k != varplane.KindAudit && k != varplane.KindMutate {
			// Not echoed: a word in the wrong place may be a pasted secret.
			return varplane.Errorf(varplane.CodeBadRequest, "kind %d is not read, audit or mutate", i+1)
		}
	}
	for i, p := range prefixes {
		if !ValidPrefix(p) {
			return varplane.Errorf(varplane.CodeBadRequest, `prefix %d is not a scope, a scope followed by ".", or "*"`, i+1)
		}
	}
	for i, r := range roles {
		if r == "" || len(r) > varplane.MaxScopeBytes {
			return varplane.Errorf(varplane.CodeBadRequest, "role %d is empty or longer than %d bytes", i+1, varplane.MaxScopeBytes)
		}
	}
	return nil
}
