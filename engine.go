package varplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/varplane/varplane/canonical"
)

// Validator checks documents against named schemas. The schema package
// provides one; an Engine without a Validator treats every schemaId as
// unknown.
type Validator interface {
	// Validate checks doc (JSON) against the schema named schemaID. It returns
	// an error wrapping ErrUnknownSchema when no such schema is registered,
	// and the issues found otherwise (nil when doc is valid).
	Validate(schemaID string, doc json.RawMessage) ([]Issue, error)
}

// ErrUnknownSchema is wrapped by Validator.Validate for an unregistered id.
var ErrUnknownSchema = errors.New("varplane: unknown schema")

// Stable issue codes produced by the Engine itself (schema issues come from
// the Validator).
const (
	IssueSyntax          = "document.syntax"
	IssueNumberPrecision = "document.number-precision"
	IssueUnknownSchema   = "document.unknown-schema"
	IssueGroupShape      = "var.group-scope-shape"
)

// Options configure an Engine. The zero value is usable.
type Options struct {
	// Validator checks documents that name a schemaId.
	Validator Validator
	// Now is the clock for event timestamps; time.Now when nil.
	Now func() time.Time
	// Logger receives listener panics and internal errors; slog.Default when nil.
	Logger *slog.Logger
	// Owners reserve scopes to the subsystems that own them (the values
	// service, reviewed changes, access control): a write to an owned scope
	// is refused with scope-owned unless its request names the owner.
	Owners []Owner
	// Binder, when set, binds scope prefixes to schemas: every document
	// written under a bound prefix is validated against its schema,
	// whatever schema the request names (another one is refused), and a
	// stored revision is activated there only if that schema accepts it.
	Binder Binder
	// Limits bound every document the engine stores or validates; the wire
	// layer enforces the same numbers on request bodies. Zero fields take
	// their defaults (DefaultLimits).
	Limits Limits
}

// Engine applies varplane's rules on top of a Store: content-addressed
// revisions, validation, activation guarded by expectedGeneration, subtree
// deactivation, rollback, idempotency, and commit notifications. It holds no
// state of its own beyond its listeners, so several Engines (or processes)
// may share a store; every method is safe for concurrent use.
type Engine struct {
	store     Store
	validator Validator
	now       func() time.Time
	log       *slog.Logger
	limits    Limits
	owners    []Owner
	binder    Binder

	mu        sync.Mutex
	listeners atomic.Pointer[[]*listener]
	cancel    func()
}

type listener struct{ fn func(Commit) }

// NewEngine returns an Engine over store. It follows the store's change feed,
// so OnCommit listeners hear of every commit the store reports, including
// those made by other processes on a shared store.
func NewEngine(store Store, opts Options) *Engine {
	e := &Engine{store: store, validator: opts.Validator, now: opts.Now, log: opts.Logger, limits: opts.Limits.WithDefaults(), owners: opts.Owners, binder: opts.Binder}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.listeners.Store(&[]*listener{})
	e.cancel = store.Watch(e.dispatch)
	return e
}

// Store returns the store the Engine runs on.
func (e *Engine) Store() Store { return e.store }

// Limits returns the document limits the engine enforces, with defaults
// filled in; transports bound their request bodies with the same numbers.
func (e *Engine) Limits() Limits { return e.limits }

// Close stops following the store. It does not close the store.
func (e *Engine) Close() { e.cancel() }

// OnCommit registers fn to be called after every accepted activation,
// deactivation (one call naming every affected scope) and rollback, with the
// store already updated. fn runs on the committing goroutine and must not
// block; hand the work to a queue. The returned function unregisters fn.
func (e *Engine) OnCommit(fn func(Commit)) (unsubscribe func()) {
	l := &listener{fn: fn}
	e.mu.Lock()
	old := *e.listeners.Load()
	next := append(append(make([]*listener, 0, len(old)+1), old...), l)
	e.listeners.Store(&next)
	e.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			cur := *e.listeners.Load()
			next := make([]*listener, 0, len(cur))
			for _, x := range cur {
				if x != l {
					next = append(next, x)
				}
			}
			e.listeners.Store(&next)
		})
	}
}

func (e *Engine) dispatch(c Commit) {
	for _, l := range *e.listeners.Load() {
		e.call(l, c)
	}
}

func (e *Engine) call(l *listener, c Commit) {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("commit listener panicked", "scope", string(c.Scope), "panic", fmt.Sprint(r))
		}
	}()
	l.fn(c)
}

// CreateRevisionRequest asks for a new revision of a scope's document.
type CreateRevisionRequest struct {
	Scope          Scope
	Document       json.RawMessage
	SchemaID       string
	SchemaVersion  string
	Actor          string
	OnBehalfOf     string
	Owner          string
	Reason         string
	IdempotencyKey string
}

// CreateRevisionResult answers CreateRevision. Created is false when the
// content-addressed revision already existed in the scope.
type CreateRevisionResult struct {
	Scope      Scope      `json:"scope"`
	Revision   Revision   `json:"revision"`
	Generation Generation `json:"generation"`
	Created    bool       `json:"created"`
}

