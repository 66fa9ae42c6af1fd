package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/wire"
)

// The decoded form of a document used throughout this package: objects are
// map[string]any, arrays []any, numbers json.Number (their text kept, so no
// precision is lost before the canonicaliser looks at them), and strings,
// booleans and nil as themselves.

// FileLimits bound the files config reads (manifests, annotations,
// deployment declarations): operator input, held to the ceilings rather than
// to a request's limits, so that any document a deployment may allow can be
// declared.
var FileLimits = varplane.Limits{MaxBodyBytes: varplane.MaxBodyCeiling, MaxDepth: varplane.MaxDepthCeiling}.WithDefaults()

// DecodeError reports a document that cannot be decoded, with the JSON Pointer
// of the offending location when it is known.
type DecodeError struct {
	Path    string
	Message string
}

// Error names the location and the problem.
func (e *DecodeError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// DecodeJSON decodes exactly one JSON value from data. Duplicate object keys
// are refused (they would make the canonical form ambiguous). It holds no
// limits itself: input from outside is first held to varplane.Limits
// (Limits.CheckJSON, as Decode does). Its memory is proportional to the
// input whatever its shape: the JSON Pointer of an error is built only when
// the error is reported.
func DecodeJSON(data []byte) (any, error) {
	d := jsonDecoder{dec: json.NewDecoder(bytes.NewReader(data))}
	d.dec.UseNumber()
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return nil, &DecodeError{Message: "unexpected data after the JSON value"}
	}
	return v, nil
}

// jsonDecoder walks tokens keeping the way down as a stack of steps, from
// which an error's path is written.
type jsonDecoder struct {
	dec   *json.Decoder
	steps []step
}

// step is one level of the way down: an object member or an array index.
type step struct {
	key   string
	index int
	isKey bool
}

// fail returns a DecodeError at the current location.
func (d *jsonDecoder) fail(msg string) error {
	var b strings.Builder
	for _, s := range d.steps {
		b.WriteByte('/')
		if s.isKey {
			b.WriteString(canonical.EscapeToken(s.key))
		} else {
			b.WriteString(strconv.Itoa(s.index))
		}
	}
	return &DecodeError{Path: b.String(), Message: msg}
}

func (d *jsonDecoder) syntax(err error) error {
	return d.fail("not valid JSON: " + jsonProblem(err))
}

func (d *jsonDecoder) value() (any, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, d.syntax(err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return nil, d.syntax(err)
			}
			k, _ := kt.(string)
			d.steps = append(d.steps, step{key: k, isKey: true})
			if _, dup := obj[k]; dup {
				return nil, d.fail("duplicate key")
			}
			v, err := d.value()
			if err != nil {
				return nil, err
			}
			d.steps = d.steps[:len(d.steps)-1]
			obj[k] = v
		}
		if _, err := d.dec.Token(); err != nil {
			return nil, d.syntax(err)
		}
		return obj, nil
	case '[':
		arr := []any{}
		for d.dec.More() {
			d.steps = append(d.steps, step{index: len(arr)})
			v, err := d.value()
			if err != nil {
				return nil, err
			}
			d.steps = d.steps[:len(d.steps)-1]
			arr = append(arr, v)
		}
		if _, err := d.dec.Token(); err != nil {
			return nil, d.syntax(err)
		}
		return arr, nil
	}
	return nil, d.fail("not valid JSON")
}

// jsonProblem keeps the decoder's explanation but never a value: syntax
// errors of encoding/json quote at most one character.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (offset %d)", se.Error(), se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

// ToJSON returns the JSON text of data, a document in YAML (yaml true) or
// JSON, held to lim with extraDepth levels of envelope beyond lim.MaxDepth
// (0 for a document itself): JSON is checked by lim.CheckJSON and returned
// as it is, YAML converted by wire.YAMLToJSON, the one converter (YAML 1.2
// core schema; leading-zero integers, anchors, aliases and merge keys
// refused). Errors are *varplane.Error values: bad-request naming the line
// or byte, limit-exceeded, payload-too-large.
func ToJSON(data []byte, yaml bool, lim varplane.Limits, extraDepth int) (json.RawMessage, error) {
	lim = lim.WithDefaults()
	if !yaml {
		if err := lim.CheckJSON(data, extraDepth); err != nil {
			return nil, err
		}
		return data, nil
	}
	lim.MaxDepth += extraDepth
	return wire.YAMLToJSON(data, lim)
}

// Decode is ToJSON followed by DecodeJSON: no tree is built before the input
// has passed the limits.
func Decode(data []byte, yaml bool, lim varplane.Limits, extraDepth int) (any, error) {
	doc, err := ToJSON(data, yaml, lim, extraDepth)
	if err != nil {
		return nil, err
	}
	return DecodeJSON(doc)
}

// DecodeFile decodes data by the extension of file, .json as JSON and
// anything else as YAML, held to FileLimits.
func DecodeFile(file string, data []byte) (any, error) {
	return Decode(data, !strings.EqualFold(filepath.Ext(file), ".json"), FileLimits, 0)
}

// blankYAML reports whether data holds no YAML document at all: only blank
// lines and comments.
func blankYAML(data []byte) bool {
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

// JSONToYAML renders a JSON document as YAML, numbers as numbers and keys
// sorted, for answers requested in YAML.
func JSONToYAML(data []byte) ([]byte, error) {
	v, err := DecodeJSON(data)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(toYAMLNode(v)); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func toYAMLNode(v any) *yaml.Node {
	switch t := v.(type) {
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range sortedKeys(t) {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, toYAMLNode(t[k]))
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, x := range t {
			n.Content = append(n.Content, toYAMLNode(x))
		}
		return n
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}
