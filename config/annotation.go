package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/varplane/varplane/canonical"
)

// ResourcesKey is the annotation key that belongs to the values service
// itself rather than to a component. A component really named resources is
// written with its namespace: "default.resources".
const ResourcesKey = "resources"

// environmentRE is what may follow the "@" of a tagged key. Keys with an "@"
// followed by anything else ("user@example.com") are plain keys.
var environmentRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// ValidEnvironment reports whether env can name a deployment environment.
func ValidEnvironment(env string) bool { return environmentRE.MatchString(env) }

// splitTag splits "key@env" into its parts; ok is false for a plain key.
func splitTag(k string) (base, env string, ok bool) {
	i := strings.LastIndexByte(k, '@')
	if i <= 0 || !environmentRE.MatchString(k[i+1:]) {
		return k, "", false
	}
	return k[:i], k[i+1:], true
}

// ResolveEnvironment returns a copy of v, a decoded JSON value, with the
// environment tags applied at every depth, inside arrays too: for env, the
// value of "key@env" replaces the value of "key" whatever the order of the
// two (the tagged value is taken whole, never merged); keys tagged for other
// environments are dropped, and so are all tagged keys when env is "".
func ResolveEnvironment(v any, env string) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		tagged := map[string]any{}
		for k, x := range t {
			base, tag, ok := splitTag(k)
			if !ok {
				out[k] = ResolveEnvironment(x, env)
				continue
			}
			if env != "" && tag == env {
				tagged[base] = ResolveEnvironment(x, env)
			}
		}
		for k, x := range tagged {
			out[k] = x
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = ResolveEnvironment(x, env)
		}
		return out
	}
	return v
}

// Annotation is the `configuration` object of a context (annotation) file:
// component (namespace.name) → values, plus the values service's own
// `resources`. It is kept as written; Deployment applies the environment.
type Annotation struct {
	File   string
	Values map[string]any
}

// ParseAnnotation reads the `configuration` key of a context file (JSON when
// file ends in .json, YAML otherwise). A file without the key annotates
// nothing; a `configuration` that is not an object is a *ManifestError.
func ParseAnnotation(file string, data []byte) (*Annotation, error) {
	a := &Annotation{File: file, Values: map[string]any{}}
	if !strings.EqualFold(filepath.Ext(file), ".json") && blankYAML(data) {
		return a, nil // a context file with nothing (or only comments) in it
	}
	v, err := DecodeFile(file, data)
	if err != nil {
		return nil, decodeErr(file, err)
	}
	if v == nil {
		return a, nil
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, manifestErr(file, "", "an annotation file must be an object")
	}
	raw, ok := top["configuration"]
	if !ok || raw == nil {
		return a, nil
	}
	conf, ok := raw.(map[string]any)
	if !ok {
		return nil, manifestErr(file, "/configuration", "configuration must be an object mapping components to their values")
	}
	a.Values = conf
	return a, nil
}

// LoadAnnotation reads the annotation file at path; see ParseAnnotation.
func LoadAnnotation(path string) (*Annotation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read annotation: %w", err)
	}
	return ParseAnnotation(path, data)
}

// Resources is what the values service may take, each a [min, max] pair of
// quantities such as ["200m", "1000m"] or ["200Mi", "500Mi"].
type Resources struct {
	CPU    []string `json:"cpu,omitempty"`
	Memory []string `json:"memory,omitempty"`
}

func parseResources(file string, v any) (*Resources, error) {
	const at = "/configuration/" + ResourcesKey
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, manifestErr(file, at, "resources must be null or an object with cpu and memory")
	}
	r := &Resources{}
	for _, k := range sortedKeys(m) {
		var dst *[]string
		switch k {
		case "cpu":
			dst = &r.CPU
		case "memory":
			dst = &r.Memory
		default:
			return nil, manifestErr(file, at+"/"+canonical.EscapeToken(k), "unknown property: resources holds only cpu and memory")
		}
		arr, ok := m[k].([]any)
		if !ok || len(arr) != 2 {
			return nil, manifestErr(file, at+"/"+k, "%s must be [min, max], two strings", k)
		}
		for i, x := range arr {
			s, ok := x.(string)
			if !ok || s == "" {
				return nil, manifestErr(file, fmt.Sprintf("%s/%s/%d", at, k, i), "%s must be [min, max], two strings", k)
			}
			*dst = append(*dst, s)
		}
	}
	return r, nil
}