// CreateRevision validates req.Document and stores it as an immutable
// revision of req.Scope. An invalid document is not stored: a rejected event
// records the issue codes and paths, and the error is revision-invalid with
// the issues. Creating a revision does not activate it. A request repeated
// with the same idempotency key answers what the first one did, a rejection
// included, and appends nothing.
func (e *Engine) CreateRevision(ctx context.Context, req CreateRevisionRequest) (CreateRevisionResult, error) {
	by := authorOf(req.Actor, req.OnBehalfOf)
	a, err := e.admit(ctx, req.Scope, req.Document, CheckedDocument{}, req.SchemaID, req.SchemaVersion, by, req.Owner, req.IdempotencyKey, false,
		func(content string) string {
			return requestHash("create", req.Scope, content, req.SchemaID, req.SchemaVersion)
		})
	if err != nil || a.replay != nil {
		return createResult(a.replay), err
	}
	ev := createdEvent(req.Scope, a.rev, a.doc, a.schemaID, req.SchemaVersion, by, req.Reason, e.timestamp())
	ev.IdempotencyKey, ev.RequestHash = req.IdempotencyKey, a.hash
	created := true
	switch err := e.store.Append(ctx, ev, 0); {
	case errors.Is(err, ErrRevisionExists):
		created = false
	case errors.Is(err, ErrDuplicateIdempotencyKey):
		rec, err := e.replayedAfterRace(ctx, req.IdempotencyKey, a.hash)
		return createResult(rec), err
	case err != nil:
		return CreateRevisionResult{}, err
	}
	st, err := e.store.State(ctx, req.Scope)
	if err != nil {
		return CreateRevisionResult{}, AfterCommit(err, "the revision is stored, and the store then failed as the scope's generation was read: "+
			"repeat the create to read it (it answers the same revision, created false)")
	}
	return CreateRevisionResult{Scope: req.Scope, Revision: a.rev, Generation: st.Generation, Created: created}, nil
}

// admitted is what admit found of a document: the compacted document and
// its revision, the fingerprint of the request (with a key only), or the
// record of an earlier request with the same key that the caller answers
// from instead (replay).
type admitted struct {
	doc      json.RawMessage
	rev      Revision
	hash     string
	replay   *IdempotencyRecord
	schemaID string // the schema the document was checked against (its binding's, if bound)
}

// admit checks a document offered as a revision of scope: a valid scope, a
// document within the limits, and no validation issues. It returns the
// compacted document and its revision (the digest of its canonical form).
// An invalid document is recorded as a rejected event of scope, by codes and
// paths only, and answered revision-invalid with the issues. Under a schema
// binding (Options.Binder) the document is checked against the bound
// schema whatever schemaID says, and a schemaID naming another schema is
// an issue (IssueSchemaMismatch).
//
// With an idempotency key, the request is fingerprinted by fingerprint of
// its content (the revision, or the digest of the document's bytes when it
// has no canonical form), so that a repeated request is recognised whether
// its document was accepted or not and whatever the validator says now:
// an earlier rejection under the key answers its revision-invalid again and
// appends nothing; an earlier acceptance is returned as replay; a key that
// served another request is idempotency-key-reused. A rejection is
// recorded with the key, which binds it to the request.
func (e *Engine) admit(ctx context.Context, scope Scope, document json.RawMessage, checked CheckedDocument, schemaID, schemaVersion string, by author, owner, key string, dry bool, fingerprint func(content string) string) (admitted, error) {
	if err := e.writable(scope, owner); err != nil {
		return admitted{}, err
	}
	doc, shortNumbers, err := e.compactChecked(document, checked)
	if err != nil {
		return admitted{}, err
	}
	b, err := e.schemaOf(ctx, scope, schemaID)
	if err != nil {
		return admitted{}, err
	}
	issues, canon, err := e.check(scope, true, doc, shortNumbers, b.schemaID)
	if err != nil {
		return admitted{}, err
	}
	if b.mismatch != nil {
		issues = append([]Issue{*b.mismatch}, issues...)
	}
	a := admitted{doc: doc, schemaID: b.schemaID}
	content := ""
	if canon != nil {
		a.rev = Revision(canonical.DigestCanonical(canon))
		content = string(a.rev)
	} else {
		sum := sha256.Sum256(doc)
		content = "bytes:" + hex.EncodeToString(sum[:])
	}
	if key != "" {
		a.hash = fingerprint(content)
		rec, err := e.replayed(ctx, key, a.hash)
		if err != nil || rec != nil {
			return replayAdmission(rec, issues, err)
		}
	}
	if len(issues) == 0 {
		return a, nil
	}
	if dry {
		return admitted{}, InvalidError(issues) // a dry run records nothing
	}
	rej := &Event{
		Kind:            EventRejected,
		Scope:           scope,
		SchemaID:        b.schemaID,
		SchemaVersion:   schemaVersion,
		Actor:           by.actor,
		OnBehalfOf:      by.onBehalfOf,
		Unauthenticated: by.unauthenticated,
		RejectionReason: RejectionReason(issues),
		IdempotencyKey:  key,
		RequestHash:     a.hash,
		Timestamp:       e.timestamp(),
	}
	switch err := e.store.Append(ctx, rej, 0); {
	case errors.Is(err, ErrDuplicateIdempotencyKey):
		rec, err := e.replayedAfterRace(ctx, key, a.hash)
		return replayAdmission(rec, issues, err)
	case err != nil:
		return admitted{}, fmt.Errorf("record rejection of %s: %w", scope, err)
	}
	return admitted{}, b.invalid(issues)
}

