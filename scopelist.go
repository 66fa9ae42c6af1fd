package varplane

import "time"

// The scope listing (GET {base}/admin/scopes, varplane list, the console's
// scopes page): the server writes these and the Go SDK reads them.

// Bounds of one page of the scope listing.
const (
	DefaultScopesLimit = 100
	MaxScopesLimit     = 1000
)

// ScopeSummary is one scope of a listing: where it stands and its last
// activation or deactivation (nil for a scope never activated).
type ScopeSummary struct {
	Scope      Scope            `json:"scope"`
	Active     bool             `json:"active"`
	Generation Generation       `json:"generation"`
	Revision   Revision         `json:"revision,omitempty"`
	LastChange *ScopeLastChange `json:"lastChange,omitempty"`
}

// ScopeLastChange is a scope's last activation (rollbacks included) or
// deactivation: its kind, generation, time and the actor recorded for it.
type ScopeLastChange struct {
	Kind       EventKind  `json:"kind"`
	Generation Generation `json:"generation"`
	Timestamp  time.Time  `json:"timestamp"`
	Actor      string     `json:"actor,omitempty"`
}

// ScopePage is one page of a listing, in scope order. Next, when not empty,
// is where the next page starts (strictly after it).
type ScopePage struct {
	Items []ScopeSummary `json:"items"`
	Next  Scope          `json:"next,omitempty"`
}
