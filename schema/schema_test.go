package schema_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/schema"
)

func mustCompile(t *testing.T, src string) *schema.Schema {
	t.Helper()
	s, err := schema.Compile(json.RawMessage(src))
	if err != nil {
		t.Fatalf("Compile(%s): %v", src, err)
	}
	return s
}

func validate(t *testing.T, s *schema.Schema, doc string) []varplane.Issue {
	t.Helper()
	issues, err := s.Validate(json.RawMessage(doc))
	if err != nil {
		t.Fatalf("Validate(%s): %v", doc, err)
	}
	return issues
}

// lanes resembles a real var document schema.
const lanes = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["enabled", "model_target_ref"],
  "properties": {
    "enabled": {"type": "boolean"},
    "model_target_ref": {"type": "string", "pattern": "^secret\\.[a-z.]+$"},
    "budgets": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "daily": {"type": "integer", "minimum": 0, "maximum": 1000},
        "burst": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10}
      }
    },
    "mode": {"enum": ["fast", "safe"]},
    "version": {"const": 1},
    "owner": {"type": "string", "minLength": 2, "maxLength": 8},
    "contact": {"type": "string", "format": "email"},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "uniqueItems": true},
    "step": {"type": "integer", "multipleOf": 5}
  }
}`

const validLanes = `{"enabled": true, "model_target_ref": "secret.ops.model"}`

func TestIssueCodes(t *testing.T) {
	s := mustCompile(t, lanes)
	tests := []struct {
		name string
		doc  string
		want []varplane.Issue
	}{
		{"valid", validLanes, nil},
		{"valid full", `{"enabled":false,"model_target_ref":"secret.a","budgets":{"daily":1000,"burst":9.5},"mode":"safe","version":1,"owner":"ops","contact":"ops@example.com","tags":["a","b"],"step":10}`, nil},
		{"unknown field", `{"enabled":true,"model_target_ref":"secret.a","budgets2":{}}`,
			[]varplane.Issue{{Code: schema.CodeUnknownField, Path: "/budgets2", Message: "unknown field 'budgets2'"}}},
		{"nested unknown fields sorted", `{"enabled":true,"model_target_ref":"secret.a","budgets":{"z":1,"a/b":2}}`,
			[]varplane.Issue{
				{Code: schema.CodeUnknownField, Path: "/budgets/a~1b", Message: "unknown field 'a/b'"},
				{Code: schema.CodeUnknownField, Path: "/budgets/z", Message: "unknown field 'z'"},
			}},
		{"required", `{}`,
			[]varplane.Issue{
				{Code: schema.CodeRequired, Path: "/enabled", Message: "missing required field 'enabled'"},
				{Code: schema.CodeRequired, Path: "/model_target_ref", Message: "missing required field 'model_target_ref'"},
			}},
		{"type", `{"enabled":"yes","model_target_ref":"secret.a"}`,
			[]varplane.Issue{{Code: schema.CodeType, Path: "/enabled", Message: "field 'enabled' must be boolean, not string"}}},
		{"root type", `[1]`,
			[]varplane.Issue{{Code: schema.CodeType, Path: "", Message: "document must be object, not array"}}},
		{"integer type", `{"enabled":true,"model_target_ref":"secret.a","budgets":{"daily":1.5}}`,
			[]varplane.Issue{{Code: schema.CodeType, Path: "/budgets/daily", Message: "field 'daily' must be integer, not number"}}},
		{"enum", `{"enabled":true,"model_target_ref":"secret.a","mode":"slow"}`,
			[]varplane.Issue{{Code: schema.CodeEnum, Path: "/mode", Message: `field 'mode' must be one of "fast", "safe"`}}},
		{"const", `{"enabled":true,"model_target_ref":"secret.a","version":2}`,
			[]varplane.Issue{{Code: schema.CodeConst, Path: "/version", Message: "field 'version' must equal the value the schema fixes"}}},
		{"minimum", `{"enabled":true,"model_target_ref":"secret.a","budgets":{"daily":-1}}`,
			[]varplane.Issue{{Code: schema.CodeMinimum, Path: "/budgets/daily", Message: "field 'daily' must be at least 0"}}},
		{"maximum", `{"enabled":true,"model_target_ref":"secret.a","budgets":{"daily":1001}}`,
			[]varplane.Issue{{Code: schema.CodeMaximum, Path: "/budgets/daily", Message: "field 'daily' must be at most 1000"}}},
		{"exclusive minimum", `{"enabled":true,"model_target_ref":"secret.a","budgets":{"burst":0}}`,
			[]varplane.Issue{{Code: schema.CodeMinimum, Path: "/budgets/burst", Message: "field 'burst' must be greater than 0"}}},
		{"exclusive maximum", `{"enabled":true,"model_target_ref":"secret.a","budgets":{"burst":10}}`,
			[]varplane.Issue{{Code: schema.CodeMaximum, Path: "/budgets/burst", Message: "field 'burst' must be less than 10"}}},
		{"multiple of", `{"enabled":true,"model_target_ref":"secret.a","step":7}`,
			[]varplane.Issue{{Code: schema.CodeMultipleOf, Path: "/step", Message: "field 'step' must be a multiple of 5"}}},
		{"min length", `{"enabled":true,"model_target_ref":"secret.a","owner":"x"}`,
			[]varplane.Issue{{Code: schema.CodeMinLength, Path: "/owner", Message: "field 'owner' must be at least 2 characters long"}}},
		{"max length", `{"enabled":true,"model_target_ref":"secret.a","owner":"abcdefghi"}`,
			[]varplane.Issue{{Code: schema.CodeMaxLength, Path: "/owner", Message: "field 'owner' must be at most 8 characters long"}}},
		{"pattern", `{"enabled":true,"model_target_ref":"sk-live"}`,
			[]varplane.Issue{{Code: schema.CodePattern, Path: "/model_target_ref", Message: `field 'model_target_ref' must match the pattern "^secret\\.[a-z.]+$"`}}},
		{"format", `{"enabled":true,"model_target_ref":"secret.a","contact":"not an address"}`,
			[]varplane.Issue{{Code: schema.CodeFormat, Path: "/contact", Message: "field 'contact' must be a valid email"}}},
		{"min items", `{"enabled":true,"model_target_ref":"secret.a","tags":[]}`,
			[]varplane.Issue{{Code: schema.CodeMinItems, Path: "/tags", Message: "field 'tags' must have at least 1 items"}}},
		{"max items", `{"enabled":true,"model_target_ref":"secret.a","tags":["a","b","c","d"]}`,
			[]varplane.Issue{{Code: schema.CodeMaxItems, Path: "/tags", Message: "field 'tags' must have at most 3 items"}}},
		{"unique items", `{"enabled":true,"model_target_ref":"secret.a","tags":["a","a"]}`,
			[]varplane.Issue{{Code: schema.CodeUniqueItems, Path: "/tags", Message: "field 'tags' must not repeat items (items 0 and 1 are equal)"}}},
		{"array item type", `{"enabled":true,"model_target_ref":"secret.a","tags":["a",2]}`,
			[]varplane.Issue{{Code: schema.CodeType, Path: "/tags/1", Message: "item 1 of 'tags' must be string, not number"}}},
		{"several kinds sorted by path", `{"model_target_ref":5,"extra":1,"enabled":"x"}`,
			[]varplane.Issue{
				{Code: schema.CodeType, Path: "/enabled", Message: "field 'enabled' must be boolean, not string"},
				{Code: schema.CodeUnknownField, Path: "/extra", Message: "unknown field 'extra'"},
				{Code: schema.CodeType, Path: "/model_target_ref", Message: "field 'model_target_ref' must be string, not number"},
			}},
		{"not JSON", `{"enabled":`,
			[]varplane.Issue{{Code: varplane.IssueSyntax, Path: "", Message: "document is not valid JSON"}}},
		{"trailing data", validLanes + ` {}`,
			[]varplane.Issue{{Code: varplane.IssueSyntax, Path: "", Message: "document is not valid JSON"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := validate(t, s, tt.doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate(%s) =\n  %+v\nwant\n  %+v", tt.doc, got, tt.want)
			}
		})
	}
}

func TestOtherKeywords(t *testing.T) {
	tests := []struct {
		name, schema, doc string
		want              []varplane.Issue
	}{
		{"unevaluatedProperties", `{"properties":{"a":{}},"unevaluatedProperties":false}`, `{"a":1,"b":2}`,
			[]varplane.Issue{{Code: schema.CodeUnknownField, Path: "/b", Message: "unknown field 'b'"}}},
		{"unevaluatedProperties through allOf", `{"allOf":[{"properties":{"a":{}}}],"unevaluatedProperties":false}`, `{"a":1,"zz":2}`,
			[]varplane.Issue{{Code: schema.CodeUnknownField, Path: "/zz", Message: "unknown field 'zz'"}}},
		{"dependentRequired", `{"dependentRequired":{"card":["billing"]}}`, `{"card":"x"}`,
			[]varplane.Issue{{Code: schema.CodeRequired, Path: "/billing", Message: "missing field 'billing', required when 'card' is present"}}},
		{"ref to defs", `{"$defs":{"port":{"type":"integer","maximum":65535}},"properties":{"p":{"$ref":"#/$defs/port"}}}`, `{"p":70000}`,
			[]varplane.Issue{{Code: schema.CodeMaximum, Path: "/p", Message: "field 'p' must be at most 65535"}}},
		{"oneOf none", `{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `true`,
			[]varplane.Issue{
				{Code: schema.CodeType, Path: "", Message: "document must be integer, not boolean"},
				{Code: schema.CodeType, Path: "", Message: "document must be string, not boolean"},
			}},
		{"oneOf both", `{"oneOf":[{"type":"number"},{"type":"integer"}]}`, `3`,
			[]varplane.Issue{{Code: schema.CodeInvalid, Path: "", Message: "document must match exactly one alternative of the schema"}}},
		{"not", `{"properties":{"x":{"not":{"type":"string"}}}}`, `{"x":"s"}`,
			[]varplane.Issue{{Code: schema.CodeInvalid, Path: "/x", Message: "field 'x' must not match the schema it is forbidden to match"}}},
		{"false property", `{"properties":{"legacy":false}}`, `{"legacy":1}`,
			[]varplane.Issue{{Code: schema.CodeUnknownField, Path: "/legacy", Message: "unknown field 'legacy'"}}},
		{"min properties", `{"minProperties":2}`, `{"a":1}`,
			[]varplane.Issue{{Code: schema.CodeMinProperties, Path: "", Message: "document must have at least 2 fields"}}},
		{"max properties", `{"maxProperties":1}`, `{"a":1,"b":2}`,
			[]varplane.Issue{{Code: schema.CodeMaxProperties, Path: "", Message: "document must have at most 1 fields"}}},
		{"property names", `{"propertyNames":{"pattern":"^var\\."}}`, `{"var.a":1,"bad":2}`,
			[]varplane.Issue{{Code: schema.CodePropertyName, Path: "/bad", Message: "field name 'bad' is not allowed by the schema"}}},
		{"contains", `{"contains":{"const":"x"}}`, `["a"]`,
			[]varplane.Issue{{Code: schema.CodeContains, Path: "", Message: "document must contain an item matching the schema"}}},
		{"top-level item", `{"items":{"type":"string"}}`, `["a",1]`,
			[]varplane.Issue{{Code: schema.CodeType, Path: "/1", Message: "item 1 must be string, not number"}}},
		{"key that looks like an index", `{"properties":{"0":{"type":"string"}}}`, `{"0":1}`,
			[]varplane.Issue{{Code: schema.CodeType, Path: "/0", Message: "field '0' must be string, not number"}}},
		{"large enum not listed", `{"enum":[1,2,3,4,5,6,7,8,9]}`, `10`,
			[]varplane.Issue{{Code: schema.CodeEnum, Path: "", Message: "document must be one of the values the schema allows"}}},
		{"false schema", `false`, `{}`,
			[]varplane.Issue{{Code: schema.CodeInvalid, Path: "", Message: "document is not allowed"}}},
		{"tilde key", `{"additionalProperties":false}`, `{"a~b":1}`,
			[]varplane.Issue{{Code: schema.CodeUnknownField, Path: "/a~0b", Message: "unknown field 'a~b'"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.schema)
			if got := validate(t, s, tt.doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate(%s) =\n  %+v\nwant\n  %+v", tt.doc, got, tt.want)
			}
		})
	}
}

