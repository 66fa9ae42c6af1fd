package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/config/secret"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/schema"
)

// DefaultNamespace is the namespace of a manifest that names none.
const DefaultNamespace = "default"

// segmentRE bounds each part of a component name so that the component fits
// in a scope with its epoch and maps onto an environment variable name.
var segmentRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// QualifiedComponent returns component with its namespace: a bare name
// (no '.') is shorthand for DefaultNamespace.name, as in the reference's
// annotation, where a component really named "resources" is written
// "default.resources".
func QualifiedComponent(component string) string {
	if strings.Contains(component, ".") {
		return component
	}
	return DefaultNamespace + "." + component
}

// ValidComponent reports whether component has the form namespace.name, each
// part a letter or digit followed by up to 62 letters, digits, '_' or '-'.
func ValidComponent(component string) bool {
	ns, name, ok := strings.Cut(component, ".")
	return ok && segmentRE.MatchString(ns) && segmentRE.MatchString(name)
}

// Manifest is a component's configuration declaration: the JSON Schema of its
// configuration, its defaults and the epoch the schema determines. A Manifest
// is immutable once loaded. Build it with ParseManifest or LoadManifest,
// which compile the schema: a Manifest assembled by hand cannot validate.
type Manifest struct {
	// File is where the manifest was read from (empty when parsed from bytes
	// without a name).
	File      string
	Name      string
	Namespace string
	// Schema is the JSON Schema of the configuration, compact JSON.
	Schema json.RawMessage
	// Defaults is the configuration used when nothing was created; nil when
	// the manifest declares none.
	Defaults json.RawMessage
	// Epoch is the SHA-256 hex of the schema's canonical JSON.
	Epoch string

	compiled *schema.Schema
}

// Component returns namespace.name.
func (m *Manifest) Component() string { return m.Namespace + "." + m.Name }

// Validate checks doc (JSON) against the manifest's schema. The issues are nil
// when doc fits; the error is reserved for a failing validator.
func (m *Manifest) Validate(doc json.RawMessage) ([]varplane.Issue, error) {
	return validateDoc(m.compiled, doc)
}

// ManifestError is a manifest (or annotation, or deployment) that cannot be
// used: File and the JSON Pointer Path say where, Message what.
type ManifestError struct {
	File    string
	Path    string
	Message string
}

