// Package secret holds configuration secrets: references such as
// "$STRIPE_API_KEY" that the values service stores and serves in place of the
// secret, the substitution of those references in the consuming process, and
// the Secret type that keeps a substituted value out of logs and output.
//
// A reference is a string matching ^\$[A-Z0-9_]{1,32}$, wherever it stands in
// a configuration (nested objects and arrays included). In the consumer's
// process the value of reference $NAME is the environment variable
// VARPLANE_CONFIGURATION__NAME (two underscores), which the deployment sets
// from the Secret manifest or env file that Conceal writes.
//
// Concurrency: everything here is a pure function or an immutable value, safe
// for concurrent use.
package secret

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/varplane/varplane/canonical"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts the environment variable that carries a secret's value.
const EnvPrefix = "VARPLANE_CONFIGURATION__"

// ReferencePrefix starts the same variable under the reference system's
// name (TOA_CONFIGURATION__NAME), read when ours is not set, so that a
// deployment moving over keeps its variables.
const ReferencePrefix = "TOA_CONFIGURATION__"

// Lookup returns the value of secret name from lookup: the variable
// EnvName(name), or else the reference system's alias.
func Lookup(lookup func(string) (string, bool), name string) (string, bool) {
	if v, ok := lookup(EnvPrefix + name); ok {
		return v, true
	}
	return lookup(ReferencePrefix + name)
}

// IsVariable reports whether the environment variable named key carries a
// secret (under either prefix).
func IsVariable(key string) bool {
	for _, p := range []string{EnvPrefix, ReferencePrefix} {
		if rest, ok := strings.CutPrefix(key, p); ok && ValidName(rest) {
			return true
		}
	}
	return false
}

// Paths returns the secret references of v, a decoded JSON value, by the
// JSON Pointer of where each stands (the name without its "$").
func Paths(v any) map[string]string {
	out := map[string]string{}
	paths(v, "", out)
	return out
}

func paths(v any, at string, out map[string]string) {
	switch t := v.(type) {
	case string:
		if IsReference(t) {
			out[at] = t[1:]
		}
	case map[string]any:
		for k, x := range t {
			paths(x, at+"/"+canonical.EscapeToken(k), out)
		}
	case []any:
		for i, x := range t {
			paths(x, at+"/"+strconv.Itoa(i), out)
		}
	}
}

// Redacted is what every printed, logged or marshalled form of a Secret shows.
const Redacted = "<REDACTED>"

// KubernetesName is the name of the Kubernetes Secret that Conceal writes.
const KubernetesName = "configuration"

var referenceRE = regexp.MustCompile(`^\$[A-Z0-9_]{1,32}$`)
var nameRE = regexp.MustCompile(`^[A-Z0-9_]{1,32}$`)

// IsReference reports whether s is a secret reference: "$" followed by 1 to
// 32 uppercase letters, digits or underscores.
func IsReference(s string) bool { return referenceRE.MatchString(s) }

// ValidName reports whether name (without "$") can name a secret.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// EnvName returns the environment variable that carries secret name.
func EnvName(name string) string { return EnvPrefix + name }

// Secret is a substituted secret value. Unwrap gives the value; every other
// form (String, all fmt verbs, JSON, text, YAML, slog) is "<REDACTED>", so a
// Secret that reaches a log line or a response body leaks nothing. The zero
// Secret unwraps to "".
type Secret struct {
	value string
}

// New wraps value as a Secret.
func New(value string) Secret { return Secret{value: value} }

// Unwrap returns the secret value. Call it at the point of use only.
func (s Secret) Unwrap() string { return s.value }

// String returns "<REDACTED>".
func (s Secret) String() string { return Redacted }

// GoString returns "<REDACTED>", for %#v.
func (s Secret) GoString() string { return Redacted }

// Format prints "<REDACTED>" for every verb and flag (%v %+v %#v %s %q %x
// %d …); %q quotes it, as it would quote a string.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = f.Write([]byte(strconv.Quote(Redacted)))
		return
	}
	_, _ = f.Write([]byte(Redacted))
}

