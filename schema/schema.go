package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
)

// The stable issue codes of schema validation. They are part of the API:
// clients branch on them, and rejected events record them.
const (
	CodeUnknownField  = "document.unknown-field"  // additionalProperties / unevaluatedProperties false, or a property schema of false
	CodeType          = "document.type"           // type
	CodeRequired      = "document.required"       // required, dependentRequired
	CodeEnum          = "document.enum"           // enum
	CodeConst         = "document.const"          // const
	CodeMinimum       = "document.minimum"        // minimum, exclusiveMinimum
	CodeMaximum       = "document.maximum"        // maximum, exclusiveMaximum
	CodeMultipleOf    = "document.multiple-of"    // multipleOf
	CodeMinLength     = "document.min-length"     // minLength
	CodeMaxLength     = "document.max-length"     // maxLength
	CodePattern       = "document.pattern"        // pattern
	CodeFormat        = "document.format"         // format
	CodeMinItems      = "document.min-items"      // minItems
	CodeMaxItems      = "document.max-items"      // maxItems
	CodeUniqueItems   = "document.unique-items"   // uniqueItems
	CodeContains      = "document.contains"       // contains, minContains, maxContains
	CodeMinProperties = "document.min-properties" // minProperties
	CodeMaxProperties = "document.max-properties" // maxProperties
	CodePropertyName  = "document.property-name"  // propertyNames
	CodeInvalid       = "document.invalid"        // anything else (not, oneOf, false schemas, …)
)

// maxEnumListed bounds how many allowed values an enum issue lists.
const maxEnumListed = 8

// Schema is one compiled JSON Schema. It is immutable and safe for concurrent
// use.
type Schema struct {
	s *jsonschema.Schema
}

// resourceURL is where a compiled schema nominally lives. It is
// hierarchical (an opaque urn: base would resolve "other.json" to the schema
// itself), so a relative reference becomes a URL that refuseLoader refuses.
const resourceURL = "varplane:///schema.json"

// ErrExternalRef is wrapped by Compile's error when a schema needs a resource
// from outside itself.
var ErrExternalRef = errors.New("schema: external references are not allowed")

// refuseLoader is the only URL loader: schemas must be self-contained, so no
// "$ref" may reach the file system or the network. It remembers what it
// refused because the library's load error does not unwrap.
type refuseLoader struct{ refused []string }

func (l *refuseLoader) Load(url string) (any, error) {
	// A relative reference resolved against our nominal base is shown as written.
	l.refused = append(l.refused, strings.TrimPrefix(url, "varplane:///"))
	return nil, ErrExternalRef
}

type externalRefError struct{ urls []string }

func (e *externalRefError) Error() string {
	return "external references are not allowed: " + strings.Join(e.urls, ", ")
}

func (e *externalRefError) Unwrap() error { return ErrExternalRef }

// Compile compiles the JSON Schema in schema (draft 2020-12 unless its
// "$schema" names another standard draft). It fails, with the library's
// explanation, on invalid JSON, a schema that does not conform to its
// meta-schema, and any reference to a resource outside the schema
// (errors.Is(err, ErrExternalRef)).
func Compile(schema json.RawMessage) (*Schema, error) {
	s, err := compileJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return s, nil
}

func compileJSON(schema json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	return compileValue(doc)
}

// compileValue compiles a schema already decoded the way the library expects
// (objects as map[string]any, numbers as json.Number).
func compileValue(doc any) (*Schema, error) {
	c := jsonschema.NewCompiler()
	loader := &refuseLoader{}
	c.UseLoader(loader)
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(resourceURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(resourceURL)
	if err != nil {
		if len(loader.refused) > 0 {
			return nil, &externalRefError{urls: loader.refused}
		}
		var sv *jsonschema.SchemaValidationError
		if errors.As(err, &sv) {
			// The library names our internal resource URL; say what it means.
			return nil, fmt.Errorf("does not conform to its meta-schema: %v", sv.Err)
		}
		return nil, err
	}
	return &Schema{s: s}, nil
}

// Validate checks the JSON document doc against s and returns its issues,
// sorted by path, then code, then message; nil when doc is valid. A doc
// that is not exactly one JSON value gives a single varplane.IssueSyntax
// issue. Numbers are decoded exactly (an integer beyond 2^53 is still an
// integer). The error is reserved for failures of the validator itself.
func (s *Schema) Validate(doc json.RawMessage) ([]varplane.Issue, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return syntaxIssue(), nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return syntaxIssue(), nil
	}
	err := s.s.Validate(v)
	if err == nil {
		return nil, nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return nil, fmt.Errorf("schema: validate: %w", err)
	}
	var issues []varplane.Issue
	collect(verr, v, &issues)
	return sortIssues(issues), nil
}

