package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/varplane/varplane"
)

// DefaultMaxBodyBytes bounds request bodies when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 1 << 20

func badRequest(format string, args ...any) *varplane.Error {
	return varplane.Errorf(varplane.CodeBadRequest, format, args...)
}

func tooLarge(limit int64) *varplane.Error {
	return varplane.Errorf(varplane.CodePayloadTooLarge, "request body is larger than %d bytes", limit)
}

// readBody reads the whole body of r, bounded by limit. A declared
// Content-Length over the limit is refused before anything is read.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, badRequest("request body is required")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, badRequest("request body could not be read")
	}
	return body, nil
}

// decodeStrict decodes one JSON object from body into dst (a pointer to a
// struct of the request shape). It refuses non-UTF-8 bodies, unknown fields
// (matched exactly: encoding/json alone would accept "expectedgeneration"),
// duplicate fields, wrongly typed fields, invalid JSON, nesting beyond
// encoding/json's depth limit and trailing data, always as bad-request naming
// the field (never its value).
func decodeStrict(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("request body is required")
	}
	if !utf8.Valid(body) {
		return badRequest("request body is not valid UTF-8")
	}
	// The common case, a valid body, takes one Unmarshal (which checks the
	// grammar before it stores anything) and a scan of the top-level keys.
	// Invalid JSON goes the token-by-token way, which knows where and how
	// the body is wrong. Both ways give the same answers
	// (FuzzDecodeStrictFastPath): a field error before a type error.
	err := json.Unmarshal(body, dst)
	if syn := (*json.SyntaxError)(nil); errors.As(err, &syn) {
		return decodeStrictTokens(body, dst)
	}
	if kerr := checkTopKeys(body, jsonFields(dst)); kerr != nil {
		return kerr
	}
	if err != nil {
		return decodeError(err)
	}
	return nil
}

// decodeStrictTokens is decodeStrict for any body, with a json.Decoder:
// slower, and the way that reports where invalid JSON breaks.
func decodeStrictTokens(body []byte, dst any) error {
	if err := checkFields(body, jsonFields(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("request body has data after the JSON object")
	}
	return nil
}

// checkTopKeys is checkFields for a body known to be valid JSON: it walks
// the top-level object's keys without decoding the values.
func checkTopKeys(body []byte, fields map[string]bool) error {
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return badRequest("request body must be a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		end := skipString(body, i)
		raw := body[i:end]
		name := string(raw[1 : len(raw)-1])
		if bytes.IndexByte(raw, '\\') >= 0 {
			if err := json.Unmarshal(raw, &name); err != nil {
				return badRequest("request body is not a valid request")
			}
		}
		if err := checkField(name, fields, seen); err != nil {
			return err
		}
		i = skipSpace(body, end) // at ':'
		i = skipSpace(body, i+1) // at the value
		i = skipSpace(body, skipValue(body, i))
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	return nil
}

// checkField refuses a top-level key that is not exactly one of fields, or
// that seen already holds, and records it in seen.
func checkField(name string, fields, seen map[string]bool) error {
	if !fields[name] {
		if safeName(name) {
			return badRequest("unknown field %s", name)
		}
		return badRequest("request body has an unknown field")
	}
	if seen[name] {
		return badRequest("field %s is given more than once", name)
	}
	seen[name] = true
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the index just past the value that starts at b[i], in
// valid JSON.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

// checkFields walks the top-level object of body and refuses a key that is
// not exactly one of fields, or that appears twice.
func checkFields(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return decodeError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return badRequest("request body must be a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return decodeError(err)
		}
		name, _ := tok.(string)
		if err := checkField(name, fields, seen); err != nil {
			return err
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return decodeError(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil || errors.As(err, new(*json.SyntaxError)) {
			return badRequest("request body has data after the JSON object")
		}
		return decodeError(err)
	}
	return nil
}

var fieldSets sync.Map // reflect.Type -> map[string]bool

// jsonFields returns the JSON names of the struct dst points to.
func jsonFields(dst any) map[string]bool {
	t := reflect.TypeOf(dst).Elem()
	if f, ok := fieldSets.Load(t); ok {
		return f.(map[string]bool)
	}
	f := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			f[name] = true
		}
	}
	fieldSets.Store(t, f)
	return f
}

func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("request body is not valid JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("request body must be a JSON object")
		}
		return badRequest("field %s must be %s", typ.Field, jsonKind(typ.Type.Kind().String()))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return badRequest("request body is truncated JSON")
	}
	const prefix = "json: unknown field "
	if msg := err.Error(); strings.HasPrefix(msg, prefix) {
		name, uerr := strconv.Unquote(strings.TrimPrefix(msg, prefix))
		if uerr == nil && safeName(name) {
			return badRequest("unknown field %s", name)
		}
		return badRequest("request body has an unknown field")
	}
	return badRequest("request body is not a valid request")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "bool":
		return "a boolean"
	}
	return "of another type"
}

