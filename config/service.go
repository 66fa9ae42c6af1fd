package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/varplane/varplane"
)

// The error codes of the values service: seed 001's UNKNOWN_COMPONENT and
// INVALID_CONFIGURATION, spelt as every varplane code is ("unknown-component",
// "invalid-configuration"). They are the root package's codes, carried by
// *varplane.Error and answered with HTTP 422.
const (
	CodeUnknownComponent     = varplane.CodeUnknownComponent
	CodeInvalidConfiguration = varplane.CodeInvalidConfiguration
)

// OwnerName is the name the values service writes its scopes under.
const OwnerName = "values service"

// Owner reserves the configuration scopes ("<component>@<epoch>", see
// ParseScope) to the values service: given to the engine (Options.Owners),
// it makes every other writer (the var admin API's create, activate,
// deactivate and rollback) answer scope-owned, so that nothing the schema
// forbids is ever served. Service names it in its own writes.
var Owner = varplane.Owner{Name: OwnerName, Owns: func(s varplane.Scope) bool {
	_, _, ok := ParseScope(s)
	return ok
}}

// Sentinels for errors.Is on the values service's errors.
var (
	ErrUnknownComponent     = &varplane.Error{Code: CodeUnknownComponent}
	ErrInvalidConfiguration = &varplane.Error{Code: CodeInvalidConfiguration}
)

// Source values: where a served configuration comes from.
const (
	SourceCreated  = "created"
	SourceDefaults = "defaults"
)

// Scope returns the core scope that holds component's configuration objects
// for epoch: "<namespace>.<name>@<epoch>". For a valid component and epoch it
// is a valid varplane scope (at most 127 + 1 + 64 bytes).
func Scope(component, epoch string) varplane.Scope {
	return varplane.Scope(component + "@" + epoch)
}

// ParseScope splits a configuration scope into component and epoch; ok is
// false for any scope that is not of that form.
func ParseScope(s varplane.Scope) (component, epoch string, ok bool) {
	i := strings.LastIndexByte(string(s), '@')
	if i < 0 {
		return "", "", false
	}
	component, epoch = string(s[:i]), string(s[i+1:])
	if !ValidComponent(component) || !ValidEpoch(epoch) {
		return "", "", false
	}
	return component, epoch, true
}

// ObjectID returns the id of the configuration object that generation gen of
// scope holds: 32 hex digits derived from both, so every create has its own
// id even when two creates store the same content.
func ObjectID(scope varplane.Scope, gen varplane.Generation) string {
	sum := sha256.Sum256([]byte(string(scope) + "#" + strconv.FormatUint(uint64(gen), 10)))
	return hex.EncodeToString(sum[:16])
}

// CreatedEvent is the configuration.values.created event: the object as
// stored. Created is the generation of the object's scope, strictly
// increasing per component and epoch.
type CreatedEvent struct {
	Component     string          `json:"component"`
	Epoch         string          `json:"epoch"`
	Configuration json.RawMessage `json:"configuration"`
	Originator    string          `json:"originator"`
	ID            string          `json:"id"`
	Created       uint64          `json:"created"`
}

// EventFromHead returns the created event that head stands for; ok is false
// when head is nil or its scope is not a configuration scope.
func EventFromHead(h *varplane.Head) (CreatedEvent, bool) {
	if h == nil {
		return CreatedEvent{}, false
	}
	component, epoch, ok := ParseScope(h.Scope)
	if !ok {
		return CreatedEvent{}, false
	}
	return CreatedEvent{
		Component:     component,
		Epoch:         epoch,
		Configuration: h.Document,
		Originator:    h.Actor,
		ID:            ObjectID(h.Scope, h.Generation),
		Created:       uint64(h.Generation),
	}, true
}

// EventsFromCommit returns the created events of a commit: one per
// configuration scope that the commit gave a new head. A create, and a
// rollback through the core API (which makes an earlier object current again
// at a new generation), both produce one; deactivations produce none. Where
// the engine reserves the scopes to the values service (Owner), only its own
// creates commit them.
func EventsFromCommit(c varplane.Commit) []CreatedEvent {
	var out []CreatedEvent
	for _, ch := range c.Changes {
		if ev, ok := EventFromHead(ch.Head); ok {
			out = append(out, ev)
		}
	}
	return out
}

// Value is a component's configuration for an epoch as the service serves it.
type Value struct {
	Component     string
	Epoch         string
	Configuration json.RawMessage
	// Schema is nil for an epoch the deployment does not declare.
	Schema json.RawMessage
	// Created is the object's order, 0 for defaults.
	Created    uint64
	Source     string
	ID         string
	Originator string
}

