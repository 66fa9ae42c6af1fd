package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/jsontext"
)

// YAMLToJSON converts one YAML document to JSON text, keeping mapping order
// and the digits of numbers. It is the one converter every entrance, file
// reader and client uses, with one policy (docs/patterns.md):
//
//   - scalars resolve by the YAML 1.2 core schema, never YAML 1.1: yes/no/on/off
//     are strings, 0o17 and 0x1f are integers, and a plain integer with a
//     leading zero (010, 0644) is refused, since YAML 1.1 tools read it as
//     octal and 1.2 tools as decimal — write it without the zero, as 0o644,
//     or quoted;
//   - anchors, aliases and merge keys (<<) are refused: configuration has no
//     use for them, and they are how documents explode;
//   - keys are scalars and become their text; duplicate keys are refused;
//   - .inf and .nan (no JSON form), tags other than the core ones, and
//     several documents are refused;
//   - the result is held to lim as a document is.
//
// Errors are bad-request (limit-exceeded for a limit, payload-too-large for
// the size) *varplane.Error values naming the line, never a value.
func YAMLToJSON(data []byte, lim varplane.Limits) (json.RawMessage, error) {
	lim = lim.WithDefaults()
	if int64(len(data)) > lim.MaxBodyBytes {
		return nil, varplane.Errorf(varplane.CodePayloadTooLarge, "the YAML is larger than %d bytes", lim.MaxBodyBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, BadRequest("the YAML holds no document")
		}
		return nil, BadRequest("not valid YAML: %s", yamlProblem(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, BadRequest("the YAML holds more than one document")
	}
	c := yamlConv{lim: lim}
	n := &root
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) != 1 {
			return nil, BadRequest("the YAML holds no document")
		}
		n = n.Content[0]
	}
	if err := c.value(n, 0); err != nil {
		return nil, err
	}
	if err := lim.CheckJSON(c.buf, 0); err != nil {
		return nil, err // a converter slip must never reach a store
	}
	return json.RawMessage(c.buf), nil
}

