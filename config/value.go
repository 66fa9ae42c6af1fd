package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The decoded form of a document used throughout this package: objects are
// map[string]any, arrays []any, numbers json.Number (their text kept, so no
// precision is lost before the canonicaliser looks at them), and strings,
// booleans and nil as themselves.

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
// are refused (they would make the canonical form ambiguous).
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &DecodeError{Message: "unexpected data after the JSON value"}
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, path string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, &DecodeError{Path: path, Message: "not valid JSON: " + jsonProblem(err)}
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, &DecodeError{Path: path, Message: "not valid JSON: " + jsonProblem(err)}
				}
				k, _ := kt.(string)
				child := path + "/" + EscapePointer(k)
				if _, dup := obj[k]; dup {
					return nil, &DecodeError{Path: child, Message: "duplicate key"}
				}
				v, err := decodeJSONValue(dec, child)
				if err != nil {
					return nil, err
				}
				obj[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, &DecodeError{Path: path, Message: "not valid JSON: " + jsonProblem(err)}
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeJSONValue(dec, path+"/"+strconv.Itoa(len(arr)))
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, &DecodeError{Path: path, Message: "not valid JSON: " + jsonProblem(err)}
			}
			return arr, nil
		}
		return nil, &DecodeError{Path: path, Message: "not valid JSON"}
	default:
		return t, nil
	}
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

// DecodeYAML decodes a single YAML document (YAML 1.2 core schema, so "no" is
// a string) into the package's decoded form. It refuses anchors and aliases
// (configuration has no use for them, and they are how documents explode),
// non-string keys, duplicate keys, non-finite numbers and unknown tags, each
// with the line and the JSON Pointer where it happened. An empty document is
// null.
func DecodeYAML(data []byte) (any, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &DecodeError{Message: "not valid YAML: " + err.Error()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &DecodeError{Message: "more than one YAML document"}
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return fromYAML(doc.Content[0], "")
	}
	return fromYAML(&doc, "")
}

func fromYAML(n *yaml.Node, path string) (any, error) {
	fail := func(format string, args ...any) error {
		return &DecodeError{Path: path, Message: fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}
	}
	if n.Anchor != "" || n.Kind == yaml.AliasNode {
		return nil, fail("anchors and aliases are not supported")
	}
	switch n.Kind {
	case yaml.MappingNode:
		obj := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			if kn.Kind != yaml.ScalarNode || (kn.ShortTag() != "!!str" && kn.ShortTag() != "!!int" && kn.ShortTag() != "!!float" && kn.ShortTag() != "!!bool") {
				if kn.ShortTag() == "!!merge" {
					return nil, fail("merge keys are not supported")
				}
				return nil, fail("keys must be strings")
			}
			k := kn.Value
			child := path + "/" + EscapePointer(k)
			if _, dup := obj[k]; dup {
				return nil, &DecodeError{Path: child, Message: fmt.Sprintf("line %d: duplicate key", kn.Line)}
			}
			v, err := fromYAML(vn, child)
			if err != nil {
				return nil, err
			}
			obj[k] = v
		}
		return obj, nil
	case yaml.SequenceNode:
		arr := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			v, err := fromYAML(c, path+"/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		return arr, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, nil
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fail("not a boolean")
			}
			return b, nil
		case "!!int":
			if isJSONNumber(n.Value) {
				return json.Number(n.Value), nil
			}
			var i int64
			if err := n.Decode(&i); err == nil {
				return json.Number(strconv.FormatInt(i, 10)), nil
			}
			var u uint64
			if err := n.Decode(&u); err == nil {
				return json.Number(strconv.FormatUint(u, 10)), nil
			}
			return nil, fail("integer out of range")
		case "!!float":
			if isJSONNumber(n.Value) {
				return json.Number(n.Value), nil
			}
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, fail("not a number")
			}
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fail("infinite and NaN numbers have no JSON form")
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
		default:
			return nil, fail("unsupported tag %s", n.ShortTag())
		}
	}
	return nil, fail("unsupported YAML node")
}

func isJSONNumber(s string) bool {
	if s == "" {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil && !strings.ContainsAny(s, " \t\n")
}

// DecodeFile decodes data by the extension of file: .json as JSON, anything
// else as YAML.
func DecodeFile(file string, data []byte) (any, error) {
	if strings.EqualFold(filepath.Ext(file), ".json") {
		return DecodeJSON(data)
	}
	return DecodeYAML(data)
}

// MarshalJSON encodes a decoded value compactly without HTML escaping, so the
// text stays as authored ("<" remains "<").
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// EscapePointer escapes one JSON Pointer token (RFC 6901).
func EscapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
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