// Error reads "file: /path: message".
func (e *ManifestError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

func manifestErr(file, path, format string, args ...any) error {
	return &ManifestError{File: file, Path: path, Message: fmt.Sprintf(format, args...)}
}

// decodeErr turns a decoding error into a ManifestError naming file: a
// DecodeError keeps its path, a converter's *varplane.Error its message
// (which names the line or byte).
func decodeErr(file string, err error) error {
	var de *DecodeError
	if errors.As(err, &de) {
		return &ManifestError{File: file, Path: de.Path, Message: de.Message}
	}
	if ve := (*varplane.Error)(nil); errors.As(err, &ve) {
		return &ManifestError{File: file, Message: varplane.ErrorMessage(ve)}
	}
	return &ManifestError{File: file, Message: err.Error()}
}

// ErrNoConfiguration is returned by ParseManifest for a manifest that does
// not declare `configuration`.
var ErrNoConfiguration = errors.New("config: manifest declares no configuration")

// ParseManifest reads a component manifest from data (JSON when file ends in
// .json, YAML otherwise). Besides `name` (required) and `namespace` (default
// DefaultNamespace), only `configuration` is read: it must hold `schema` (a
// JSON Schema object, required) and optionally `defaults` (an object fitting
// the schema), and nothing else. Other top-level keys belong to other tools
// and are ignored. It returns ErrNoConfiguration when the manifest declares no
// configuration, and a *ManifestError naming file and path otherwise.
func ParseManifest(file string, data []byte) (*Manifest, error) {
	v, err := DecodeFile(file, data)
	if err != nil {
		return nil, decodeErr(file, err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, manifestErr(file, "", "a manifest must be an object")
	}
	raw, declared := top["configuration"]
	if !declared {
		return nil, ErrNoConfiguration
	}
	m := &Manifest{File: file, Namespace: DefaultNamespace}
	name, ok := top["name"].(string)
	if !ok || name == "" {
		return nil, manifestErr(file, "/name", "name is required and must be a string")
	}
	m.Name = name
	if ns, present := top["namespace"]; present {
		s, ok := ns.(string)
		if !ok || s == "" {
			return nil, manifestErr(file, "/namespace", "namespace must be a non-empty string")
		}
		m.Namespace = s
	}
	if !segmentRE.MatchString(m.Name) {
		return nil, manifestErr(file, "/name", "name must be a letter or digit followed by up to 62 letters, digits, '_' or '-'")
	}
	if !segmentRE.MatchString(m.Namespace) {
		return nil, manifestErr(file, "/namespace", "namespace must be a letter or digit followed by up to 62 letters, digits, '_' or '-'")
	}
	conf, ok := raw.(map[string]any)
	if !ok {
		return nil, manifestErr(file, "/configuration", "configuration must be an object with schema and defaults")
	}
	for _, k := range sortedKeys(conf) {
		if k != "schema" && k != "defaults" {
			return nil, manifestErr(file, "/configuration/"+canonical.EscapeToken(k), "unknown property: configuration holds only schema and defaults")
		}
	}
	sch, ok := conf["schema"]
	if !ok {
		return nil, manifestErr(file, "/configuration/schema", "schema is required")
	}
	if _, ok := sch.(map[string]any); !ok {
		return nil, manifestErr(file, "/configuration/schema", "schema must be a JSON Schema object")
	}
	if m.Schema, err = jsontext.Marshal(sch); err != nil {
		return nil, manifestErr(file, "/configuration/schema", "%v", err)
	}
	if m.Epoch, err = Epoch(m.Schema); err != nil {
		return nil, manifestErr(file, "/configuration/schema", "%v", err)
	}
	if m.compiled, err = schema.Compile(m.Schema); err != nil {
		return nil, manifestErr(file, "/configuration/schema", "not a valid JSON Schema: %v", err)
	}
	if d, present := conf["defaults"]; present {
		if _, ok := d.(map[string]any); !ok {
			return nil, manifestErr(file, "/configuration/defaults", "defaults must be an object")
		}
		if m.Defaults, err = jsontext.Marshal(d); err != nil {
			return nil, manifestErr(file, "/configuration/defaults", "%v", err)
		}
		if err := checkFits(m.compiled, m.Defaults, file, "/configuration/defaults"); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// checkFits validates doc and reports the first issues as a ManifestError
// rooted at base.
func checkFits(s *schema.Schema, doc json.RawMessage, file, base string) error {
	issues, err := validateDoc(s, doc)
	if err != nil {
		return manifestErr(file, base, "%v", err)
	}
	if len(issues) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(issues))
	for _, is := range issues {
		msgs = append(msgs, fmt.Sprintf("%s%s: %s", base, is.Path, is.Message))
	}
	return &ManifestError{File: file, Path: base + issues[0].Path, Message: "does not fit the schema: " + strings.Join(msgs, "; ")}
}

// validateDoc checks doc against s after the numeric checks of the
// canonicaliser, which a schema validator cannot see (a number beyond 2^53
// would be stored changed).
func validateDoc(s *schema.Schema, doc json.RawMessage) ([]varplane.Issue, error) {
	unsafe, err := canonical.UnsafeNumbers(doc, 20)
	if err != nil {
		return []varplane.Issue{{Code: varplane.IssueSyntax, Path: "", Message: "document is not valid JSON"}}, nil
	}
	var issues []varplane.Issue
	for _, u := range unsafe {
		issues = append(issues, varplane.Issue{Code: varplane.IssueNumberPrecision, Path: u.Path, Message: "number " + u.Reason})
	}
	if len(issues) > 0 {
		return issues, nil
	}
	if s == nil {
		return nil, errors.New("config: no schema to validate against")
	}
	issues, err = s.Validate(doc)
	if err != nil || len(issues) == 0 {
		return issues, err
	}
	// A secret reference stands for a value only the consumer knows: what
	// the schema says of the place it stands is checked there, once the
	// value is substituted (ValidateResolved), as the reference system
	// deploys `bar: $BAZ_VALUE` into a number.
	v, err := DecodeJSON(doc)
	if err != nil {
		return issues, nil
	}
	refs := secret.Paths(v)
	if len(refs) == 0 {
		return issues, nil
	}
	kept := issues[:0]
	for _, is := range issues {
		if _, ref := refs[is.Path]; !ref {
			kept = append(kept, is)
		}
	}
	return kept, nil
}

// ValidateResolved checks doc once its secrets are known, as the consumer
// does before it substitutes them: each reference is put in place as its
// value, as a string or, where the schema refuses the string, as the JSON
// scalar the value spells (a number, true, false or null), and the whole
// must fit. An issue at a reference's place names the secret's variable,
// never its value. References whose variable is missing are left for
// secret.Substitute to report.
func (m *Manifest) ValidateResolved(doc json.RawMessage, lookup func(string) (string, bool)) ([]varplane.Issue, error) {
	return validateResolved(m.compiled, doc, lookup)
}

func validateResolved(s *schema.Schema, doc json.RawMessage, lookup func(string) (string, bool)) ([]varplane.Issue, error) {
	v, err := DecodeJSON(doc)
	if err != nil {
		return nil, err
	}
	refs := secret.Paths(v)
	if len(refs) == 0 {
		return validateDoc(s, doc)
	}
	values := map[string]string{}
	for at, name := range refs {
		if val, ok := secret.Lookup(lookup, name); ok {
			values[at] = val
		}
	}
	check := func(asScalar map[string]bool) ([]varplane.Issue, error) {
		resolved := replaceAt(v, "", func(at string) (any, bool) {
			val, ok := values[at]
			if !ok {
				return nil, false
			}
			if asScalar[at] {
				if x, err := DecodeJSON([]byte(val)); err == nil {
					return x, true
				}
			}
			return val, true
		})
		b, err := jsontext.Marshal(resolved)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, errors.New("config: no schema to validate against")
		}
		return s.Validate(b)
	}
	issues, err := check(nil)
	if err != nil || len(issues) == 0 {
		return issues, err
	}
	retry := map[string]bool{}
	for _, is := range issues {
		if val, ok := values[is.Path]; ok {
			x, err := DecodeJSON([]byte(val))
			switch x.(type) {
			case json.Number, bool, nil:
				retry[is.Path] = err == nil
			}
		}
	}
	if len(retry) > 0 {
		if issues, err = check(retry); err != nil || len(issues) == 0 {
			return issues, err
		}
	}
	for i, is := range issues {
		if name, ok := refs[is.Path]; ok {
			issues[i].Message = fmt.Sprintf("the value of secret $%s (%s) does not fit here: %s", name, secret.EnvName(name), is.Message)
		}
	}
	return issues, nil
}

// replaceAt returns a copy of v with the values at the places fn answers
// for replaced.
func replaceAt(v any, at string, fn func(at string) (any, bool)) any {
	if x, ok := fn(at); ok {
		return x
	}
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = replaceAt(x, at+"/"+canonical.EscapeToken(k), fn)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = replaceAt(x, at+"/"+strconv.Itoa(i), fn)
		}
		return out
	}
	return v
}