// yamlProblem keeps the parser's explanation (it names a line and quotes no
// more than a token) but drops its package prefix.
func yamlProblem(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

type yamlConv struct {
	lim varplane.Limits
	buf []byte
}

func lineErr(n *yaml.Node, format string, args ...any) *varplane.Error {
	return BadRequest("line %d: %s", n.Line, fmt.Sprintf(format, args...))
}

func (c *yamlConv) value(n *yaml.Node, depth int) error {
	if n.Anchor != "" || n.Kind == yaml.AliasNode {
		return lineErr(n, "anchors and aliases are not supported")
	}
	switch n.Kind {
	case yaml.MappingNode, yaml.SequenceNode:
		if depth >= c.lim.MaxDepth {
			return &varplane.Error{Code: varplane.CodeLimitExceeded, Limit: "nesting deeper than the depth limit",
				Message: fmt.Sprintf("line %d: nesting deeper than the depth limit (%d)", n.Line, c.lim.MaxDepth)}
		}
		members := len(n.Content)
		if n.Kind == yaml.MappingNode {
			members /= 2
		}
		if members > c.lim.MaxMembers {
			return &varplane.Error{Code: varplane.CodeLimitExceeded, Limit: "more members than the member limit",
				Message: fmt.Sprintf("line %d: more members than the member limit (%d)", n.Line, c.lim.MaxMembers)}
		}
		if err := c.explicitTag(n); err != nil {
			return err
		}
	}
	switch n.Kind {
	case yaml.MappingNode:
		c.buf = append(c.buf, '{')
		seen := make(map[string]struct{}, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key, err := c.key(k)
			if err != nil {
				return err
			}
			if _, dup := seen[key]; dup {
				return lineErr(k, "duplicate key")
			}
			seen[key] = struct{}{}
			if i > 0 {
				c.buf = append(c.buf, ',')
			}
			c.buf = jsontext.AppendString(c.buf, key)
			c.buf = append(c.buf, ':')
			if err := c.value(v, depth+1); err != nil {
				return err
			}
		}
		c.buf = append(c.buf, '}')
		return nil
	case yaml.SequenceNode:
		c.buf = append(c.buf, '[')
		for i, item := range n.Content {
			if i > 0 {
				c.buf = append(c.buf, ',')
			}
			if err := c.value(item, depth+1); err != nil {
				return err
			}
		}
		c.buf = append(c.buf, ']')
		return nil
	case yaml.ScalarNode:
		return c.scalar(n)
	}
	return lineErr(n, "unsupported YAML node")
}

// explicitTag refuses a tag written on a collection other than its own.
func (c *yamlConv) explicitTag(n *yaml.Node) error {
	if n.Style&yaml.TaggedStyle == 0 {
		return nil
	}
	want := "!!map"
	if n.Kind == yaml.SequenceNode {
		want = "!!seq"
	}
	if n.ShortTag() != want {
		return lineErr(n, "unsupported tag %s", safeTag(n.Tag))
	}
	return nil
}

// safeTag shows a tag back only when it is short and plain.
func safeTag(tag string) string {
	if len(tag) > 32 || strings.ContainsAny(tag, "\"'\\\n") {
		return "(tag)"
	}
	return tag
}

func (c *yamlConv) key(k *yaml.Node) (string, error) {
	if k.Anchor != "" || k.Kind == yaml.AliasNode {
		return "", lineErr(k, "anchors and aliases are not supported")
	}
	if k.Kind != yaml.ScalarNode {
		return "", lineErr(k, "a key must be a scalar")
	}
	if k.ShortTag() == "!!merge" {
		return "", lineErr(k, "merge keys (<<) are not supported")
	}
	if k.Style&(yaml.TaggedStyle) != 0 && k.ShortTag() != "!!str" {
		return "", lineErr(k, "a key must be a string")
	}
	if k.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 && coreNull.MatchString(k.Value) {
		return "", lineErr(k, "a key must not be null")
	}
	if len(k.Value) > c.lim.MaxStringBytes {
		return "", c.longString(k)
	}
	return k.Value, nil
}

func (c *yamlConv) longString(n *yaml.Node) error {
	return &varplane.Error{Code: varplane.CodeLimitExceeded, Limit: "a string longer than the string limit",
		Message: fmt.Sprintf("line %d: a string longer than the string limit (%d)", n.Line, c.lim.MaxStringBytes)}
}

// The plain scalars of the YAML 1.2 core schema (section 10.3.2).
var (
	coreNull     = regexp.MustCompile(`^(?:null|Null|NULL|~|)$`)
	coreTrue     = regexp.MustCompile(`^(?:true|True|TRUE)$`)
	coreFalse    = regexp.MustCompile(`^(?:false|False|FALSE)$`)
	coreDecimal  = regexp.MustCompile(`^[-+]?[0-9]+$`)
	coreOctal    = regexp.MustCompile(`^0o[0-7]+$`)
	coreHex      = regexp.MustCompile(`^0x[0-9a-fA-F]+$`)
	coreFloat    = regexp.MustCompile(`^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$`)
	coreInfinity = regexp.MustCompile(`^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
)

func (c *yamlConv) scalar(n *yaml.Node) error {
	quoted := n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
	tag := ""
	if n.Style&yaml.TaggedStyle != 0 {
		tag = n.ShortTag()
		switch tag {
		case "!!str", "!!int", "!!float", "!!bool", "!!null":
		default:
			return lineErr(n, "unsupported tag %s", safeTag(n.Tag))
		}
	}
	if len(n.Value) > c.lim.MaxStringBytes {
		return c.longString(n)
	}
	v := n.Value
	if tag == "!!str" || (quoted && tag == "") {
		c.buf = jsontext.AppendString(c.buf, v)
		return nil
	}
	switch {
	case coreNull.MatchString(v) && (tag == "" || tag == "!!null"):
		c.buf = append(c.buf, "null"...)
		return nil
	case coreTrue.MatchString(v) && (tag == "" || tag == "!!bool"):
		c.buf = append(c.buf, "true"...)
		return nil
	case coreFalse.MatchString(v) && (tag == "" || tag == "!!bool"):
		c.buf = append(c.buf, "false"...)
		return nil
	case (coreDecimal.MatchString(v) || coreOctal.MatchString(v) || coreHex.MatchString(v)) && (tag == "" || tag == "!!int" || tag == "!!float"):
		return c.integer(n, v)
	case coreFloat.MatchString(v) && (tag == "" || tag == "!!float"):
		c.buf = append(c.buf, jsonFloat(v)...)
		return nil
	case coreInfinity.MatchString(v) && (tag == "" || tag == "!!float"):
		return lineErr(n, "infinite and NaN numbers have no JSON form")
	case tag != "":
		return lineErr(n, "the value is not of its tag %s", tag)
	}
	c.buf = jsontext.AppendString(c.buf, v)
	return nil
}

func (c *yamlConv) integer(n *yaml.Node, v string) error {
	digits := strings.TrimLeft(v, "+-")
	switch {
	case strings.HasPrefix(v, "0o"), strings.HasPrefix(v, "0x"):
		i, ok := new(big.Int).SetString(v[2:], map[byte]int{'o': 8, 'x': 16}[v[1]])
		if !ok {
			return lineErr(n, "invalid integer")
		}
		c.buf = i.Append(c.buf, 10)
		return nil
	case len(digits) > 1 && digits[0] == '0':
		return lineErr(n, "an integer with a leading zero is ambiguous (octal in YAML 1.1, decimal in 1.2): write it without the zero, as 0o… for octal, or quote it")
	}
	c.buf = append(c.buf, strings.TrimPrefix(v, "+")...)
	return nil
}

// jsonFloat writes a core-schema float as a JSON number with the same
// digits: no leading '+', a zero before a leading point, a zero after a
// trailing one, no leading zeros.
func jsonFloat(v string) string {
	neg := strings.HasPrefix(v, "-")
	v = strings.TrimLeft(v, "+-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(v), "e")
	intPart, frac, hasFrac := strings.Cut(mant, ".")
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(intPart)
	if hasFrac {
		if frac == "" {
			frac = "0"
		}
		b.WriteByte('.')
		b.WriteString(frac)
	}
	if hasExp {
		b.WriteByte('e')
		b.WriteString(exp)
	}
	return b.String()
}