// safeName reports whether an unknown field name may be shown back: short and
// made of identifier characters only, so that an error never carries
// arbitrary client text.
func safeName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// parseGeneration reads a generation given as raw JSON: a non-negative
// integer literal, at most the largest uint64. Negative, fractional and
// exponent forms, strings and other types are refused naming the field.
func parseGeneration(field string, raw json.RawMessage) (varplane.Generation, error) {
	s := string(bytes.TrimSpace(raw))
	return parseGenerationText(field, s)
}

func parseGenerationText(field, s string) (varplane.Generation, error) {
	if s == "" {
		return 0, badRequest("%s is required", field)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, badRequest("%s must be a non-negative integer", field)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, badRequest("%s must be a non-negative integer without leading zeros", field)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, badRequest("%s is larger than the largest generation", field)
	}
	return varplane.Generation(n), nil
}

// isNull reports whether a raw field is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

func requiredScope(field string, s *string) (varplane.Scope, error) {
	if s == nil {
		return "", badRequest("%s is required", field)
	}
	return parseScopeField(field, *s)
}

func parseScopeField(field, s string) (varplane.Scope, error) {
	sc, err := varplane.ParseScope(s)
	if err != nil {
		return "", badRequest("%s: %s", field, varplane.ErrorMessage(err))
	}
	return sc, nil
}