// replayAdmission answers a request whose idempotency key is recorded as
// rec (or whose lookup failed with err): a recorded rejection is answered
// revision-invalid again, with the issues found now when they are the ones
// recorded (the same document checked by the same schema) and the
// recorded codes and paths otherwise; anything else is the replay.
func replayAdmission(rec *IdempotencyRecord, now []Issue, err error) (admitted, error) {
	switch {
	case err != nil:
		return admitted{}, err
	case rec.Event.Kind == EventRejected:
		return admitted{}, InvalidError(recordedIssues(rec.Event.RejectionReason, now))
	}
	return admitted{replay: rec}, nil
}

// recordedIssues returns the issues of a recorded rejection reason
// (RejectionReason's form): now when it renders as that reason, otherwise
// the codes and paths the reason names, each with a message saying so.
func recordedIssues(reason string, now []Issue) []Issue {
	if RejectionReason(now) == reason {
		return now
	}
	var out []Issue
	for _, part := range strings.Split(reason, "; ") {
		code, path, _ := strings.Cut(part, " at ")
		if path == "(document)" {
			path = ""
		}
		out = append(out, Issue{Code: code, Path: path, Message: "recorded when this request was first refused"})
	}
	return out
}

// createdEvent is the revision-created event that stores doc as revision
// rev of scope.
func createdEvent(scope Scope, rev Revision, doc json.RawMessage, schemaID, schemaVersion string, by author, reason string, at time.Time) *Event {
	return &Event{
		Kind:            EventRevisionCreated,
		Scope:           scope,
		Revision:        rev,
		Document:        doc,
		SchemaID:        schemaID,
		SchemaVersion:   schemaVersion,
		Actor:           by.actor,
		OnBehalfOf:      by.onBehalfOf,
		Unauthenticated: by.unauthenticated,
		Reason:          reason,
		Timestamp:       at,
	}
}

func createResult(rec *IdempotencyRecord) CreateRevisionResult {
	if rec == nil {
		return CreateRevisionResult{}
	}
	return CreateRevisionResult{Scope: rec.Event.Scope, Revision: rec.Event.Revision, Generation: rec.Generation, Created: true}
}

// ValidateRequest asks whether a document would be accepted. Scope is
// optional; when it names a group, the group shape rule applies.
type ValidateRequest struct {
	Document json.RawMessage
	SchemaID string
	Scope    Scope
}

// ValidateResult answers Validate. SchemaID is the schema the document
// was checked against (the bound schema of its scope, or the one the
// request named), BoundBy the prefix whose binding chose it.
type ValidateResult struct {
	Valid    bool    `json:"valid"`
	Issues   []Issue `json:"issues"`
	SchemaID string  `json:"schemaId,omitempty"`
	BoundBy  Scope   `json:"boundBy,omitempty"`
}

// Validate checks a document as CreateRevision would, without storing
// anything or recording a rejection: with a scope under a schema binding,
// against the bound schema.
func (e *Engine) Validate(ctx context.Context, req ValidateRequest) (ValidateResult, error) {
	hasScope := req.Scope != ""
	if hasScope {
		if err := validateScope(string(req.Scope)); err != nil {
			return ValidateResult{}, err
		}
	}
	doc, shortNumbers, err := e.compactDocument(req.Document)
	if err != nil {
		return ValidateResult{}, err
	}
	b := bound{schemaID: req.SchemaID}
	if hasScope {
		if b, err = e.schemaOf(ctx, req.Scope, req.SchemaID); err != nil {
			return ValidateResult{}, err
		}
	}
	issues, _, err := e.check(req.Scope, hasScope, doc, shortNumbers, b.schemaID)
	if err != nil {
		return ValidateResult{}, err
	}
	if b.mismatch != nil {
		issues = append([]Issue{*b.mismatch}, issues...)
	}
	if issues == nil {
		issues = []Issue{}
	}
	res := ValidateResult{Valid: len(issues) == 0, Issues: issues, SchemaID: b.schemaID}
	if b.binding != nil {
		res.BoundBy = b.binding.Prefix
	}
	return res, nil
}

