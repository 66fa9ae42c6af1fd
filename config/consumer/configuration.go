package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/config/secret"
)

// OverridePrefix starts the local override variable of a component:
// VARPLANE_CONFIGURATION_<NAMESPACE>_<NAME>, both uppercased and '-' written
// '_'.
const OverridePrefix = "VARPLANE_CONFIGURATION_"

// ReferenceOverridePrefix is the reference system's name for the same
// variable (TOA_CONFIGURATION_<NAMESPACE>_<NAME>), read when ours is not set.
const ReferenceOverridePrefix = "TOA_CONFIGURATION_"

// OverrideVariable returns the local override variable of component
// (namespace.name).
func OverrideVariable(component string) string {
	return OverridePrefix + overrideSuffix(component)
}

func overrideSuffix(component string) string {
	ns, name, _ := strings.Cut(component, ".")
	up := func(s string) string { return strings.ReplaceAll(strings.ToUpper(s), "-", "_") }
	return up(ns) + "_" + up(name)
}

// lookupOverride returns the override of component and the variable that
// held it: ours, or else the reference system's.
func lookupOverride(lookup func(string) (string, bool), component string) (string, string, bool) {
	for _, p := range []string{OverridePrefix, ReferenceOverridePrefix} {
		name := p + overrideSuffix(component)
		if v, ok := lookup(name); ok {
			return v, name, true
		}
	}
	return "", "", false
}

// vault holds the secret variables of the process. The first Configuration
// opened on the process environment takes every secret variable
// (secret.IsVariable: VARPLANE_CONFIGURATION__NAME and TOA_CONFIGURATION__NAME)
// into it and removes them from the environment, so that other code in the
// process (a dependency that dumps os.Environ, a child process) cannot read
// them; every Configuration then reads its secrets from here.
type vault struct {
	once    sync.Once
	environ func() []string
	unset   func(string) error
	log     *slog.Logger
	values  map[string]string
}

var processVault = &vault{environ: os.Environ, unset: os.Unsetenv}

func (v *vault) take() {
	v.values = map[string]string{}
	for _, kv := range v.environ() {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || !secret.IsVariable(k) {
			continue
		}
		v.values[k] = val
		if err := v.unset(k); err != nil && v.log != nil {
			v.log.Warn("consumer: a secret variable could not be removed from the environment", "variable", k, "err", err)
		}
	}
}

// lookup reads the vault (taking the environment's secrets the first time).
func (v *vault) lookup(name string) (string, bool) {
	v.once.Do(v.take)
	val, ok := v.values[name]
	return val, ok
}

// Options tune a Configuration.
type Options struct {
	// LookupEnv reads the secrets and the local override. When nil, the
	// override is read from the process environment and the secrets from
	// the process's vault: the first Open moves every secret variable out
	// of the environment into memory (os.Getenv no longer sees them), as
	// the reference system keeps them from the component's code.
	LookupEnv func(string) (string, bool)
	// Logger receives updates and rejected values; slog.Default when nil.
	Logger *slog.Logger
	// OnUpdate, when set, is called after each value the Configuration
	// takes after start, with the new value. It runs on the client's
	// delivery goroutine: return quickly.
	OnUpdate func(value any)
}

// IssuesError is a value that does not fit the component's schema.
type IssuesError struct {
	Component string
	Issues    []varplane.Issue
}