func optional(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// The request bodies. Pointer and raw fields tell a missing field from a
// zero one; json.RawMessage generations let parseGeneration refuse what
// encoding/json would coerce.

type createBody struct {
	Scope          *string         `json:"scope"`
	Document       json.RawMessage `json:"document"`
	SchemaID       *string         `json:"schemaId"`
	SchemaVersion  *string         `json:"schemaVersion"`
	Actor          *string         `json:"actor"`
	Reason         *string         `json:"reason"`
	IdempotencyKey *string         `json:"idempotencyKey"`
}

type validateBody struct {
	Document json.RawMessage `json:"document"`
	SchemaID *string         `json:"schemaId"`
	Scope    *string         `json:"scope"`
}

type activateBody struct {
	Scope              *string         `json:"scope"`
	Revision           *string         `json:"revision"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	Actor              *string         `json:"actor"`
	Reason             *string         `json:"reason"`
	IdempotencyKey     *string         `json:"idempotencyKey"`
}

type deactivateBody struct {
	Scope              *string         `json:"scope"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	Actor              *string         `json:"actor"`
	Reason             *string         `json:"reason"`
	IdempotencyKey     *string         `json:"idempotencyKey"`
}

type rollbackBody struct {
	Scope              *string         `json:"scope"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	ToRevision         *string         `json:"toRevision"`
	ToGeneration       json.RawMessage `json:"toGeneration"`
	Actor              *string         `json:"actor"`
	Reason             *string         `json:"reason"`
	IdempotencyKey     *string         `json:"idempotencyKey"`
}

func requireDocument(doc json.RawMessage) error {
	if isNull(doc) {
		return badRequest("document is required")
	}
	return nil
}

// DecodeCreateRevision decodes and checks a POST {base}/admin/revisions body.
// Errors are bad-request *varplane.Error values naming the field.
func DecodeCreateRevision(body []byte) (varplane.CreateRevisionRequest, error) {
	var b createBody
	if err := decodeStrict(body, &b); err != nil {
		return varplane.CreateRevisionRequest{}, err
	}
	scope, err := requiredScope("scope", b.Scope)
	if err != nil {
		return varplane.CreateRevisionRequest{}, err
	}
	if err := requireDocument(b.Document); err != nil {
		return varplane.CreateRevisionRequest{}, err
	}
	return varplane.CreateRevisionRequest{
		Scope: scope, Document: b.Document, SchemaID: optional(b.SchemaID),
		SchemaVersion: optional(b.SchemaVersion), Actor: optional(b.Actor),
		Reason: optional(b.Reason), IdempotencyKey: optional(b.IdempotencyKey),
	}, nil
}

// DecodeValidate decodes and checks a POST {base}/admin/validate body; scope
// is optional there. Errors as DecodeCreateRevision.
func DecodeValidate(body []byte) (varplane.ValidateRequest, error) {
	var b validateBody
	if err := decodeStrict(body, &b); err != nil {
		return varplane.ValidateRequest{}, err
	}
	if err := requireDocument(b.Document); err != nil {
		return varplane.ValidateRequest{}, err
	}
	req := varplane.ValidateRequest{Document: b.Document, SchemaID: optional(b.SchemaID)}
	if b.Scope != nil {
		scope, err := parseScopeField("scope", *b.Scope)
		if err != nil {
			return varplane.ValidateRequest{}, err
		}
		req.Scope = scope
	}
	return req, nil
}

// DecodeActivate decodes and checks a POST {base}/admin/activate body.
// Errors as DecodeCreateRevision.
func DecodeActivate(body []byte) (varplane.ActivateRequest, error) {
	var b activateBody
	if err := decodeStrict(body, &b); err != nil {
		return varplane.ActivateRequest{}, err
	}
	scope, err := requiredScope("scope", b.Scope)
	if err != nil {
		return varplane.ActivateRequest{}, err
	}
	if b.Revision == nil {
		return varplane.ActivateRequest{}, badRequest("revision is required")
	}
	rev, err := varplane.ParseRevision(*b.Revision)
	if err != nil {
		return varplane.ActivateRequest{}, badRequest("revision: %s", varplane.ErrorMessage(err))
	}
	gen, err := requiredGeneration("expectedGeneration", b.ExpectedGeneration)
	if err != nil {
		return varplane.ActivateRequest{}, err
	}
	return varplane.ActivateRequest{
		Scope: scope, Revision: rev, ExpectedGeneration: gen, Actor: optional(b.Actor),
		Reason: optional(b.Reason), IdempotencyKey: optional(b.IdempotencyKey),
	}, nil
}

func requiredGeneration(field string, raw json.RawMessage) (varplane.Generation, error) {
	if isNull(raw) {
		return 0, badRequest("%s is required", field)
	}
	return parseGeneration(field, raw)
}

// DecodeDeactivate decodes and checks a POST {base}/admin/deactivate body.
// Errors as DecodeCreateRevision.
func DecodeDeactivate(body []byte) (varplane.DeactivateRequest, error) {
	var b deactivateBody
	if err := decodeStrict(body, &b); err != nil {
		return varplane.DeactivateRequest{}, err
	}
	scope, err := requiredScope("scope", b.Scope)
	if err != nil {
		return varplane.DeactivateRequest{}, err
	}
	gen, err := requiredGeneration("expectedGeneration", b.ExpectedGeneration)
	if err != nil {
		return varplane.DeactivateRequest{}, err
	}
	return varplane.DeactivateRequest{
		Scope: scope, ExpectedGeneration: gen, Actor: optional(b.Actor),
		Reason: optional(b.Reason), IdempotencyKey: optional(b.IdempotencyKey),
	}, nil
}

// DecodeRollback decodes and checks a POST {base}/admin/rollback body. At
// most one of toRevision and toGeneration may be given. Errors as
// DecodeCreateRevision.
func DecodeRollback(body []byte) (varplane.RollbackRequest, error) {
	var b rollbackBody
	if err := decodeStrict(body, &b); err != nil {
		return varplane.RollbackRequest{}, err
	}
	scope, err := requiredScope("scope", b.Scope)
	if err != nil {
		return varplane.RollbackRequest{}, err
	}
	gen, err := requiredGeneration("expectedGeneration", b.ExpectedGeneration)
	if err != nil {
		return varplane.RollbackRequest{}, err
	}
	req := varplane.RollbackRequest{
		Scope: scope, ExpectedGeneration: gen, Actor: optional(b.Actor),
		Reason: optional(b.Reason), IdempotencyKey: optional(b.IdempotencyKey),
	}
	if b.ToRevision != nil && !isNull(b.ToGeneration) {
		return varplane.RollbackRequest{}, badRequest("give toRevision or toGeneration, not both")
	}
	if b.ToRevision != nil {
		rev, err := varplane.ParseRevision(*b.ToRevision)
		if err != nil {
			return varplane.RollbackRequest{}, badRequest("toRevision: %s", varplane.ErrorMessage(err))
		}
		req.ToRevision = rev
	}
	if !isNull(b.ToGeneration) {
		to, err := parseGeneration("toGeneration", b.ToGeneration)
		if err != nil {
			return varplane.RollbackRequest{}, err
		}
		req.ToGeneration = &to
	}
	return req, nil
}

// queryParams walks a raw query string, calling fn for each name=value pair
// with both unescaped. It allocates only when a part is escaped, so the read
// path stays cheap. A malformed escape is bad-request.
func queryParams(raw string, fn func(name, value string) error) error {
	for raw != "" {
		var part string
		if i := strings.IndexByte(raw, '&'); i >= 0 {
			part, raw = raw[:i], raw[i+1:]
		} else {
			part, raw = raw, ""
		}
		if part == "" {
			continue
		}
		name, value, _ := strings.Cut(part, "=")
		var err error
		if name, err = unescape(name); err != nil {
			return err
		}
		if value, err = unescape(value); err != nil {
			return err
		}
		if err := fn(name, value); err != nil {
			return err
		}
	}
	return nil
}

func unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, nil
	}
	u, err := url.QueryUnescape(s)
	if err != nil {
		return "", badRequest("query string has a malformed escape")
	}
	return u, nil
}

// ParseReadScope extracts the scope of GET {base} from a raw query string:
// exactly one key (which must contain a dot) or one group (which must not).
// Missing, doubled, conflicting or malformed scopes are bad-request.
// Unrelated parameters are ignored.
func ParseReadScope(rawQuery string) (varplane.Scope, error) {
	var scope, field string
	err := queryParams(rawQuery, func(name, value string) error {
		if name != "key" && name != "group" {
			return nil
		}
		if field != "" {
			return badRequest("give exactly one key or group parameter")
		}
		field, scope = name, value
		return nil
	})
	if err != nil {
		return "", err
	}
	if field == "" {
		return "", badRequest("a key or group parameter is required")
	}
	return checkKind(field, scope)
}

// checkKind validates a key/group/prefix query value.
func checkKind(field, value string) (varplane.Scope, error) {
	sc, err := parseScopeField(field, value)
	if err != nil {
		return "", err
	}
	switch {
	case field == "key" && sc.IsGroup():
		return "", badRequest("key must contain a dot (use group for a single segment)")
	case field == "group" && sc.IsKey():
		return "", badRequest("group must not contain a dot (use key)")
	}
	return sc, nil
}

// singleParams extracts the named parameters of an admin query, each at
// most once; a repeated one is bad-request.
func singleParams(rawQuery string, names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	err := queryParams(rawQuery, func(name, value string) error {
		for _, n := range names {
			if n == name {
				if _, dup := out[name]; dup {
					return badRequest("parameter %s is given more than once", name)
				}
				out[name] = value
			}
		}
		return nil
	})
	return out, err
}

// MaxBatchScopes bounds the scopes of one batch read or watch request.
const MaxBatchScopes = 256

// Target is one scope a batch or watch request names. Subtree is set for a
// watch prefix: the scope and all its descendants.
type Target struct {
	Scope   varplane.Scope
	Subtree bool
}

// parseTargets reads the repeatable key, group and (when prefixes) prefix
// parameters in request order.
func parseTargets(rawQuery string, prefixes bool) ([]Target, error) {
	var out []Target
	err := queryParams(rawQuery, func(name, value string) error {
		switch {
		case name == "key" || name == "group":
		case name == "prefix" && prefixes:
		default:
			return nil
		}
		if len(out) == MaxBatchScopes {
			return badRequest("at most %d scopes per request", MaxBatchScopes)
		}
		var sc varplane.Scope
		var err error
		if name == "prefix" {
			sc, err = parseScopeField(name, value)
		} else {
			sc, err = checkKind(name, value)
		}
		if err != nil {
			return err
		}
		out = append(out, Target{Scope: sc, Subtree: name == "prefix"})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, badRequest("at least one key or group parameter is required")
	}
	return out, nil
}