// check returns the issues of doc and its canonical form, nil when it has
// none (syntax or numbers canonical JSON would change); computed once:
// canonicalisation is the costliest step of a create; doc itself when it
// is canonical already, so the result is only read. The error is only for
// an internal failure. shortNumbers says that
// compactDocument saw only integer literals of at most
// canonical.ShortIntegerDigits digits, for which the number check has
// nothing to report.
func (e *Engine) check(scope Scope, hasScope bool, doc json.RawMessage, shortNumbers bool, schemaID string) ([]Issue, []byte, error) {
	var unsafe []canonical.UnsafeNumber
	if !shortNumbers {
		var err error
		if unsafe, err = canonical.UnsafeNumbers(doc, 20); err != nil {
			return []Issue{{Code: IssueSyntax, Path: "", Message: "document is not valid JSON"}}, nil, nil
		}
	}
	var issues []Issue
	for _, u := range unsafe {
		issues = append(issues, Issue{Code: IssueNumberPrecision, Path: u.Path, Message: "number " + u.Reason})
	}
	var canon []byte
	if len(issues) == 0 {
		// UnsafeNumbers has just checked the numbers, so the canonicaliser
		// is called without doing it again.
		var err error
		if canon, err = canonical.TransformCheckedShared(doc); err != nil {
			issues = append(issues, Issue{Code: IssueSyntax, Path: "", Message: "document cannot be canonicalised (duplicate object key or invalid string)"})
		}
	}
	if hasScope && scope.IsGroup() {
		issues = append(issues, groupShapeIssues(scope, doc)...)
	}
	if schemaID != "" {
		if e.validator == nil {
			issues = append(issues, unknownSchema(schemaID))
		} else {
			found, err := e.validator.Validate(schemaID, doc)
			switch {
			case errors.Is(err, ErrUnknownSchema):
				issues = append(issues, unknownSchema(schemaID))
			case err != nil:
				return nil, nil, fmt.Errorf("validate against schema %q: %w", schemaID, err)
			default:
				issues = append(issues, found...)
			}
		}
	}
	return issues, canon, nil
}

func unknownSchema(id string) Issue {
	return Issue{Code: IssueUnknownSchema, Path: "", Message: fmt.Sprintf("schema %q is not registered", id)}
}