func syntaxIssue() []varplane.Issue {
	return []varplane.Issue{{Code: varplane.IssueSyntax, Path: "", Message: "document is not valid JSON"}}
}

func sortIssues(issues []varplane.Issue) []varplane.Issue {
	sort.Slice(issues, func(i, j int) bool {
		a, b := issues[i], issues[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Code != b.Code {
			return a.Code < b.Code
		}
		return a.Message < b.Message
	})
	// The alternatives of anyOf/oneOf can report the same leaf twice.
	out := issues[:0]
	for i, is := range issues {
		if i > 0 && is == issues[i-1] {
			continue
		}
		out = append(out, is)
	}
	return out
}

// collect appends the issues of the leaves of the error tree e. Inner nodes
// (allOf, anyOf, $ref, the root, …) only group their causes.
func collect(e *jsonschema.ValidationError, doc any, out *[]varplane.Issue) {
	switch e.ErrorKind.(type) {
	case *kind.PropertyNames, *kind.Contains, *kind.MinContains, *kind.MaxContains:
		// Their causes describe a key, or items that merely failed to match;
		// the keyword itself is the finding.
		*out = append(*out, leafIssues(e, doc)...)
		return
	}
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			collect(c, doc, out)
		}
		return
	}
	*out = append(*out, leafIssues(e, doc)...)
}