// Error lists the issues (paths and codes, never values).
func (e *IssuesError) Error() string {
	parts := make([]string, 0, len(e.Issues))
	for _, is := range e.Issues {
		p := is.Path
		if p == "" {
			p = "(configuration)"
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", p, is.Code, is.Message))
	}
	return fmt.Sprintf("consumer: configuration of %s does not fit its schema: %s", e.Component, strings.Join(parts, "; "))
}

// Configuration is one component's configuration in its process.
type Configuration struct {
	manifest *config.Manifest
	opts     Options
	log      *slog.Logger
	local    bool
	unsub    func()
	// secrets reads the secrets' variables (the vault, or
	// Options.LookupEnv).
	secrets func(string) (string, bool)

	mu      sync.Mutex
	held    bool
	value   any
	raw     json.RawMessage
	created uint64
}

// Open resolves the configuration of the component that manifest m declares.
//
// When the local override variable is set (even to the empty string, which
// reads as {}), its JSON value, with the manifest defaults filling missing
// keys at any depth (arrays are taken as given; an object where the defaults
// hold a scalar, or the reverse, is an error), is checked against the schema,
// its secrets substituted, and client is not used (it may be nil).
//
// Otherwise Open subscribes through client, then fetches the configuration
// for the manifest's epoch, waiting until one is served or ctx ends. The
// first value must fit the schema (an *IssuesError otherwise) and every
// secret it references must have its variable (a *secret.MissingError
// naming them). After that the Configuration follows the service: a strictly
// newer created order replaces the held value; a value that does not fit, or
// lacks a secret, is logged and the previous one kept.
func Open(ctx context.Context, client *Client, m *config.Manifest, opts Options) (*Configuration, error) {
	c := &Configuration{manifest: m, opts: opts, log: opts.Logger}
	if c.log == nil {
		c.log = slog.Default()
	}
	env := os.LookupEnv
	c.secrets = processVault.lookup
	if opts.LookupEnv != nil {
		env, c.secrets = opts.LookupEnv, opts.LookupEnv
	} else {
		processVault.once.Do(func() {
			processVault.log = c.log
			processVault.take()
		})
	}
	component := m.Component()
	if text, variable, ok := lookupOverride(env, component); ok {
		if err := c.openLocal(text, variable); err != nil {
			return nil, err
		}
		return c, nil
	}
	if client == nil {
		return nil, fmt.Errorf("consumer: %s: no client and %s is not set", component, OverrideVariable(component))
	}
	if err := client.Connect(ctx); err != nil {
		return nil, err
	}
	// Subscribing before fetching: an object created while the fetch is in
	// flight reaches the listener, and the newer-only rule sorts the two.
	c.unsub = client.Subscribe(component, m.Epoch, c.listen)
	u, err := client.Fetch(ctx, component, m.Epoch)
	if err != nil {
		c.unsub()
		return nil, err
	}
	if err := c.apply(u); err != nil {
		c.unsub()
		return nil, err
	}
	c.log.Info("configuration resolved", "component", component, "epoch", m.Epoch, "created", c.Created())
	return c, nil
}

func (c *Configuration) openLocal(text, variable string) error {
	component := c.manifest.Component()
	if strings.TrimSpace(text) == "" {
		text = "{}"
	}
	v, err := config.DecodeJSON([]byte(text))
	if err != nil {
		return fmt.Errorf("consumer: %s is not JSON: %w", variable, err)
	}
	if c.manifest.Defaults != nil {
		defaults, err := config.DecodeJSON(c.manifest.Defaults)
		if err != nil {
			return fmt.Errorf("consumer: defaults of %s: %w", component, err)
		}
		if v, err = FillDefaults(v, defaults); err != nil {
			return fmt.Errorf("consumer: %s: %w", variable, err)
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("consumer: %s: %w", variable, err)
	}
	c.local = true
	if err := c.apply(Update{Configuration: raw}); err != nil {
		return err
	}
	c.log.Info("configuration resolved locally", "component", component, "variable", variable)
	return nil
}

// ClashError is an override whose value and the defaults disagree on whether
// Path holds an object.
type ClashError struct{ Path string }

// Error names the path.
func (e *ClashError) Error() string {
	p := e.Path
	if p == "" {
		p = "the root"
	}
	return fmt.Sprintf("the value at %s and the defaults clash: one is an object, the other is not", p)
}

// FillDefaults returns value with the keys of defaults that value lacks
// added, at every depth of nested objects. Arrays and scalars of value are
// kept as given; an object in one where the other holds anything else is a
// *ClashError. Neither argument is modified.
func FillDefaults(value, defaults any) (any, error) {
	return fill(value, defaults, "")
}

func fill(value, defaults any, path string) (any, error) {
	dm, dIsObj := defaults.(map[string]any)
	vm, vIsObj := value.(map[string]any)
	if dIsObj != vIsObj {
		return nil, &ClashError{Path: path}
	}
	if !vIsObj {
		return value, nil
	}
	out := make(map[string]any, len(vm)+len(dm))
	for k, x := range vm {
		out[k] = x
	}
	for k, d := range dm {
		x, present := vm[k]
		if !present {
			out[k] = d
			continue
		}
		_, xo := x.(map[string]any)
		_, do := d.(map[string]any)
		if xo || do {
			merged, err := fill(x, d, path+"/"+canonical.EscapeToken(k))
			if err != nil {
				return nil, err
			}
			out[k] = merged
		}
	}
	return out, nil
}

// apply takes u when it is newer than the held value and fits: validated
// against the schema as stored, then its secrets substituted.
func (c *Configuration) apply(u Update) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held && u.Created <= c.created {
		return nil
	}
	component := c.manifest.Component()
	issues, err := c.manifest.Validate(u.Configuration)
	if err != nil {
		return fmt.Errorf("consumer: validate configuration of %s: %w", component, err)
	}
	if len(issues) > 0 {
		return &IssuesError{Component: component, Issues: issues}
	}
	v, err := config.DecodeJSON(u.Configuration)
	if err != nil {
		return fmt.Errorf("consumer: configuration of %s: %w", component, err)
	}
	sub, err := secret.Substitute(v, c.secrets)
	if err != nil {
		return fmt.Errorf("consumer: configuration of %s: %w", component, err)
	}
	// Where a secret stands, the schema is checked on its value: the
	// service and the deployment could only see the reference.
	if issues, err = c.manifest.ValidateResolved(u.Configuration, c.secrets); err != nil {
		return fmt.Errorf("consumer: validate configuration of %s: %w", component, err)
	} else if len(issues) > 0 {
		return &IssuesError{Component: component, Issues: issues}
	}
	c.held, c.value, c.raw, c.created = true, sub, u.Configuration, u.Created
	return nil
}

// listen takes the updates pushed after start.
func (c *Configuration) listen(u Update) {
	c.mu.Lock()
	stale := c.held && u.Created <= c.created
	c.mu.Unlock()
	if stale {
		return // deliveries repeat and cross; only newer ones matter
	}
	component := c.manifest.Component()
	if err := c.apply(u); err != nil {
		var ie *IssuesError
		var me *secret.MissingError
		if errors.As(err, &ie) || errors.As(err, &me) {
			// The service validated it against the schema of its epoch; the
			// component's differs, or its environment lacks a secret.
			c.log.Error("configuration value rejected, keeping the previous one", "component", component, "created", u.Created, "err", err)
			return
		}
		c.log.Error("configuration update failed", "component", component, "err", err)
		return
	}
	c.log.Info("configuration updated", "component", component, "epoch", c.manifest.Epoch, "created", u.Created)
	if c.opts.OnUpdate != nil {
		c.opts.OnUpdate(c.Value())
	}
}

// Value returns the held configuration: objects as map[string]any, arrays
// []any, numbers json.Number, secrets secret.Secret. It is shared: do not
// modify it.
func (c *Configuration) Value() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value
}

// Get returns the value at path (object keys) and whether it exists.
func (c *Configuration) Get(path ...string) (any, bool) {
	cur := c.Value()
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Raw returns the held configuration as stored: JSON with secret references,
// never their values.
func (c *Configuration) Raw() json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raw
}

// Created returns the created order of the held value: 0 for defaults and
// for a local override.
func (c *Configuration) Created() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

// Local reports whether the configuration comes from the override variable.
func (c *Configuration) Local() bool { return c.local }

// Close stops following the service. The held value stays readable.
func (c *Configuration) Close() {
	if c.unsub != nil {
		c.unsub()
	}
}
