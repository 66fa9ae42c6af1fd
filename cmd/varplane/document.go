package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Bounds on documents read by the CLI: the server refuses bodies over its
// limit anyway, these only keep a hostile file from exhausting the client.
const (
	maxDocumentBytes = 64 << 20
	maxYAMLDepth     = 1000
	maxYAMLNodes     = 1 << 20
)

// readDocument reads a document from path ("-" or "" for stdin) and returns
// it as JSON. A .json file must be JSON, a .yaml/.yml file is YAML; anything
// else is JSON when it parses as JSON and YAML otherwise. YAML is converted
// to JSON in document order; it must be one document with string keys only.
func readDocument(path string, stdin io.Reader) (json.RawMessage, error) {
	var (
		data []byte
		err  error
		name = path
	)
	if path == "" || path == "-" {
		name = "stdin"
		data, err = io.ReadAll(io.LimitReader(stdin, maxDocumentBytes+1))
	} else {
		var f *os.File
		f, err = os.Open(path)
		if err == nil {
			data, err = io.ReadAll(io.LimitReader(f, maxDocumentBytes+1))
			f.Close()
		}
	}
	if err != nil {
		return nil, usagef("read document: %v", err)
	}
	if len(data) > maxDocumentBytes {
		return nil, usagef("document %s is larger than %d bytes", name, maxDocumentBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, usagef("document %s is empty (give -f FILE or pipe it on stdin)", name)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		if !json.Valid(data) {
			return nil, usagef("document %s is not valid JSON", name)
		}
		return json.RawMessage(data), nil
	case ".yaml", ".yml":
		return yamlDocument(name, data)
	}
	if json.Valid(data) {
		return json.RawMessage(data), nil
	}
	return yamlDocument(name, data)
}

func yamlDocument(name string, data []byte) (json.RawMessage, error) {
	out, err := yamlToJSON(data)
	if err != nil {
		return nil, usagef("document %s: %v", name, err)
	}
	return out, nil
}

// yamlToJSON converts one YAML document to JSON, keeping mapping order and
// integer precision. It refuses non-string keys, duplicate keys, several
// documents, and values JSON cannot hold (.inf, .nan).
func yamlToJSON(data []byte) (json.RawMessage, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("YAML holds no document")
		}
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("YAML holds more than one document")
	}
	c := &yamlConv{}
	if err := c.value(&root, 0); err != nil {
		return nil, err
	}
	if !json.Valid(c.buf.Bytes()) { // a converter bug must never reach the server
		return nil, errors.New("YAML could not be converted to JSON")
	}
	return json.RawMessage(c.buf.Bytes()), nil
}

type yamlConv struct {
	buf   bytes.Buffer
	nodes int
}

func (c *yamlConv) value(n *yaml.Node, depth int) error {
	c.nodes++
	if c.nodes > maxYAMLNodes {
		return fmt.Errorf("YAML expands to more than %d nodes", maxYAMLNodes)
	}
	if depth > maxYAMLDepth {
		return fmt.Errorf("YAML is nested deeper than %d levels", maxYAMLDepth)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return errors.New("YAML holds no document")
		}
		return c.value(n.Content[0], depth)
	case yaml.AliasNode:
		return c.value(n.Alias, depth+1)
	case yaml.SequenceNode:
		c.buf.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				c.buf.WriteByte(',')
			}
			if err := c.value(item, depth+1); err != nil {
				return err
			}
		}
		c.buf.WriteByte(']')
		return nil
	case yaml.MappingNode:
		return c.mapping(n, depth)
	case yaml.ScalarNode:
		return c.scalar(n)
	}
	return fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

func (c *yamlConv) mapping(n *yaml.Node, depth int) error {
	type member struct {
		key string
		val *yaml.Node
	}
	var members []member
	seen := map[string]bool{}
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return fmt.Errorf("line %d: mapping key is not a string (quote it to use it as a JSON key)", k.Line)
		}
		if seen[k.Value] {
			return fmt.Errorf("line %d: mapping key %q is defined twice", k.Line, k.Value)
		}
		seen[k.Value] = true
		members = append(members, member{k.Value, v})
	}
	// Merge keys ("<<: *base") add the members of the merged mappings that
	// the mapping does not set itself.
	for _, m := range merged {
		srcs := []*yaml.Node{m}
		if resolve(m).Kind == yaml.SequenceNode {
			srcs = resolve(m).Content
		}
		for _, src := range srcs {
			src = resolve(src)
			if src.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: a merge key must name a mapping", src.Line)
			}
			for i := 0; i+1 < len(src.Content); i += 2 {
				k := resolve(src.Content[i])
				if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
					return fmt.Errorf("line %d: mapping key is not a string", k.Line)
				}
				if !seen[k.Value] {
					seen[k.Value] = true
					members = append(members, member{k.Value, src.Content[i+1]})
				}
			}
		}
	}
	c.buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			c.buf.WriteByte(',')
		}
		writeJSONString(&c.buf, m.key)
		c.buf.WriteByte(':')
		if err := c.value(m.val, depth+1); err != nil {
			return err
		}
	}
	c.buf.WriteByte('}')
	return nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func (c *yamlConv) scalar(n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		c.buf.WriteString("null")
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		c.buf.WriteString(strconv.FormatBool(b))
	case "!!int":
		text := strings.ReplaceAll(n.Value, "_", "")
		text = strings.TrimPrefix(text, "+")
		neg := strings.HasPrefix(text, "-")
		digits := strings.TrimPrefix(text, "-")
		if len(digits) > 1 && digits[0] == '0' && digits[1] >= '0' && digits[1] <= '9' {
			digits = "0o" + digits[1:] // YAML 1.1 style octal
		}
		v, ok := new(big.Int).SetString(digits, 0)
		if !ok {
			return fmt.Errorf("line %d: integer %q cannot be read", n.Line, n.Value)
		}
		if neg {
			v.Neg(v)
		}
		c.buf.WriteString(v.String())
	case "!!float":
		if isJSONNumber(n.Value) {
			c.buf.WriteString(n.Value)
			return nil
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("line %d: %s has no JSON form", n.Line, n.Value)
		}
		c.buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	default: // !!str, !!timestamp, !!binary and custom tags keep their text
		writeJSONString(&c.buf, n.Value)
	}
	return nil
}

func isJSONNumber(s string) bool {
	if s == "" || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // marshalling a string cannot fail
	buf.Write(b)
}
