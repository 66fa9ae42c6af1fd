package config

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/config/secret"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/schema"
)

// DeployedComponent is one component of a deployment: its epoch, the schema
// that epoch stands for, and the defaults deployed for it (nil: none).
type DeployedComponent struct {
	Epoch    string          `json:"epoch"`
	Schema   json.RawMessage `json:"schema"`
	Defaults json.RawMessage `json:"defaults,omitempty"`

	compiled *schema.Schema
}

// Validate checks doc (JSON) against the component's schema, numbers first
// (one beyond 2^53 is an issue). The issues are nil when doc fits; the error
// is reserved for a failing validator.
func (c *DeployedComponent) Validate(doc json.RawMessage) ([]varplane.Issue, error) {
	return validateDoc(c.compiled, doc)
}

// Deployment is the deployment declaration that `varplane config deploy`
// prints and `varplane serve --components` loads: every component declaring
// configuration with its epoch, schema and defaults, for one environment.
// A Deployment obtained from NewDeployment or ParseDeployment is checked
// (every epoch matches its schema, every schema compiles, every default fits)
// and immutable; it is safe for concurrent use.
type Deployment struct {
	// Environment is the environment the annotation was resolved for ("":
	// none, so every tagged key was dropped).
	Environment string `json:"environment,omitempty"`
	// Resources is what the values service may take; nil when not stated or
	// stated as null.
	Resources *Resources `json:"resources,omitempty"`
	// Components maps namespace.name to its declaration.
	Components map[string]*DeployedComponent `json:"components"`
}

// Component returns the declaration of component (namespace.name, or a bare
// name for the default namespace) and whether it is declared.
func (d *Deployment) Component(component string) (*DeployedComponent, bool) {
	c, ok := d.Components[QualifiedComponent(component)]
	return c, ok
}

// Names returns the declared components, sorted.
func (d *Deployment) Names() []string { return sortedKeys(d.Components) }

// Secrets returns the names of every secret referenced by the deployed
// defaults, sorted: what `conceal` has to provide.
func (d *Deployment) Secrets() []string {
	var all []any
	for _, c := range d.Components {
		if c.Defaults == nil {
			continue
		}
		v, err := DecodeJSON(c.Defaults)
		if err == nil {
			all = append(all, v)
		}
	}
	return secret.References(all)
}

// JSON returns the declaration, indented, keys sorted, with a final newline.
func (d *Deployment) JSON() ([]byte, error) {
	b, err := jsontext.MarshalIndent(d)
	if err != nil {
		return nil, fmt.Errorf("encode deployment: %w", err)
	}
	return append(b, '\n'), nil
}

// NewDeployment builds the deployment of manifests for environment env ("":
// none) from annotation (nil: none). The annotation is resolved for env
// first; then each key must name a manifest's component (or be
// ResourcesKey), and each component's value must be an object: it becomes
// that component's defaults in place of the manifest's, and must fit the
// schema (at a secret reference's place, the consumer checks the secret's
// value: a reference may stand where the schema wants a number). A bare key
// (no namespace) names a component of the default namespace. Any violation
// is a *ManifestError naming the annotation file and the key.
func NewDeployment(manifests []*Manifest, annotation *Annotation, env string) (*Deployment, error) {
	if env != "" && !ValidEnvironment(env) {
		return nil, fmt.Errorf("config: environment %q is not a letter or digit followed by letters, digits, '_' or '-'", env)
	}
	d := &Deployment{Environment: env, Components: make(map[string]*DeployedComponent, len(manifests))}
	for _, m := range manifests {
		if _, dup := d.Components[m.Component()]; dup {
			return nil, manifestErr(m.File, "", "component %s is declared twice", m.Component())
		}
		d.Components[m.Component()] = &DeployedComponent{Epoch: m.Epoch, Schema: m.Schema, Defaults: m.Defaults, compiled: m.compiled}
	}
	if annotation == nil {
		return d, nil
	}
	file := annotation.File
	resolved, _ := ResolveEnvironment(annotation.Values, env).(map[string]any)
	for _, key := range sortedKeys(resolved) {
		v := resolved[key]
		at := "/configuration/" + canonical.EscapeToken(key)
		if key == ResourcesKey {
			r, err := parseResources(file, v)
			if err != nil {
				return nil, err
			}
			d.Resources = r
			continue
		}
		name := QualifiedComponent(key)
		if name != key {
			if _, both := resolved[name]; both {
				return nil, manifestErr(file, at, "%q and %q name the same component", key, name)
			}
		}
		c, ok := d.Components[name]
		if !ok {
			return nil, manifestErr(file, at, "%q names no known component", key)
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, manifestErr(file, at, "the values of component %s must be an object", key)
		}
		doc, err := jsontext.Marshal(v)
		if err != nil {
			return nil, manifestErr(file, at, "%v", err)
		}
		if err := checkFits(c.compiled, doc, file, at); err != nil {
			return nil, err
		}
		c.Defaults = doc
	}
	return d, nil
}