// MarshalJSON returns the JSON string "<REDACTED>".
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText returns "<REDACTED>".
func (s Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// MarshalYAML returns "<REDACTED>".
func (s Secret) MarshalYAML() (any, error) { return Redacted, nil }

// LogValue makes slog print "<REDACTED>".
func (s Secret) LogValue() slog.Value { return slog.StringValue(Redacted) }

var (
	_ fmt.Formatter                = Secret{}
	_ fmt.GoStringer               = Secret{}
	_ json.Marshaler               = Secret{}
	_ slog.LogValuer               = Secret{}
	_ yaml.Marshaler               = Secret{}
	_ fmt.Stringer                 = Secret{}
	_ interface{ Unwrap() string } = Secret{}
)

// References returns the names (without "$") of every secret reference in v,
// a decoded JSON value, sorted and without duplicates.
func References(v any) []string {
	set := map[string]bool{}
	walk(v, func(s string) {
		if IsReference(s) {
			set[s[1:]] = true
		}
	})
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func walk(v any, fn func(string)) {
	switch t := v.(type) {
	case string:
		fn(t)
	case map[string]any:
		for _, x := range t {
			walk(x, fn)
		}
	case []any:
		for _, x := range t {
			walk(x, fn)
		}
	}
}

// MissingError names the environment variables that a configuration's
// secrets need and the process lacks.
type MissingError struct {
	Variables []string
}

// Error lists the variables.
func (e *MissingError) Error() string {
	return "secret: environment variable(s) not set: " + strings.Join(e.Variables, ", ")
}

// Substitute returns a copy of v, a decoded JSON value, in which every secret
// reference is replaced by a Secret holding the value of its environment
// variable (or its TOA_ alias, see Lookup), as lookup reports it. Other strings
// stay plain strings. When any variable is missing it returns a *MissingError
// naming all of them, and no value.
func Substitute(v any, lookup func(string) (string, bool)) (any, error) {
	var missing []string
	out := substitute(v, lookup, &missing)
	if len(missing) > 0 {
		sort.Strings(missing)
		uniq := missing[:0]
		for i, m := range missing {
			if i == 0 || m != missing[i-1] {
				uniq = append(uniq, m)
			}
		}
		return nil, &MissingError{Variables: uniq}
	}
	return out, nil
}

func substitute(v any, lookup func(string) (string, bool), missing *[]string) any {
	switch t := v.(type) {
	case string:
		if !IsReference(t) {
			return t
		}
		val, ok := Lookup(lookup, t[1:])
		if !ok {
			*missing = append(*missing, EnvName(t[1:]))
			return nil
		}
		return New(val)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = substitute(x, lookup, missing)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = substitute(x, lookup, missing)
		}
		return out
	}
	return v
}

// Inputs are where ParseAssignments may read a value from instead of the
// argument itself, so that a secret stays out of shell history and the
// process list: NAME=@PATH reads the file at PATH (through Open), NAME=-
// reads standard input (Stdin, once). A nil field refuses that form.
type Inputs struct {
	Stdin io.Reader
	Open  func(path string) (io.ReadCloser, error)
}

// MaxValueBytes bounds a value read from a file or standard input (a
// Kubernetes Secret holds at most 1 MiB in all).
const MaxValueBytes = 1 << 20

// ParseAssignments reads NAME=value pairs, as given to `conceal`. A name may
// be written with or without its "$"; it must be a valid secret name, and
// each name may appear once. The value is taken literally, except:
//
//	NAME=@PATH   the content of the file PATH
//	NAME=-       all of standard input (one NAME=- at most)
//	NAME=@@…     the literal value "@…" (an escaped leading '@')
//
// A value read from a file or standard input loses one trailing line break
// ("\n" or "\r\n"), as editors and `echo` add one.
//
// Errors never quote a value, nor an argument that may be one: a malformed
// argument or an invalid name is named by its position among the
// assignments ("NAME=value #2"), a repeated name by the name.
func ParseAssignments(args []string, in Inputs) (map[string]string, error) {
	out := make(map[string]string, len(args))
	pos := make(map[string]int, len(args))
	stdinBy := ""
	for i, a := range args {
		n := i + 1
		name, value, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("secret: NAME=value #%d has no '=' (not shown: it may be a secret)", n)
		}
		name = strings.TrimPrefix(name, "$")
		if !ValidName(name) {
			return nil, fmt.Errorf("secret: NAME=value #%d: the name is not a secret name (1 to 32 of A-Z, 0-9, _; not shown)", n)
		}
		if first, dup := pos[name]; dup {
			return nil, fmt.Errorf("secret: %s is given twice (NAME=value #%d and #%d)", name, first, n)
		}
		pos[name] = n
		switch {
		case value == "-":
			if stdinBy != "" {
				return nil, fmt.Errorf("secret: %s and %s both read standard input (NAME=- may appear once)", stdinBy, name)
			}
			stdinBy = name
			if in.Stdin == nil {
				return nil, fmt.Errorf("secret: %s=-: standard input is not available", name)
			}
			v, err := readValue(in.Stdin)
			if err != nil {
				return nil, fmt.Errorf("secret: %s=-: read standard input: %w", name, err)
			}
			value = v
		case strings.HasPrefix(value, "@@"):
			value = value[1:]
		case strings.HasPrefix(value, "@"):
			path := value[1:]
			if path == "" {
				return nil, fmt.Errorf("secret: %s=@ names no file (write @@ for a value that starts with '@')", name)
			}
			if in.Open == nil {
				return nil, fmt.Errorf("secret: %s=@…: reading files is not available", name)
			}
			v, err := readFile(in.Open, path)
			if err != nil {
				return nil, fmt.Errorf("secret: %s: %w", name, err)
			}
			value = v
		}
		out[name] = value
	}
	return out, nil
}