// TestMessagesNeverCarryValues checks, for every kind of failure a value can
// cause, that the value itself appears in no issue.
func TestMessagesNeverCarryValues(t *testing.T) {
	const secret = "hunter2"
	tests := []struct{ name, schema, doc string }{
		{"type", `{"properties":{"p":{"type":"integer"}}}`, `{"p":"hunter2"}`},
		{"enum", `{"properties":{"p":{"enum":["a","b"]}}}`, `{"p":"hunter2"}`},
		{"const", `{"properties":{"p":{"const":"a"}}}`, `{"p":"hunter2"}`},
		{"pattern", `{"properties":{"p":{"pattern":"^x"}}}`, `{"p":"hunter2"}`},
		{"format email", `{"properties":{"p":{"format":"email"}}}`, `{"p":"hunter2"}`},
		{"format uri", `{"properties":{"p":{"format":"uri"}}}`, `{"p":"hunter2"}`},
		{"format date-time", `{"properties":{"p":{"format":"date-time"}}}`, `{"p":"hunter2"}`},
		{"format ipv4", `{"properties":{"p":{"format":"ipv4"}}}`, `{"p":"hunter2"}`},
		{"max length", `{"properties":{"p":{"maxLength":3}}}`, `{"p":"hunter2"}`},
		{"min length", `{"properties":{"p":{"minLength":30}}}`, `{"p":"hunter2"}`},
		{"unique items", `{"properties":{"p":{"uniqueItems":true}}}`, `{"p":["hunter2","hunter2"]}`},
		{"not", `{"properties":{"p":{"not":{"type":"string"}}}}`, `{"p":"hunter2"}`},
		{"oneOf", `{"properties":{"p":{"oneOf":[{"type":"string"},{"minLength":1}]}}}`, `{"p":"hunter2"}`},
		{"anyOf", `{"properties":{"p":{"anyOf":[{"type":"integer"},{"const":"x"}]}}}`, `{"p":"hunter2"}`},
		{"contains", `{"properties":{"p":{"contains":{"type":"integer"}}}}`, `{"p":["hunter2"]}`},
		{"false schema", `{"properties":{"p":false}}`, `{"p":"hunter2"}`},
		{"unknown field holding it", `{"additionalProperties":false}`, `{"p":"hunter2"}`},
		{"nested in array", `{"items":{"type":"object","required":["k"]}}`, `["hunter2",{"v":"hunter2"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			issues := validate(t, mustCompile(t, tt.schema), tt.doc)
			if len(issues) == 0 {
				t.Fatalf("Validate(%s): no issues, want some", tt.doc)
			}
			for _, is := range issues {
				if strings.Contains(is.Message, secret) || strings.Contains(is.Path, secret) || strings.Contains(is.Code, secret) {
					t.Errorf("issue %+v carries the rejected value", is)
				}
			}
		})
	}
}

func TestBigIntegersNotRounded(t *testing.T) {
	s := mustCompile(t, `{"properties":{
		"id":{"type":"integer","maximum":9007199254740992},
		"n":{"type":"integer"},
		"odd":{"type":"integer","multipleOf":2}
	}}`)
	tests := []struct {
		name, doc string
		want      []varplane.Issue
	}{
		{"2^53 fits", `{"id":9007199254740992}`, nil},
		// Rounded through float64 this would equal the maximum and pass.
		{"2^53+1 over maximum", `{"id":9007199254740993}`,
			[]varplane.Issue{{Code: schema.CodeMaximum, Path: "/id", Message: "field 'id' must be at most 9007199254740992"}}},
		{"huge integer is an integer", `{"n":123456789012345678901234567890}`, nil},
		// 9007199254740993 is odd; as a double it would be even.
		{"parity exact", `{"odd":9007199254740993}`,
			[]varplane.Issue{{Code: schema.CodeMultipleOf, Path: "/odd", Message: "field 'odd' must be a multiple of 2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := validate(t, s, tt.doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate(%s) = %+v, want %+v", tt.doc, got, tt.want)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name, schema string
		external     bool
	}{
		{"not JSON", `{"type":`, false},
		{"trailing data", `{} {}`, false},
		{"bad keyword value", `{"type":"banana"}`, false},
		{"bad regexp", `{"pattern":"("}`, false},
		{"minLength negative", `{"minLength":-1}`, false},
		{"dangling local ref", `{"$ref":"#/$defs/missing"}`, false},
		{"file ref", `{"$ref":"file:///etc/passwd"}`, true},
		{"http ref", `{"$ref":"http://127.0.0.1:1/schema.json"}`, true},
		{"https ref in property", `{"properties":{"a":{"$ref":"https://127.0.0.1:1/a.json#/x"}}}`, true},
		{"relative ref", `{"$ref":"other.json"}`, true},
		{"relative ref under absolute $id", `{"$id":"http://127.0.0.1:1/root.json","$ref":"other.json"}`, true},
		{"unknown meta-schema", `{"$schema":"http://127.0.0.1:1/meta.json"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schema.Compile(json.RawMessage(tt.schema))
			if err == nil {
				t.Fatalf("Compile(%s) succeeded, want error", tt.schema)
			}
			if got := errors.Is(err, schema.ErrExternalRef); got != tt.external {
				t.Errorf("Compile(%s) = %v; errors.Is(ErrExternalRef) = %v, want %v", tt.schema, err, got, tt.external)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	for _, src := range []string{
		`true`,
		`{}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`,
		`{"$id":"urn:example:lanes","$defs":{"a":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/a"}}}`,
		`{"$id":"http://127.0.0.1:1/root.json","$defs":{"a":{"$id":"a.json","type":"string"}},"properties":{"a":{"$ref":"a.json"}}}`,
	} {
		if _, err := schema.Compile(json.RawMessage(src)); err != nil {
			t.Errorf("Compile(%s): %v", src, err)
		}
	}
}