// Deploy is `varplane config deploy`: it loads the manifests under
// manifestsDir, the annotation file (optional: "" for none), resolves them
// for environment, and returns the deployment declaration as JSON. Errors
// name the file and path at fault.
func Deploy(manifestsDir, annotationFile, environment string) ([]byte, error) {
	manifests, err := LoadManifests(manifestsDir)
	if err != nil {
		return nil, err
	}
	var ann *Annotation
	if annotationFile != "" {
		if ann, err = LoadAnnotation(annotationFile); err != nil {
			return nil, err
		}
	}
	d, err := NewDeployment(manifests, ann, environment)
	if err != nil {
		return nil, err
	}
	return d.JSON()
}

// ParseDeployment reads a deployment declaration: either the form JSON
// returns ({"environment", "resources", "components": {...}}) or a bare map
// of component → {epoch, schema, defaults}. It checks each component as
// NewDeployment would: a valid name, an epoch equal to Epoch(schema), a
// schema that compiles, defaults (when present, an object) that fit. Errors
// are *ManifestError values naming file and path.
func ParseDeployment(file string, data []byte) (*Deployment, error) {
	v, err := DecodeFile(file, data)
	if err != nil {
		return nil, decodeErr(file, err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, manifestErr(file, "", "a deployment must be an object")
	}
	d := &Deployment{Components: map[string]*DeployedComponent{}}
	comps := top
	base := ""
	if c, ok := top["components"]; ok {
		if comps, ok = c.(map[string]any); !ok {
			return nil, manifestErr(file, "/components", "components must be an object")
		}
		base = "/components"
		if e, ok := top["environment"]; ok {
			if d.Environment, ok = e.(string); !ok {
				return nil, manifestErr(file, "/environment", "environment must be a string")
			}
		}
		if r, ok := top["resources"]; ok {
			if d.Resources, err = parseResources(file, r); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range sortedKeys(comps) {
		at := base + "/" + canonical.EscapeToken(name)
		if !ValidComponent(name) {
			return nil, manifestErr(file, at, "%q is not a component name (namespace.name)", name)
		}
		obj, ok := comps[name].(map[string]any)
		if !ok {
			return nil, manifestErr(file, at, "must be an object with epoch, schema and defaults")
		}
		c := &DeployedComponent{}
		epoch, _ := obj["epoch"].(string)
		sch, ok := obj["schema"].(map[string]any)
		if !ok {
			return nil, manifestErr(file, at+"/schema", "schema is required and must be an object")
		}
		if c.Schema, err = jsontext.Marshal(sch); err != nil {
			return nil, manifestErr(file, at+"/schema", "%v", err)
		}
		if c.Epoch, err = Epoch(c.Schema); err != nil {
			return nil, manifestErr(file, at+"/schema", "%v", err)
		}
		if epoch != c.Epoch {
			return nil, manifestErr(file, at+"/epoch", "epoch does not match the schema (the schema's epoch is %s)", c.Epoch)
		}
		if c.compiled, err = schema.Compile(c.Schema); err != nil {
			return nil, manifestErr(file, at+"/schema", "not a valid JSON Schema: %v", err)
		}
		if def, present := obj["defaults"]; present && def != nil {
			if _, ok := def.(map[string]any); !ok {
				return nil, manifestErr(file, at+"/defaults", "defaults must be an object")
			}
			if c.Defaults, err = jsontext.Marshal(def); err != nil {
				return nil, manifestErr(file, at+"/defaults", "%v", err)
			}
			if err := checkFits(c.compiled, c.Defaults, file, at+"/defaults"); err != nil {
				return nil, err
			}
		}
		d.Components[name] = c
	}
	return d, nil
}

// ValuesVariables are the environment variables `varplane serve` reads the
// deployment declaration from when --components names no file, in order:
// ours, then the reference system's (its values service is deployed with
// TOA_CONFIGURATION_VALUES holding every component's epoch, schema and
// defaults, the form ParseDeployment reads).
var ValuesVariables = []string{"VARPLANE_CONFIGURATION_VALUES", "TOA_CONFIGURATION_VALUES"}

// LoadDeployment reads the deployment declaration at path (what `varplane
// serve --components FILE` loads); see ParseDeployment.
func LoadDeployment(path string) (*Deployment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read deployment: %w", err)
	}
	return ParseDeployment(path, data)
}