// groupShapeIssues enforces that a group document is an object whose every
// top-level key starts with "<group>.".
func groupShapeIssues(group Scope, doc json.RawMessage) []Issue {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		return []Issue{{Code: IssueGroupShape, Path: "", Message: fmt.Sprintf("a document of group %q must be an object", group)}}
	}
	prefix := string(group) + "."
	var bad []string
	for k := range top {
		if !strings.HasPrefix(k, prefix) || len(k) == len(prefix) {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	issues := make([]Issue, 0, len(bad))
	for _, k := range bad {
		issues = append(issues, Issue{
			Code:    IssueGroupShape,
			Path:    "/" + canonical.EscapeToken(k),
			Message: fmt.Sprintf("top-level key of group %q must start with %q", group, prefix),
		})
	}
	return issues
}

// RejectionReason renders issues as the reason of a rejected event: codes and
// paths only, never values.
func RejectionReason(issues []Issue) string {
	parts := make([]string, 0, len(issues))
	for _, is := range issues {
		p := is.Path
		if p == "" {
			p = "(document)"
		}
		parts = append(parts, is.Code+" at "+p)
	}
	return strings.Join(parts, "; ")
}

// InvalidError returns the revision-invalid error carrying issues.
func InvalidError(issues []Issue) *Error {
	return &Error{Code: CodeRevisionInvalid, Message: fmt.Sprintf("document has %d validation issue(s)", len(issues)), Issues: issues}
}

// ActivateRequest asks to make a stored revision the scope's head.
type ActivateRequest struct {
	Scope              Scope
	Revision           Revision
	ExpectedGeneration Generation
	Actor              string
	OnBehalfOf         string
	Owner              string
	Reason             string
	IdempotencyKey     string
	// RollbackOf, set by Rollback and by an owner that publishes a rollback
	// (a reviewed change proposed as one), marks the activation as a
	// rollback of that generation (Event.RollbackOf). The var API never
	// sets it from a request.
	RollbackOf Generation
	// DryRun asks for every check of the activation (DryRun in dryrun.go)
	// and no commit.
	DryRun bool
}

// ActivationResult answers Activate and Rollback. DryRun marks the answer of
// a dry run: what the write would have done; nothing was written.
type ActivationResult struct {
	Scope       Scope      `json:"scope"`
	Generation  Generation `json:"generation"`
	Revision    Revision   `json:"revision"`
	EffectiveAt time.Time  `json:"effectiveAt"`
	DryRun      bool       `json:"dryRun,omitempty"`
}

// Activate makes req.Revision the head of req.Scope at the next generation.
// Under a schema binding, a revision the bound schema rejects (one stored
// before the binding) is refused with revision-invalid naming the schema.
// It returns a revision-conflict error (errors.Is ErrConflict) carrying the
// current generation when the scope is not at req.ExpectedGeneration, and
// not-found when the revision is not stored in the scope.
func (e *Engine) Activate(ctx context.Context, req ActivateRequest) (ActivationResult, error) {
	if err := e.writable(req.Scope, req.Owner); err != nil {
		return ActivationResult{}, err
	}
	if _, err := ParseRevision(string(req.Revision)); err != nil {
		return ActivationResult{}, err
	}
	hash := requestHash("activate", req.Scope, string(req.Revision), fmt.Sprint(req.ExpectedGeneration))
	return e.activate(ctx, req, hash)
}

func (e *Engine) activate(ctx context.Context, req ActivateRequest, hash string) (ActivationResult, error) {
	if rec, err := e.replayed(ctx, req.IdempotencyKey, hash); err != nil || rec != nil {
		return activationResult(rec), err
	}
	if err := e.checkBoundRevision(ctx, req.Scope, req.Revision); err != nil {
		return ActivationResult{}, err
	}
	ev := e.guardedEvent(EventActivated, req.Scope, req.ExpectedGeneration, authorOf(req.Actor, req.OnBehalfOf), req.Reason, req.IdempotencyKey, hash)
	ev.Revision = req.Revision
	ev.RollbackOf = req.RollbackOf
	if req.DryRun {
		return e.dryActivate(ctx, ev, req.ExpectedGeneration)
	}
	switch err := e.store.Append(ctx, ev, req.ExpectedGeneration); {
	case errors.Is(err, ErrDuplicateIdempotencyKey):
		rec, err := e.replayedAfterRace(ctx, req.IdempotencyKey, hash)
		return activationResult(rec), err
	case errors.Is(err, ErrNotFound):
		return ActivationResult{}, &Error{Code: CodeNotFound, Message: fmt.Sprintf("revision %s is not stored in scope %q", req.Revision, req.Scope), Err: err}
	case err != nil:
		return ActivationResult{}, err
	}
	return ActivationResult{Scope: ev.Scope, Generation: ev.Generation, Revision: ev.Revision, EffectiveAt: ev.Timestamp}, nil
}

func activationResult(rec *IdempotencyRecord) ActivationResult {
	if rec == nil {
		return ActivationResult{}
	}
	ev := rec.Event
	return ActivationResult{Scope: ev.Scope, Generation: ev.Generation, Revision: ev.Revision, EffectiveAt: ev.Timestamp}
}

// DeactivateRequest asks to clear a scope's head and its subtree.
type DeactivateRequest struct {
	Scope              Scope
	ExpectedGeneration Generation
	Actor              string
	OnBehalfOf         string
	Owner              string
	Reason             string
	IdempotencyKey     string
	// DryRun asks for every check of the deactivation and no commit.
	DryRun bool
	// Force goes past the deletion protection of a control plane's HTTP
	// API (confirmation-required while instances held the scope in the
	// last hour, docs/rollouts.md); the engine itself ignores it.
	Force bool
}

// DeactivationResult answers Deactivate. Cascade lists the descendants that
// the same commit deactivated (a dry run: would deactivate, as the store
// holds them now).
type DeactivationResult struct {
	Scope      Scope          `json:"scope"`
	Generation Generation     `json:"generation"`
	Active     bool           `json:"active"`
	Cascade    []CascadeEntry `json:"cascade,omitempty"`
	DryRun     bool           `json:"dryRun,omitempty"`
	// WasActive, in a dry run's answer only, says that the scope serves a
	// head now, which the deactivation would clear.
	WasActive bool `json:"wasActive,omitempty"`
}

// Deactivate clears the head of req.Scope and of every active descendant in
// one atomic commit; each descendant takes its own next generation. It is a
// tombstone: descendants activated later are live. A scope with no head can be
// deactivated; it still takes the next generation. A generation mismatch is a
// revision-conflict error.
func (e *Engine) Deactivate(ctx context.Context, req DeactivateRequest) (DeactivationResult, error) {
	if err := e.writable(req.Scope, req.Owner); err != nil {
		return DeactivationResult{}, err
	}
	hash := requestHash("deactivate", req.Scope, fmt.Sprint(req.ExpectedGeneration))
	if rec, err := e.replayed(ctx, req.IdempotencyKey, hash); err != nil || rec != nil {
		return deactivationResult(rec), err
	}
	if err := e.cascadeWritable(ctx, req.Scope, req.Owner); err != nil {
		return DeactivationResult{}, err
	}
	if req.DryRun {
		return e.dryDeactivate(ctx, req)
	}
	ev := e.guardedEvent(EventDeactivated, req.Scope, req.ExpectedGeneration, authorOf(req.Actor, req.OnBehalfOf), req.Reason, req.IdempotencyKey, hash)
	switch err := e.store.AppendSubtreeDeactivation(ctx, ev, req.ExpectedGeneration); {
	case errors.Is(err, ErrDuplicateIdempotencyKey):
		rec, err := e.replayedAfterRace(ctx, req.IdempotencyKey, hash)
		return deactivationResult(rec), err
	case err != nil:
		return DeactivationResult{}, err
	}
	return DeactivationResult{Scope: ev.Scope, Generation: ev.Generation, Cascade: ev.Cascade}, nil
}

func deactivationResult(rec *IdempotencyRecord) DeactivationResult {
	if rec == nil {
		return DeactivationResult{}
	}
	return DeactivationResult{Scope: rec.Event.Scope, Generation: rec.Event.Generation, Cascade: rec.Event.Cascade}
}

// RollbackRequest asks to re-activate an earlier revision as a new
// generation. At most one of ToRevision and ToGeneration is set; with
// neither, the target is the revision that was active before the head as of
// ExpectedGeneration (the latest earlier activation of another revision).
type RollbackRequest struct {
	Scope              Scope
	ExpectedGeneration Generation
	ToRevision         Revision
	ToGeneration       *Generation
	Actor              string
	OnBehalfOf         string
	Owner              string
	Reason             string
	IdempotencyKey     string
	// DryRun asks for every check of the rollback (its target resolved)
	// and no commit.
	DryRun bool
}

// Rollback re-activates an earlier revision of req.Scope as a new generation;
// history only grows. The activated event's reason is "rollback to
// <revision>" unless req.Reason is set; the event names the generation it
// rolled back (Event.RollbackOf). It returns not-found when the target
// does not exist and revision-conflict on a generation mismatch; under a
// schema binding, a target the bound schema rejects is revision-invalid
// naming the schema, as Activate refuses it.
func (e *Engine) Rollback(ctx context.Context, req RollbackRequest) (ActivationResult, error) {
	if err := e.writable(req.Scope, req.Owner); err != nil {
		return ActivationResult{}, err
	}
	if req.ToRevision != "" && req.ToGeneration != nil {
		return ActivationResult{}, Errorf(CodeBadRequest, "give toRevision or toGeneration, not both")
	}
	target := fmt.Sprint("prev@", req.ExpectedGeneration)
	switch {
	case req.ToRevision != "":
		target = "rev:" + string(req.ToRevision)
	case req.ToGeneration != nil:
		target = fmt.Sprint("gen:", *req.ToGeneration)
	}
	hash := requestHash("rollback", req.Scope, target, fmt.Sprint(req.ExpectedGeneration))
	if rec, err := e.replayed(ctx, req.IdempotencyKey, hash); err != nil || rec != nil {
		return activationResult(rec), err
	}
	rev, err := e.rollbackTarget(ctx, req)
	if err != nil {
		return ActivationResult{}, err
	}
	reason := req.Reason
	if reason == "" {
		reason = "rollback to " + string(rev)
	}
	return e.activate(ctx, ActivateRequest{
		Scope:              req.Scope,
		Revision:           rev,
		ExpectedGeneration: req.ExpectedGeneration,
		Actor:              req.Actor,
		OnBehalfOf:         req.OnBehalfOf,
		Owner:              req.Owner,
		Reason:             reason,
		IdempotencyKey:     req.IdempotencyKey,
		RollbackOf:         req.ExpectedGeneration,
		DryRun:             req.DryRun,
	}, hash)
}

func (e *Engine) rollbackTarget(ctx context.Context, req RollbackRequest) (Revision, error) {
	if req.ToRevision != "" {
		if _, err := ParseRevision(string(req.ToRevision)); err != nil {
			return "", err
		}
		if _, err := e.store.Revision(ctx, req.Scope, req.ToRevision); err != nil {
			if errors.Is(err, ErrNotFound) {
				return "", Errorf(CodeNotFound, "revision %s is not stored in scope %q", req.ToRevision, req.Scope)
			}
			return "", err
		}
		return req.ToRevision, nil
	}
	// The target is resolved by the store of record as of the expected
	// generation: a snapshot of this process may be behind it (a replica
	// that has not yet seen another's commit), and a target taken from
	// it would be re-activated under an expectedGeneration it was never
	// resolved against.
	return e.store.RollbackTarget(ctx, req.Scope, req.ExpectedGeneration, req.ToGeneration)
}

// Status describes a scope for operators.
type Status struct {
	Scope        Scope      `json:"scope"`
	Active       bool       `json:"active"`
	Generation   Generation `json:"generation"`
	Revision     Revision   `json:"revision,omitempty"`
	Source       string     `json:"source"`
	LastRejected *Event     `json:"lastRejected,omitempty"`
	// Chain is the head of the scope's event chain: the link of its last
	// event, which an outside system records to anchor the scope's history
	// (a later `varplane verify` must find that link in it).
	Chain ChainHead `json:"chain"`
}

// Status returns whether scope has a head, its generation and revision, the
// store that serves it (source), its last rejected revision and the head of
// its event chain.
func (e *Engine) Status(ctx context.Context, scope Scope) (Status, error) {
	if err := validateScope(string(scope)); err != nil {
		return Status{}, err
	}
	st, err := e.store.State(ctx, scope)
	if err != nil {
		return Status{}, err
	}
	s := Status{Scope: scope, Generation: st.Generation, Source: e.store.Name(), LastRejected: st.LastRejected, Chain: st.Chain}
	if st.Head != nil {
		s.Active, s.Revision = true, st.Head.Revision
	}
	return s, nil
}

// Head returns the active head of scope, or an error with code no-head.
func (e *Engine) Head(ctx context.Context, scope Scope) (*Head, error) {
	st, err := e.store.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	if st.Head == nil {
		return nil, &Error{Code: CodeNoHead, Message: fmt.Sprintf("scope %q has no active head", scope)}
	}
	return st.Head, nil
}

// Heads returns the active head of each scope, nil for a scope with no
// head, as one request's view: a scope named twice is read once, so it is
// the same revision in both places, and a store that judges a request as
// a whole (Snapshotter) answers for all of them at once.
func (e *Engine) Heads(ctx context.Context, scopes []Scope) ([]*Head, error) {
	return e.heads(ctx, scopes, false)
}

// StoredHeads is Heads with each scope's own head where the store would
// answer the revision of a rollout that selects its instance instead (a
// read replica: HeadSnapshotter): what an evaluation for an entity key
// starts from, since the key, not the instance, decides (RolloutPicker).
func (e *Engine) StoredHeads(ctx context.Context, scopes []Scope) ([]*Head, error) {
	return e.heads(ctx, scopes, true)
}

func (e *Engine) heads(ctx context.Context, scopes []Scope, stored bool) ([]*Head, error) {
	out := make([]*Head, len(scopes))
	if sn, ok := e.store.(Snapshotter); ok {
		states := sn.States
		if hs, ok := sn.(HeadSnapshotter); ok && stored {
			states = hs.HeadStates
		}
		sts, err := states(ctx, scopes)
		if err != nil {
			return nil, err
		}
		for i, st := range sts {
			out[i] = st.Head
		}
		return out, nil
	}
	read := make(map[Scope]*Head, len(scopes))
	for i, sc := range scopes {
		h, ok := read[sc]
		if !ok {
			st, err := e.store.State(ctx, sc)
			if err != nil {
				return nil, err
			}
			h = st.Head
			read[sc] = h
		}
		out[i] = h
	}
	return out, nil
}

// History returns every event of scope in log order.
func (e *Engine) History(ctx context.Context, scope Scope) ([]Event, error) {
	if err := validateScope(string(scope)); err != nil {
		return nil, err
	}
	return e.store.History(ctx, scope)
}

// HistoryEach calls fn with every event of scope in log order, as History
// returns them, holding one revision document at a time: the events come
// from one Store.EventHistory read, and the document of a revision-created
// event that comes without one is read (Store.Revision) just before fn
// sees it; a body retention reclaimed leaves the event without a document,
// as in History. The event passed to fn is reused: fn must not keep it.
// It stops at fn's first error, which it returns.
func (e *Engine) HistoryEach(ctx context.Context, scope Scope, fn func(*Event) error) error {
	if err := validateScope(string(scope)); err != nil {
		return err
	}
	events, err := e.store.EventHistory(ctx, scope)
	if err != nil {
		return err
	}
	for i := range events {
		ev := &events[i]
		if ev.Kind == EventRevisionCreated && ev.Document == nil {
			rec, err := e.store.Revision(ctx, scope, ev.Revision)
			switch {
			case err == nil:
				ev.Document = rec.Document
			case !errors.Is(err, ErrReclaimed):
				return err
			}
		}
		if err := fn(ev); err != nil {
			return err
		}
		ev.Document = nil // the next body is read only once this one may go
	}
	return nil
}

// ScopeHead is a scope's head as of some generation, as replay answers it.
type ScopeHead struct {
	Scope         Scope           `json:"scope"`
	Active        bool            `json:"active"`
	Generation    Generation      `json:"generation"`
	Revision      Revision        `json:"revision,omitempty"`
	SchemaID      string          `json:"schemaId,omitempty"`
	SchemaVersion string          `json:"schemaVersion,omitempty"`
	EffectiveAt   *time.Time      `json:"effectiveAt,omitempty"`
	Document      json.RawMessage `json:"document,omitempty"`
}

// Replay returns scope as it was right after generation gen. It returns
// store-unsupported on a store without a log (memory) and not-found when the
// scope never reached gen.
func (e *Engine) Replay(ctx context.Context, scope Scope, gen Generation) (ScopeHead, error) {
	if err := validateScope(string(scope)); err != nil {
		return ScopeHead{}, err
	}
	r, ok := e.store.(Replayer)
	if !ok {
		return ScopeHead{}, Errorf(CodeStoreUnsupported, "the %s store keeps no log to replay", e.store.Name())
	}
	st, err := r.Replay(ctx, scope, gen)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return ScopeHead{}, Errorf(CodeNotFound, "scope %q never reached generation %d", scope, gen)
		}
		return ScopeHead{}, err
	}
	out := ScopeHead{Scope: scope, Generation: st.Generation}
	if h := st.Head; h != nil {
		at := h.EffectiveAt
		out.Active, out.Revision, out.SchemaID, out.SchemaVersion = true, h.Revision, h.SchemaID, h.SchemaVersion
		out.EffectiveAt, out.Document = &at, h.Document
	}
	return out, nil
}

