package varplane

import (
	"encoding/json"
	"time"
)

// The protocol between the data plane's instances and the control plane
// (docs/instances.md, docs/control.md): the status heartbeat an instance
// writes, the canary windows the control plane stages for it, the report it
// writes on each, and the candidate it reads over HTTP. Both sides read
// these formats (package instance and the Go SDK write them, package
// control reads them, httpapi carries them), so they live here, below
// every side.

// StagedScope is the reserved scope (owned by the control subsystem, under
// its record root "varplane-control") whose document, a StagedWindows,
// lists the open canary windows and their candidates. Instances only read
// it.
const StagedScope Scope = "varplane-control.canary"

// InstanceRole is the role of an instance identity: the one role that may
// file statuses and canary reports over HTTP, and the only filer whose
// reports count as a canary window's evidence (docs/control.md, "Trust
// model"). An operator gives it per instance (a principal or a tokens-file
// grant of its own, as the reference gives each instance its own ACL
// user); it must be given by name (Identity.Holds): "*" does not hold it.
const InstanceRole = "varplane:instance"

// Intervals and bounds of the protocol.
const (
	// HeartbeatInterval is how often an instance writes its status.
	HeartbeatInterval = 30 * time.Second
	// ListInterval is how often an instance lists itself again among the
	// instances of the store (on Redis a listing is a script over the
	// whole list, so it is not done at every heartbeat).
	ListInterval = time.Hour
	// MaxStatusDocuments bounds the documents one status filed over HTTP
	// lists: each is authorized, so the count bounds the authorizer calls
	// of one request.
	MaxStatusDocuments = 1024
	// MaxInstanceID bounds the length of an instance id filed over HTTP.
	MaxInstanceID = 256
)

// InstanceStatus is the heartbeat value an instance writes: what it has
// installed and how old each document is. A reader ignores one whose
// WrittenAt is more than a minute old; the stores expire it after two.
type InstanceStatus struct {
	Instance  string             `json:"instance"`
	WrittenAt time.Time          `json:"writtenAt"`
	Ready     bool               `json:"ready"`
	Root      Scope              `json:"root"`
	Documents []InstanceDocument `json:"documents"`
}

// InstanceDocument is one installed document in an InstanceStatus.
type InstanceDocument struct {
	Scope      Scope      `json:"scope"`
	Generation Generation `json:"generation"`
	Revision   Revision   `json:"revision,omitempty"`
	Failed     bool       `json:"failed,omitempty"`
	LagSeconds float64    `json:"lagSeconds"`
}

// StagedWindows is the document of StagedScope.
type StagedWindows struct {
	Windows []StagedWindow `json:"windows"`
}

// StagedWindow is one open canary window: the candidate is revision
// Revision of Scope, proposed on generation Base.
type StagedWindow struct {
	Window   string     `json:"window"`
	Change   string     `json:"change"`
	Scope    Scope      `json:"scope"`
	Revision Revision   `json:"revision"`
	Base     Generation `json:"base"`
	ClosesAt time.Time  `json:"closesAt"`
}

// CanaryCandidate is a staged window with its candidate document, as a
// consumer that does not reach the store reads it over HTTP
// (GET {base}/control/windows/{window}/candidate).
type CanaryCandidate struct {
	StagedWindow
	Document json.RawMessage `json:"document"`
}

// CanaryReport is one instance's cumulative report of one canary window:
// how many times it decoded and evaluated the candidate, how many of those
// evaluations failed, and the first error the candidate caused (empty:
// none). Each write replaces the instance's previous one.
type CanaryReport struct {
	Window         string    `json:"window"`
	Instance       string    `json:"instance"`
	Decoded        int64     `json:"decoded"`
	Errors         int64     `json:"errors"`
	CandidateError string    `json:"candidateError,omitempty"`
	At             time.Time `json:"at"`
	// FiledAs is the instance id the store filed the report under (not
	// part of the value): a report whose Instance differs is doubtful.
	FiledAs string `json:"-"`
}

// CanaryReportEntry is one instance's report as the control plane judges
// it (GET {base}/control/changes/{id}/reports): Doubtful, with Doubt
// saying why, when the report names another window or instance than where
// it was found, carries a negative count (a stored value that does not
// decode is one), or repeats an instance.
type CanaryReportEntry struct {
	// Instance is the instance the report names; FiledAs the id it was
	// filed under.
	Instance string `json:"instance"`
	FiledAs  string `json:"filedAs"`
	// Window is the window the report names.
	Window         string    `json:"window"`
	Decoded        int64     `json:"decoded"`
	Errors         int64     `json:"errors"`
	CandidateError string    `json:"candidateError,omitempty"`
	At             time.Time `json:"at"`
	Doubtful       bool      `json:"doubtful"`
	Doubt          string    `json:"doubt,omitempty"`
}