func readFile(open func(string) (io.ReadCloser, error), path string) (string, error) {
	f, err := open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	v, err := readValue(f)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return v, nil
}

// readValue reads a whole value, at most MaxValueBytes, without its one
// trailing line break.
func readValue(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxValueBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxValueBytes {
		return "", fmt.Errorf("the value is larger than %d bytes", MaxValueBytes)
	}
	v := strings.TrimSuffix(string(b), "\n")
	if len(v) < len(b) {
		v = strings.TrimSuffix(v, "\r")
	}
	return v, nil
}

// ErrMultiline is returned by EnvFile for a value with a line break, which the
// env file format cannot carry.
var ErrMultiline = errors.New("secret: an env file cannot carry a value with a line break")

// EnvFile renders secrets (name → value) as an env file, one
// VARPLANE_CONFIGURATION__NAME=value line each, sorted, values taken
// literally (the format of `docker run --env-file` and
// `kubectl create secret generic --from-env-file`).
func EnvFile(secrets map[string]string) ([]byte, error) {
	var b strings.Builder
	for _, name := range sortedNames(secrets) {
		v := secrets[name]
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("%w (%s)", ErrMultiline, name)
		}
		b.WriteString(EnvName(name))
		b.WriteByte('=')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// KubernetesManifest renders secrets as a Kubernetes Secret manifest (YAML)
// named KubernetesName, its data keys the VARPLANE_CONFIGURATION__NAME
// variables so that `envFrom: [{secretRef: {name: configuration}}]` deploys
// them. namespace is written when non-empty.
func KubernetesManifest(namespace string, secrets map[string]string) ([]byte, error) {
	meta := &yaml.Node{Kind: yaml.MappingNode}
	meta.Content = append(meta.Content, str("name"), str(KubernetesName))
	if namespace != "" {
		meta.Content = append(meta.Content, str("namespace"), str(namespace))
	}
	data := &yaml.Node{Kind: yaml.MappingNode}
	for _, name := range sortedNames(secrets) {
		data.Content = append(data.Content, str(EnvName(name)), str(base64.StdEncoding.EncodeToString([]byte(secrets[name]))))
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("apiVersion"), str("v1"),
		str("kind"), str("Secret"),
		str("metadata"), meta,
		str("type"), str("Opaque"),
		str("data"), data,
	}}
	return yaml.Marshal(doc)
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
