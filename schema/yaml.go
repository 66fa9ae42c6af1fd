package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Bounds on YAML conversion. Decoding into a yaml.Node does not expand
// aliases, so the expansion budget here is what stops an alias bomb.
const (
	maxYAMLNodes = 1 << 20
	maxYAMLDepth = 256
)

// decodeYAML decodes one YAML document into the JSON data model the schema
// compiler expects: map[string]any, []any, string, bool, nil, and numbers as
// json.Number written exactly as the YAML wrote them (no rounding through
// float64). Duplicate keys, merge keys, non-scalar keys, binary values,
// non-finite floats, unknown tags and multi-document streams are errors that
// name the line.
func decodeYAML(data []byte) (any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty YAML file")
		}
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("not valid YAML: %w", err)
		}
		return nil, fmt.Errorf("line %d: more than one YAML document", extra.Line)
	}
	c := &yamlConv{}
	return c.value(&root, 0)
}

type yamlConv struct{ nodes int }

func (c *yamlConv) value(n *yaml.Node, depth int) (any, error) {
	c.nodes++
	if c.nodes > maxYAMLNodes {
		return nil, fmt.Errorf("line %d: more than %d values (alias expansion?)", n.Line, maxYAMLNodes)
	}
	if depth > maxYAMLDepth {
		return nil, fmt.Errorf("line %d: nested deeper than %d levels", n.Line, maxYAMLDepth)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, fmt.Errorf("line %d: empty YAML document", n.Line)
		}
		return c.value(n.Content[0], depth)
	case yaml.AliasNode:
		return c.value(n.Alias, depth+1)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, item := range n.Content {
			v, err := c.value(item, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, vn := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.AliasNode {
				k = k.Alias
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a key must be a scalar", k.Line)
			}
			if k.Tag == "!!merge" {
				return nil, fmt.Errorf("line %d: merge keys (<<) are not supported", k.Line)
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			v, err := c.value(vn, depth+1)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	case yaml.ScalarNode:
		return scalar(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

func scalar(n *yaml.Node) (any, error) {
	switch n.Tag {
	case "!!str", "!!timestamp":
		// A timestamp stays the text it was written as, as JSON would carry it.
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return b, nil
	case "!!int":
		i, ok := new(big.Int).SetString(n.Value, 0)
		if !ok {
			return nil, fmt.Errorf("line %d: invalid integer", n.Line)
		}
		return json.Number(i.String()), nil
	case "!!float":
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			// YAML spellings such as .5e3 or .inf; only finite values map to JSON.
			if err := n.Decode(&f); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: %s has no JSON form", n.Line, n.Value)
		}
		if err == nil && json.Valid([]byte(n.Value)) {
			return json.Number(n.Value), nil // keep the exact digits
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return nil, fmt.Errorf("line %d: unsupported YAML tag %s", n.Line, n.Tag)
}