func (e *Engine) timestamp() time.Time { return e.now().UTC() }

// author is who a mutation records: the authenticated actor and, apart, whom
// the client said it acts for; or, when nobody authenticated the request,
// the client's claim as the actor, marked unauthenticated.
type author struct {
	actor, onBehalfOf string
	unauthenticated   bool
}

// authorOf is the author of a request made as actor (the caller's
// identity) for onBehalfOf (the client's claim). A request without
// authentication (actor AnonymousID, every caller of a server without
// tokens) that claims an actor records that claim as the event's Actor,
// as the reference var server does, marked Unauthenticated so that the
// audit log never passes it off as a verified identity; an authenticated
// request keeps its identity as the Actor and the claim beside it.
func authorOf(actor, onBehalfOf string) author {
	if actor == AnonymousID && onBehalfOf != "" {
		return author{actor: onBehalfOf, unauthenticated: true}
	}
	return author{actor: actor, onBehalfOf: onBehalfOf}
}

// Owner reserves the scopes Owns matches to the subsystem Name. Its writes
// name it in their request's Owner field; transports never set that field
// from a request, so the var admin API cannot write an owned scope around
// the subsystem's own rules (a values service schema, a review policy).
//
// Code is the code of the refusal, scope-owned when empty; reviewed changes
// register the scopes under a review policy with change-required, so the
// refusal tells the caller to propose a change rather than that the scope
// is out of reach.
type Owner struct {
	Name string
	Owns func(Scope) bool
	Code Code
}

