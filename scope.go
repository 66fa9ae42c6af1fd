package varplane

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxScopeBytes bounds the length of a scope in bytes. Scopes become map keys,
// log fields, Redis keys and URL parameters; an unbounded one is a liability.
const MaxScopeBytes = 256

// Scope is the address of one document, such as "agentic" (a group: one
// segment) or "agentic.lanes.vinci" (a key: it contains a dot). A Scope value
// obtained from ParseScope is valid; the zero value is not.
type Scope string

// ParseScope validates s and returns it as a Scope. It returns an *Error with
// code bad-request when s is empty, longer than MaxScopeBytes, not valid UTF-8,
// contains whitespace or control characters, or has an empty segment.
func ParseScope(s string) (Scope, error) {
	if err := validateScope(s); err != nil {
		return "", err
	}
	return Scope(s), nil
}

func validateScope(s string) error {
	switch {
	case s == "":
		return Errorf(CodeBadRequest, "scope is empty")
	case len(s) > MaxScopeBytes:
		return Errorf(CodeBadRequest, "scope is longer than %d bytes", MaxScopeBytes)
	case !utf8.ValidString(s):
		return Errorf(CodeBadRequest, "scope is not valid UTF-8")
	}
	segStart := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			// ASCII fast path: reads validate the scope on every request.
			if c <= ' ' || c == 0x7f {
				return Errorf(CodeBadRequest, "scope contains whitespace or a control character at byte %d", i)
			}
			if c == '.' {
				if i == segStart {
					return Errorf(CodeBadRequest, "scope has an empty segment at byte %d", i)
				}
				segStart = i + 1
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError {
			return Errorf(CodeBadRequest, "scope contains whitespace or a control character at byte %d", i)
		}
		i += size
	}
	if segStart == len(s) {
		return Errorf(CodeBadRequest, "scope ends with an empty segment")
	}
	return nil
}

// Valid reports whether s would be accepted by ParseScope.
func (s Scope) Valid() bool { return validateScope(string(s)) == nil }

// IsGroup reports whether s is a group: a single segment with no dot.
func (s Scope) IsGroup() bool { return !strings.Contains(string(s), ".") }

// IsKey reports whether s is a key: it contains a dot.
func (s Scope) IsKey() bool { return !s.IsGroup() }

// Parent returns the scope one segment up ("a.b" for "a.b.c") and false for a
// group, which has no parent.
func (s Scope) Parent() (Scope, bool) {
	i := strings.LastIndexByte(string(s), '.')
	if i < 0 {
		return "", false
	}
	return s[:i], true
}

// Root returns the first segment of s ("a" for "a.b.c", s itself for a group).
func (s Scope) Root() Scope {
	if i := strings.IndexByte(string(s), '.'); i >= 0 {
		return s[:i]
	}
	return s
}

// InternalRoots are the roots of the project's own records: "varplane"
// (the principals of access control, varplane.access) and
// "varplane-control" (change requests, review policies, the staged canary
// windows). They are reserved to their subsystems and left out of the
// user's scope lists, counts and live banners unless asked for.
var InternalRoots = []Scope{"varplane", "varplane-control"}

// Internal reports whether s is one of the project's own records (under
// one of InternalRoots).
func (s Scope) Internal() bool {
	r := s.Root()
	for _, ir := range InternalRoots {
		if r == ir {
			return true
		}
	}
	return false
}

// IsDescendantOf reports whether s lies strictly below p: "a.b" and "a.b.c"
// are descendants of "a"; "ab" and "a" are not.
func (s Scope) IsDescendantOf(p Scope) bool {
	return len(s) > len(p)+1 && s[len(p)] == '.' && strings.HasPrefix(string(s), string(p))
}

// String returns the scope as text.
func (s Scope) String() string { return string(s) }