// leafIssues maps one leaf error. Only the schema side of each kind (Want,
// Missing, property names) is used: the Got fields carry document values.
func leafIssues(e *jsonschema.ValidationError, doc any) []varplane.Issue {
	loc := e.InstanceLocation
	here := pointer(loc)
	subject := describe(doc, loc)
	one := func(code, msg string) []varplane.Issue {
		return []varplane.Issue{{Code: code, Path: here, Message: msg}}
	}
	perField := func(code string, fields []string, format string) []varplane.Issue {
		sorted := append([]string(nil), fields...)
		sort.Strings(sorted)
		issues := make([]varplane.Issue, 0, len(sorted))
		for _, f := range sorted {
			issues = append(issues, varplane.Issue{
				Code:    code,
				Path:    here + "/" + canonical.EscapeToken(f),
				Message: fmt.Sprintf(format, f),
			})
		}
		return issues
	}
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		return perField(CodeUnknownField, k.Properties, "unknown field '%s'")
	case *kind.Required:
		return perField(CodeRequired, k.Missing, "missing required field '%s'")
	case *kind.DependentRequired:
		return perField(CodeRequired, k.Missing, "missing field '%s', required when '"+k.Prop+"' is present")
	case *kind.Dependency:
		return perField(CodeRequired, k.Missing, "missing field '%s', required when '"+k.Prop+"' is present")
	case *kind.FalseSchema:
		if len(loc) > 0 && isObjectMember(doc, loc) {
			return one(CodeUnknownField, "unknown field '"+loc[len(loc)-1]+"'")
		}
		return one(CodeInvalid, subject+" is not allowed")
	case *kind.Type:
		return one(CodeType, fmt.Sprintf("%s must be %s, not %s", subject, strings.Join(k.Want, " or "), k.Got))
	case *kind.Enum:
		return one(CodeEnum, subject+" must be "+enumText(k.Want))
	case *kind.Const:
		return one(CodeConst, subject+" must equal the value the schema fixes")
	case *kind.Minimum:
		return one(CodeMinimum, subject+" must be at least "+ratText(k.Want))
	case *kind.ExclusiveMinimum:
		return one(CodeMinimum, subject+" must be greater than "+ratText(k.Want))
	case *kind.Maximum:
		return one(CodeMaximum, subject+" must be at most "+ratText(k.Want))
	case *kind.ExclusiveMaximum:
		return one(CodeMaximum, subject+" must be less than "+ratText(k.Want))
	case *kind.MultipleOf:
		return one(CodeMultipleOf, subject+" must be a multiple of "+ratText(k.Want))
	case *kind.MinLength:
		return one(CodeMinLength, fmt.Sprintf("%s must be at least %d characters long", subject, k.Want))
	case *kind.MaxLength:
		return one(CodeMaxLength, fmt.Sprintf("%s must be at most %d characters long", subject, k.Want))
	case *kind.Pattern:
		return one(CodePattern, fmt.Sprintf("%s must match the pattern %q", subject, k.Want))
	case *kind.Format:
		// k.Err may quote the value, so it is not used.
		return one(CodeFormat, fmt.Sprintf("%s must be a valid %s", subject, k.Want))
	case *kind.MinItems:
		return one(CodeMinItems, fmt.Sprintf("%s must have at least %d items", subject, k.Want))
	case *kind.MaxItems:
		return one(CodeMaxItems, fmt.Sprintf("%s must have at most %d items", subject, k.Want))
	case *kind.UniqueItems:
		return one(CodeUniqueItems, fmt.Sprintf("%s must not repeat items (items %d and %d are equal)", subject, k.Duplicates[0], k.Duplicates[1]))
	case *kind.Contains:
		return one(CodeContains, subject+" must contain an item matching the schema")
	case *kind.MinContains:
		return one(CodeContains, fmt.Sprintf("%s must contain at least %d matching items", subject, k.Want))
	case *kind.MaxContains:
		return one(CodeContains, fmt.Sprintf("%s must contain at most %d matching items", subject, k.Want))
	case *kind.MinProperties:
		return one(CodeMinProperties, fmt.Sprintf("%s must have at least %d fields", subject, k.Want))
	case *kind.MaxProperties:
		return one(CodeMaxProperties, fmt.Sprintf("%s must have at most %d fields", subject, k.Want))
	case *kind.PropertyNames:
		return []varplane.Issue{{Code: CodePropertyName, Path: here + "/" + canonical.EscapeToken(k.Property),
			Message: "field name '" + k.Property + "' is not allowed by the schema"}}
	case *kind.OneOf:
		return one(CodeInvalid, subject+" must match exactly one alternative of the schema")
	case *kind.Not:
		return one(CodeInvalid, subject+" must not match the schema it is forbidden to match")
	}
	return one(CodeInvalid, subject+" does not match the schema")
}

// pointer renders an instance location as a JSON Pointer (RFC 6901).
func pointer(loc []string) string {
	var b strings.Builder
	for _, t := range loc {
		b.WriteByte('/')
		b.WriteString(canonical.EscapeToken(t))
	}
	return b.String()
}

// describe names the value at loc for a message: "document", "field 'x'" or
// "item 3 of 'x'". It looks at the document only to tell object members from
// array items.
func describe(doc any, loc []string) string {
	if len(loc) == 0 {
		return "document"
	}
	last := loc[len(loc)-1]
	if isObjectMember(doc, loc) {
		return "field '" + last + "'"
	}
	if len(loc) == 1 {
		return "item " + last
	}
	return "item " + last + " of '" + loc[len(loc)-2] + "'"
}

// isObjectMember reports whether the parent of loc (non-empty) in doc is an
// object.
func isObjectMember(doc any, loc []string) bool {
	v := doc
	for _, t := range loc[:len(loc)-1] {
		switch c := v.(type) {
		case map[string]any:
			v = c[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return false
			}
			v = c[i]
		default:
			return false
		}
	}
	_, ok := v.(map[string]any)
	return ok
}

func enumText(want []any) string {
	if len(want) == 0 || len(want) > maxEnumListed {
		return "one of the values the schema allows"
	}
	parts := make([]string, 0, len(want))
	for _, w := range want {
		b, err := json.Marshal(w)
		if err != nil {
			return "one of the values the schema allows"
		}
		parts = append(parts, string(b))
	}
	return "one of " + strings.Join(parts, ", ")
}

func ratText(r *big.Rat) string {
	if r == nil {
		return "the schema's bound"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}
