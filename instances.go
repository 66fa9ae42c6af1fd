package varplane

import (
	"encoding/json"
	"time"

	"github.com/varplane/varplane/rollout"
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
	// MaxStatusBytes bounds the body of a status filed over HTTP: room for
	// MaxStatusDocuments documents of the longest scope.
	MaxStatusBytes = 512 << 10
	// MaxReportBytes bounds the body of a canary report filed over HTTP.
	MaxReportBytes = 16 << 10
	// MaxInstanceNames bounds the instance ids one identity files under at
	// a time over HTTP (its own id and "<id>:<name>"s): a name is held two
	// minutes after its last status and while a window it reported on is
	// open.
	MaxInstanceNames = 16
	// MaxStoredNames bounds the statuses of one identity's names (filed
	// over HTTP) that the store keeps. A name is free two minutes after
	// its last status, but its status stays stored StatusLifetime (an
	// hour) so that deletion protection and the fleet view name it: left
	// to that, an identity changing names as fast as it may would keep 30 ×
	// MaxInstanceNames statuses of up to MaxStatusBytes (240 MiB) on Redis
	// or PostgreSQL. A new name past this bound takes the place of the
	// identity's oldest status that holds no name now (control's claim);
	// only MaxInstanceNames names held now refuse one. Twice
	// MaxInstanceNames keeps, beside a full set of names held now, the set
	// before it (every named instance restarted under new names).
	MaxStoredNames = 2 * MaxInstanceNames
	// StatusFresh is how old a status may be and its instance still count
	// as live: propagation, waits, canary windows and rollout gates count
	// only those (control.StatusFresh). Two heartbeats fit in it.
	StatusFresh = time.Minute
	// StatusLifetime is how long every store keeps a status after its
	// last write. A status older than StatusFresh counts toward nothing
	// live; it is kept so that deletion protection (control.ReaderWindow)
	// names the instances that held a scope in the last hour, not only
	// those running now, and the fleet view lists them as last seen.
	StatusLifetime = time.Hour
)

// InstanceStatus is the heartbeat value an instance writes: what it has
// installed and how old each document is. A reader that counts live
// instances ignores one whose WrittenAt is more than StatusFresh old; the
// stores expire it StatusLifetime after its last write.
type InstanceStatus struct {
	Instance  string             `json:"instance"`
	WrittenAt time.Time          `json:"writtenAt"`
	Ready     bool               `json:"ready"`
	Root      Scope              `json:"root"`
	Documents []InstanceDocument `json:"documents"`
	// Identity is the instance identity that filed the status over HTTP,
	// set by the control plane whatever the body said; empty when the
	// instance wrote it to the store itself.
	Identity string `json:"identity,omitempty"`
	// Labels describe the instance (region, tier, version, ...): the fleet
	// view shows them, and a rollout's label steps select instances by them
	// (docs/rollouts.md).
	Labels map[string]string `json:"labels,omitempty"`
}

// InstanceDocument is one installed document in an InstanceStatus.
type InstanceDocument struct {
	Scope      Scope      `json:"scope"`
	Generation Generation `json:"generation"`
	Revision   Revision   `json:"revision,omitempty"`
	Failed     bool       `json:"failed,omitempty"`
	LagSeconds float64    `json:"lagSeconds"`
	// Rollout and Serving are set while the instance serves the new
	// revision of a running rollout on the scope instead of the installed
	// head (Generation and Revision): the rollout's id and that revision.
	Rollout string   `json:"rollout,omitempty"`
	Serving Revision `json:"serving,omitempty"`
}

// RolloutScope is the reserved scope (owned by the control subsystem)
// whose document, a StagedRollouts, lists the rollouts in progress: the
// control plane writes it at each step, and every instance reads it (it
// follows the scope like a document it holds) to decide whether it serves
// a rollout's new revision (docs/rollouts.md).
const RolloutScope Scope = "varplane-control.rollouts"

// The states of a rollout. Instances serve the new revision of a rollout
// only while it is running or paused; the others are final.
const (
	RolloutRunning    = "running"
	RolloutPaused     = "paused"
	RolloutCompleted  = "completed"
	RolloutRolledBack = "rolled-back"
	RolloutAborted    = "aborted"
	RolloutConflicted = "conflicted"
)

// StagedRollouts is the document of RolloutScope as instances read it
// (the control plane keeps more of each rollout in it; a reader ignores
// what it does not know).
type StagedRollouts struct {
	Rollouts []StagedRollout `json:"rollouts"`
}

// StagedRollout is one rollout as instances read it: the new revision
// Revision of Scope, proposed on generation Base (it becomes Base+1 once
// the last step completes), the step in force (Step of Steps, from
// StepStartedAt) and its Target, which decides who serves the revision
// (rollout.Target's fields).
type StagedRollout struct {
	ID            string             `json:"id"`
	Change        string             `json:"change"`
	Scope         Scope              `json:"scope"`
	Revision      Revision           `json:"revision"`
	Base          Generation         `json:"base"`
	State         string             `json:"state"`
	Step          int                `json:"step"`
	Steps         int                `json:"steps"`
	StepStartedAt time.Time          `json:"stepStartedAt"`
	Share         int                `json:"share"`
	Selectors     []rollout.Selector `json:"selectors,omitempty"`
}

// Of returns the rollout of scope that instances may serve (Serves), if
// any: a reader that answers for a targeting key (an OFREP endpoint)
// serves its Revision as generation Base+1 when the scope's head is still
// at Base and r.Target().Key(key, labels) selects the key.
func (s StagedRollouts) Of(scope Scope) (StagedRollout, bool) {
	for _, r := range s.Rollouts {
		if r.Scope == scope && r.Serves() {
			return r, true
		}
	}
	return StagedRollout{}, false
}

// Serves reports whether instances may serve r's revision: r is running
// or paused.
func (r StagedRollout) Serves() bool { return r.State == RolloutRunning || r.State == RolloutPaused }

// Target is r's step as rollout.Target: who serves its revision.
func (r StagedRollout) Target() rollout.Target {
	return rollout.Target{ID: r.ID, Share: r.Share, Selectors: r.Selectors}
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
	// Identity is the instance identity that filed the report over HTTP,
	// and MayRead whether it may read the window's scope, both set by the
	// control plane whatever the body said; Identity is empty when the
	// instance wrote the report to the store itself (store credentials are
	// an instance's). A report filed by the change's author, or by an
	// identity that may not read the scope, never counts toward the
	// window's minimum (docs/control.md, "Trust model").
	Identity string `json:"identity,omitempty"`
	MayRead  bool   `json:"mayRead,omitempty"`
	// FiledAs is the instance id the store filed the report under (not
	// part of the value): a report whose Instance differs is doubtful.
	FiledAs string `json:"-"`
	// Discount says why the report does not count toward the window's
	// minimum ("" when it counts): set by the control plane when it judges
	// a window, not part of the value.
	Discount string `json:"-"`
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
	// Identity is the identity that filed the report over HTTP (empty:
	// the instance wrote it to the store itself); Discount says why the
	// report does not count toward the window's minimum ("" when it does).
	Identity string `json:"identity,omitempty"`
	Discount string `json:"discount,omitempty"`
}