// Reserved reports the name of the subsystem that reserves scope: the first
// of Options.Owners whose Code is scope-owned (or empty) and that owns it.
// Owners with another code, such as the scopes under a review policy, guard
// scopes rather than own them and are not asked, so a guard may ask
// Reserved from its own Owns.
func (e *Engine) Reserved(scope Scope) (string, bool) {
	for _, o := range e.owners {
		if (o.Code == "" || o.Code == CodeScopeOwned) && o.Owns(scope) {
			return o.Name, true
		}
	}
	return "", false
}

// refusal is the error of a write to scope that o refuses.
func (o Owner) refusal(scope Scope, msg string) *Error {
	code := o.Code
	if code == "" {
		code = CodeScopeOwned
	}
	return &Error{Code: code, Scope: scope, Message: msg}
}

// cascadeWritable refuses a deactivation whose cascade would clear a live
// scope owned by another subsystem (deactivating "dummies" must not switch
// off the values service's "dummies.dummy@<epoch>" behind its back). The
// store chooses the descendants when it commits; a scope its owner activates
// between this check and that commit is the one case it cannot see.
func (e *Engine) cascadeWritable(ctx context.Context, scope Scope, owner string) error {
	if len(e.owners) == 0 {
		return nil
	}
	scopes, err := e.store.Scopes(ctx)
	if err != nil {
		return err
	}
	for _, sc := range scopes {
		if !sc.IsDescendantOf(scope) {
			continue
		}
		for _, o := range e.owners {
			if !o.Owns(sc) || o.Name == owner {
				continue
			}
			st, err := e.store.State(ctx, sc)
			if err != nil {
				return err
			}
			if st.Head != nil {
				return o.refusal(sc, fmt.Sprintf("deactivating %q would clear %q, which belongs to the %s", scope, sc, o.Name))
			}
		}
	}
	return nil
}