// LoadManifest reads the manifest file at path; see ParseManifest.
func LoadManifest(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return ParseManifest(path, data)
}

// LoadManifests reads every .yaml, .yml and .json file under dir, recursively
// (hidden directories skipped), and returns the manifests that declare
// configuration, sorted by component. Files that are not manifests of
// configuration (no `configuration` key, or not an object) are skipped; a
// file that declares configuration wrongly fails the whole load, naming the
// file and path. Two manifests of the same component are an error naming both
// files.
func LoadManifests(dir string) ([]*Manifest, error) {
	var out []*Manifest
	seen := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read manifest: %w", err)
		}
		if !declaresConfiguration(path, data) {
			return nil
		}
		m, err := ParseManifest(path, data)
		if err != nil {
			return err
		}
		if prev, dup := seen[m.Component()]; dup {
			return manifestErr(path, "", "component %s is already declared by %s", m.Component(), prev)
		}
		seen[m.Component()] = path
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Component() < out[j].Component() })
	return out, nil
}

// declaresConfiguration reports whether data decodes to an object holding a
// `configuration` key. A file that does not decode is not a manifest of ours
// unless its text mentions configuration at all, in which case ParseManifest
// reports the decoding error.
func declaresConfiguration(file string, data []byte) bool {
	v, err := DecodeFile(file, data)
	if err != nil {
		return strings.Contains(string(data), "configuration")
	}
	top, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, ok = top["configuration"]
	return ok
}

// Epoch returns the configuration epoch of a schema: the lowercase hex SHA-256
// (64 characters, no prefix) of its RFC 8785 canonical JSON. Equal schemas
// give equal epochs whatever their key order, whitespace, escaping or number
// spelling; any other change gives a new epoch. It fails when schema is not
// one valid JSON value or holds a number canonical JSON cannot keep exact.
func Epoch(schema json.RawMessage) (string, error) {
	c, err := canonical.Transform(schema)
	if err != nil {
		return "", fmt.Errorf("epoch: %w", err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// ValidEpoch reports whether s has the form of an epoch: 64 lowercase hex.
func ValidEpoch(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