// Pair names a component and an epoch.
type Pair struct {
	Component string `json:"component"`
	Epoch     string `json:"epoch"`
}

// Fetched is one answer of Fetch: Configuration is JSON null and Created 0
// when there is none; Created is 0 for defaults.
type Fetched struct {
	Component     string          `json:"component"`
	Epoch         string          `json:"epoch"`
	Configuration json.RawMessage `json:"configuration"`
	Created       uint64          `json:"created"`
}

// Listed is one entry of List.
type Listed struct {
	Component     string          `json:"component"`
	Epoch         string          `json:"epoch"`
	Schema        json.RawMessage `json:"schema"`
	Configuration json.RawMessage `json:"configuration"`
	// Source is "created", "defaults" or "" (nothing), Created the object's
	// order; both are for pages and are not part of the list's wire shape.
	Source  string `json:"-"`
	Created uint64 `json:"-"`
}

// CreateRequest asks for a new configuration object.
type CreateRequest struct {
	Component     string
	Configuration json.RawMessage
	Originator    string
}

// Created answers Create.
type Created struct {
	ID      string `json:"id"`
	Epoch   string `json:"epoch"`
	Created uint64 `json:"created"`
}

// Service is the values service over an engine and a deployment. It keeps no
// state of its own: every object is a revision of a configuration scope in
// the engine's store, so a Service over a persistent store serves, after a
// restart, everything created before it. Safe for concurrent use.
type Service struct {
	engine *varplane.Engine
	dep    *Deployment
	// casAttempts bounds the activation retries when concurrent creates race.
	casAttempts int
}

// NewService returns the values service of deployment dep over engine. The
// deployment must come from NewDeployment, ParseDeployment or
// LoadDeployment, which check and compile it.
func NewService(engine *varplane.Engine, dep *Deployment) (*Service, error) {
	if engine == nil || dep == nil {
		return nil, errors.New("config: NewService needs an engine and a deployment")
	}
	for name, c := range dep.Components {
		if c.compiled == nil {
			return nil, fmt.Errorf("config: component %s of the deployment is not compiled; build deployments with NewDeployment or ParseDeployment", name)
		}
	}
	return &Service{engine: engine, dep: dep, casAttempts: 16}, nil
}

// Deployment returns the deployment the service serves.
func (s *Service) Deployment() *Deployment { return s.dep }

// Engine returns the engine the service stores into.
func (s *Service) Engine() *varplane.Engine { return s.engine }

// OnCreated registers fn for every created event, delivered through the
// engine's commit seam after the store is updated. fn must not block. The
// returned function unregisters it.
func (s *Service) OnCreated(fn func(CreatedEvent)) (unsubscribe func()) {
	return s.engine.OnCommit(func(c varplane.Commit) {
		for _, ev := range EventsFromCommit(c) {
			fn(ev)
		}
	})
}

// Get returns component's configuration for epoch ("" for the deployed one):
// the latest object created for that epoch (also for an epoch the
// deployment no longer declares), else the deployed defaults when epoch is
// the deployed one, else none (ok false). The schema is set only for the
// deployed epoch. An epoch that is not 64 lowercase hex is bad-request.
func (s *Service) Get(ctx context.Context, component, epoch string) (Value, bool, error) {
	component = QualifiedComponent(component)
	c, declared := s.dep.Component(component)
	if epoch == "" {
		if !declared {
			return Value{}, false, nil
		}
		epoch = c.Epoch
	}
	if !ValidEpoch(epoch) {
		return Value{}, false, varplane.Errorf(varplane.CodeBadRequest, "epoch must be 64 lowercase hex digits")
	}
	if !ValidComponent(component) {
		return Value{}, false, nil
	}
	deployed := declared && c.Epoch == epoch
	v := Value{Component: component, Epoch: epoch}
	if deployed {
		v.Schema = c.Schema
	}
	st, err := s.engine.Store().State(ctx, Scope(component, epoch))
	if err != nil {
		return Value{}, false, fmt.Errorf("read configuration of %s: %w", component, err)
	}
	if ev, ok := EventFromHead(st.Head); ok {
		v.Configuration, v.Created, v.Source, v.ID, v.Originator = ev.Configuration, ev.Created, SourceCreated, ev.ID, ev.Originator
		return v, true, nil
	}
	if deployed && c.Defaults != nil {
		v.Configuration, v.Source = c.Defaults, SourceDefaults
		return v, true, nil
	}
	return Value{}, false, nil
}