// writable checks scope and that a request as owner may write it.
func (e *Engine) writable(scope Scope, owner string) error {
	if err := validateScope(string(scope)); err != nil {
		return err
	}
	for _, o := range e.owners {
		if o.Owns(scope) && o.Name != owner {
			return o.refusal(scope, fmt.Sprintf("scope %q belongs to the %s and is written only through its API", scope, o.Name))
		}
	}
	return nil
}

// guardedEvent builds the event of a mutation guarded by expected: it takes
// generation expected+1, and carries the request fingerprint only when the
// caller gave an idempotency key.
func (e *Engine) guardedEvent(kind EventKind, scope Scope, expected Generation, by author, reason, key, hash string) *Event {
	return &Event{
		Kind:               kind,
		Scope:              scope,
		Generation:         expected + 1,
		PreviousGeneration: GenerationPtr(expected),
		Actor:              by.actor,
		OnBehalfOf:         by.onBehalfOf,
		Unauthenticated:    by.unauthenticated,
		Reason:             reason,
		IdempotencyKey:     key,
		RequestHash:        hashIf(key, hash),
		Timestamp:          e.timestamp(),
	}
}

// replayed returns the record of an earlier request with the same
// idempotency key, nil when the key is new, and idempotency-key-reused when
// the key served a different request.
func (e *Engine) replayed(ctx context.Context, key, hash string) (*IdempotencyRecord, error) {
	if key == "" {
		return nil, nil
	}
	rec, err := e.store.Idempotency(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if rec.RequestHash != hash {
		return nil, &Error{Code: CodeIdempotencyReused, Message: "idempotency key was already used for a different request"}
	}
	return rec, nil
}

// replayedAfterRace resolves a commit that lost a race to a concurrent
// request with the same key.
func (e *Engine) replayedAfterRace(ctx context.Context, key, hash string) (*IdempotencyRecord, error) {
	rec, err := e.replayed(ctx, key, hash)
	if err == nil && rec == nil {
		err = fmt.Errorf("idempotency key %q reported as recorded but not found", key)
	}
	return rec, err
}

func requestHash(op string, scope Scope, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write([]byte(scope))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hashIf(key, hash string) string {
	if key == "" {
		return ""
	}
	return hash
}

// compactDocument checks that doc is present, valid JSON and within the
// engine's limits (so that no store is asked to keep what it could not read
// back), and removes insignificant whitespace, keeping key order and number
// text as authored: one pass over the document. The result is a copy, so
// that a caller changing doc afterwards cannot change what a store keeps.
// It also reports whether every number is an integer literal short enough
// to need no number-precision check.
// compactChecked is compactDocument for a document that a CheckedDocument
// may already vouch for: one checked against limits no looser than the
// engine's is returned as it is, neither scanned nor copied (the caller
// keeps it unmodified until the commit returns; the store copies what it
// keeps).
func (e *Engine) compactChecked(doc json.RawMessage, checked CheckedDocument) (json.RawMessage, bool, error) {
	if checked.Holds(doc) && checked.within(e.limits) {
		return doc, checked.short, nil
	}
	return e.compactDocument(doc)
}

func (e *Engine) compactDocument(doc json.RawMessage) (json.RawMessage, bool, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return nil, false, Errorf(CodeBadRequest, "document is required")
	}
	out, numbers, err := e.limits.checkAndCompact(doc, 0)
	if err != nil {
		return nil, false, err
	}
	if len(out) == len(doc) { // compact already: out is doc itself
		out = bytes.Clone(out)
	}
	return out, numbers.integersOnly && numbers.maxDigits <= canonical.ShortIntegerDigits, nil
}