// Fetch answers many pairs at once, in order: each the configuration Get
// would serve (JSON null when none) with its created order. A pair with an
// empty epoch asks for the deployed one.
func (s *Service) Fetch(ctx context.Context, pairs []Pair) ([]Fetched, error) {
	out := make([]Fetched, 0, len(pairs))
	for _, p := range pairs {
		v, ok, err := s.Get(ctx, p.Component, p.Epoch)
		if err != nil {
			return nil, err
		}
		f := Fetched{Component: p.Component, Epoch: p.Epoch, Configuration: json.RawMessage("null")}
		if ok {
			f.Epoch, f.Configuration, f.Created = v.Epoch, v.Configuration, v.Created
		}
		out = append(out, f)
	}
	return out, nil
}

// List returns every declared component's configuration for its deployed
// epoch, sorted by component; a component with nothing lists `{}`.
func (s *Service) List(ctx context.Context) ([]Listed, error) {
	names := s.dep.Names()
	out := make([]Listed, 0, len(names))
	for _, name := range names {
		c := s.dep.Components[name]
		v, ok, err := s.Get(ctx, name, c.Epoch)
		if err != nil {
			return nil, err
		}
		l := Listed{Component: name, Epoch: c.Epoch, Schema: c.Schema, Configuration: json.RawMessage("{}")}
		if ok {
			l.Configuration, l.Source, l.Created = v.Configuration, v.Source, v.Created
		}
		out = append(out, l)
	}
	return out, nil
}

// Create stores req.Configuration as a new object for the component's
// deployed epoch, recording req.Originator, and makes it current; the created
// event follows through the commit seam. It returns an unknown-component
// error for a component the deployment does not declare, and
// invalid-configuration error with the issues when the configuration does not fit
// the schema (at a secret reference's place the schema is checked by the
// consumer, on the secret's value) or is
// not valid JSON; a configuration beyond the engine's limits is
// limit-exceeded (or payload-too-large). Concurrent creates all succeed, each
// with its own created.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Created, error) {
	req.Component = QualifiedComponent(req.Component)
	c, ok := s.dep.Component(req.Component)
	if !ok {
		return Created{}, &varplane.Error{Code: CodeUnknownComponent, Message: fmt.Sprintf("component %q is not declared", req.Component)}
	}
	// The engine's limits hold before the schema validator builds a tree.
	if err := s.engine.Limits().CheckJSON(req.Configuration, 0); err != nil {
		if c := varplane.ErrorCode(err); c == varplane.CodeLimitExceeded || c == varplane.CodePayloadTooLarge {
			return Created{}, err
		}
		return Created{}, invalid([]varplane.Issue{{Code: varplane.IssueSyntax, Path: "", Message: "configuration is not valid JSON"}})
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, req.Configuration); err != nil || buf.Len() == 0 {
		return Created{}, invalid([]varplane.Issue{{Code: varplane.IssueSyntax, Path: "", Message: "configuration is not valid JSON"}})
	}
	doc := json.RawMessage(buf.Bytes())
	issues, err := c.Validate(doc)
	if err != nil {
		return Created{}, fmt.Errorf("validate configuration of %s: %w", req.Component, err)
	}
	if len(issues) > 0 {
		return Created{}, invalid(issues)
	}
	scope := Scope(req.Component, c.Epoch)
	// One publish stores the configuration and makes it current in one
	// commit: a store that fails leaves no revision behind that was never
	// made current.
	st, err := s.engine.Status(ctx, scope)
	if err != nil {
		return Created{}, fmt.Errorf("store configuration of %s: %w", req.Component, err)
	}
	expected := st.Generation
	for attempt := 0; ; attempt++ {
		act, err := s.engine.Publish(ctx, varplane.PublishRequest{
			Scope:              scope,
			Document:           doc,
			ExpectedGeneration: expected,
			Actor:              req.Originator,
			Owner:              OwnerName,
			Reason:             "configuration created",
		})
		if err == nil {
			return Created{ID: ObjectID(scope, act.Generation), Epoch: c.Epoch, Created: uint64(act.Generation)}, nil
		}
		var ve *varplane.Error
		if errors.As(err, &ve) && ve.Code == varplane.CodeRevisionInvalid {
			return Created{}, invalid(ve.Issues)
		}
		if attempt+1 < s.casAttempts && errors.As(err, &ve) && ve.Code == varplane.CodeRevisionConflict && ve.Current != nil {
			// Another create won the generation: this one becomes the next.
			expected = *ve.Current
			continue
		}
		return Created{}, fmt.Errorf("store configuration of %s: %w", req.Component, err)
	}
}

func invalid(issues []varplane.Issue) error {
	return &varplane.Error{
		Code:    CodeInvalidConfiguration,
		Message: fmt.Sprintf("configuration does not fit the schema (%d issue(s))", len(issues)),
		Issues:  issues,
	}
}
