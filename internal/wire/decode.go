package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
)

// BadRequest returns a bad-request error with a formatted message.
func BadRequest(format string, args ...any) *varplane.Error {
	return varplane.Errorf(varplane.CodeBadRequest, format, args...)
}

func tooLarge(limit int64) *varplane.Error {
	return varplane.Errorf(varplane.CodePayloadTooLarge, "request body is larger than %d bytes", limit)
}

// DrainBytes bounds how much of an over-limit body ReadBody reads and throws
// away before it answers 413, and DrainTimeout how long it spends on that.
const (
	DrainBytes   = 4 << 20
	DrainTimeout = 2 * time.Second
)

// ReadBody reads the whole body of r, bounded by limit. Beyond the limit
// (declared by Content-Length or found while reading) it answers
// payload-too-large, after reading and discarding up to DrainBytes more of
// the body: a client that writes its whole body before it reads (most do)
// would otherwise meet a reset connection instead of the 413. The connection
// is closed after the answer. A missing body is bad-request.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, BadRequest("request body is required")
	}
	if r.ContentLength > limit {
		drain(w, r)
		return nil, tooLarge(limit)
	}
	mr := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength > 0 {
		// The declared length, within the limit: one allocation of that
		// size instead of io.ReadAll's doublings; a body that ends short
		// of it, or goes on past it, is refused as one that lies.
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(mr, body); err != nil {
			return nil, BadRequest("request body could not be read")
		}
		var one [1]byte
		if n, _ := mr.Read(one[:]); n > 0 {
			return nil, BadRequest("request body is longer than its Content-Length")
		}
		return body, nil
	}
	body, err := io.ReadAll(mr)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			drain(w, r)
			return nil, tooLarge(limit)
		}
		return nil, BadRequest("request body could not be read")
	}
	return body, nil
}

// drain discards what is left of r's body, bounded in bytes and time, and
// marks the connection to close after the answer.
func drain(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	if r.ProtoMajor >= 2 {
		return // a stream is reset on its own; the connection lives on
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(DrainTimeout))
	_, _ = io.CopyN(io.Discard, r.Body, DrainBytes)
}

// CheckContentType refuses (415 unsupported-media-type) a write whose
// Content-Type is present and is none of types (compared without
// parameters, case-insensitively). A missing Content-Type is accepted, so
// that curl without -H works; the form types a browser sends across origins
// without asking (urlencoded, multipart, text/plain) are never among types.
func CheckContentType(r *http.Request, types ...string) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	for _, t := range types {
		if strings.EqualFold(ct, t) { // the common case, without parsing
			return nil
		}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		for _, t := range types {
			if strings.EqualFold(mt, t) {
				return nil
			}
		}
	}
	return varplane.Errorf(varplane.CodeUnsupportedMediaType, "the body must be %s", strings.Join(types, " or "))
}

// DecodeStrict decodes one JSON object from body into dst (a pointer to a
// struct of the request shape). It first holds the whole body to lim (its
// document may sit one level down, so the body may nest one level more than
// a document), then refuses unknown fields (matched exactly: encoding/json
// alone would accept "expectedgeneration"), duplicate fields, wrongly typed
// fields and trailing data, as bad-request naming the field (never its
// value); a limit passed is limit-exceeded, invalid JSON or UTF-8
// bad-request.
func DecodeStrict(body []byte, dst any, lim varplane.Limits) error {
	_, err := DecodeStrictBody(body, dst, lim)
	return err
}

// DecodeStrictBody is DecodeStrict that also returns what its check of the
// body learnt (varplane.CheckedBody), so that a document decoded into a
// Value field can go on to the engine as a varplane.CheckedDocument
// without being scanned again. body must not be modified afterwards.
func DecodeStrictBody(body []byte, dst any, lim varplane.Limits) (varplane.CheckedBody, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return varplane.CheckedBody{}, BadRequest("request body is required")
	}
	cb, err := lim.CheckBody(body, 1)
	if err != nil {
		return varplane.CheckedBody{}, err
	}
	// One strict decoding (json/v2 semantics): names matched exactly, an
	// unknown or repeated member refused, at every level, nothing after the
	// object. The old token-by-token decoder stays in the tests as the
	// oracle of these answers (FuzzDecodeStrict).
	if bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
		return varplane.CheckedBody{}, BadRequest("request body must be a JSON object")
	}
	if err := jsonv2.Unmarshal(body, dst, jsonv2.RejectUnknownMembers(true)); err != nil {
		return varplane.CheckedBody{}, strictError(body, dst, err)
	}
	return cb, nil
}

// Value is a raw JSON value decoded by DecodeStrict without a copy: the
// bytes of the body itself (json.RawMessage gets a copy), as
// varplane.CheckedBody.Document needs them to vouch for a document. It
// shares the body's memory, so it lives as long as the body is not reused.
// Decode it only from a []byte (DecodeStrict, json/v2's Unmarshal, which
// reads its input in place): a decoder reading an io.Reader hands out
// values in its own buffer, which it reuses.
type Value []byte

// UnmarshalJSONFrom keeps the value as the decoder read it, in the input
// itself (see Value).
func (v *Value) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	raw, err := dec.ReadValue()
	if err != nil {
		return err
	}
	*v = Value(raw)
	return nil
}

// strictError turns a json/v2 decoding error into a bad-request naming the
// top-level field it concerns (never a value). A wrong name is reported
// before a wrong type wherever they stand, so that a typo is named first.
func strictError(body []byte, dst any, err error) error {
	var se *jsonv2.SemanticError
	var syn *jsontext.SyntacticError
	if errors.As(err, &se) && !errors.Is(err, jsonv2.ErrUnknownName) {
		if nerr := checkNames(body, fieldNames(dst)); nerr != nil {
			return nerr
		}
	}
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		if name := duplicateTopName(body); name != "" && safeName(name) {
			return BadRequest("field %s is given more than once", name)
		}
		return BadRequest("request body has a member given more than once")
	case errors.As(err, &se):
		field := topField(string(se.JSONPointer))
		if errors.Is(err, jsonv2.ErrUnknownName) {
			if safeName(field) {
				return BadRequest("unknown field %s", field)
			}
			return BadRequest("request body has an unknown field")
		}
		if field == "" || se.GoType == nil {
			return BadRequest("request body must be a JSON object")
		}
		if !safeName(field) {
			return BadRequest("a field has the wrong type")
		}
		return BadRequest("field %s must be %s", field, kindName(se.GoType))
	case errors.As(err, &syn):
		if bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) && errors.Is(err, io.ErrUnexpectedEOF) {
			return BadRequest("request body is truncated JSON")
		}
		return BadRequest("request body is not valid JSON (at byte %d)", syn.ByteOffset)
	}
	return BadRequest("request body is not a valid request")
}

// topField is the first token of a JSON Pointer, unescaped: the top-level
// field an error is about.
func topField(ptr string) string {
	if !strings.HasPrefix(ptr, "/") {
		return ""
	}
	tok, _, _ := strings.Cut(ptr[1:], "/")
	if field, ok := canonical.UnescapeToken(tok); ok {
		return field
	}
	return tok
}

// duplicateTopName finds the top-level member given twice, to name it.
func duplicateTopName(body []byte) string {
	var dup string
	walkNames(body, func(name string, seen bool) bool {
		if seen {
			dup = name
		}
		return !seen
	})
	return dup
}

// checkNames refuses the first top-level name that is not one of fields,
// or that is given twice; nil when every name is right.
func checkNames(body []byte, fields map[string]bool) error {
	var err error
	walkNames(body, func(name string, seen bool) bool {
		switch {
		case !fields[name] && safeName(name):
			err = BadRequest("unknown field %s", name)
		case !fields[name]:
			err = BadRequest("request body has an unknown field")
		case seen && safeName(name):
			err = BadRequest("field %s is given more than once", name)
		case seen:
			err = BadRequest("request body has a member given more than once")
		}
		return err == nil
	})
	return err
}

// walkNames calls fn with each top-level member name of body, in order, and
// whether it was seen before, until fn returns false.
func walkNames(body []byte, fn func(name string, seen bool) bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return
	}
	seen := map[string]bool{}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return
		}
		name := tok.String()
		if !fn(name, seen[name]) {
			return
		}
		seen[name] = true
		if err := dec.SkipValue(); err != nil {
			return
		}
	}
}

var fieldSets sync.Map // reflect.Type -> map[string]bool

// fieldNames returns the JSON names of the struct dst points to.
func fieldNames(dst any) map[string]bool {
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

// kindName names what a Go type takes in JSON.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
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

// Generation reads a generation given as raw JSON: a non-negative
// integer literal, at most the largest uint64. Negative, fractional and
// exponent forms, strings and other types are refused naming the field.
func Generation(field string, raw json.RawMessage) (varplane.Generation, error) {
	s := string(bytes.TrimSpace(raw))
	return GenerationText(field, s)
}

func GenerationText(field, s string) (varplane.Generation, error) {
	if s == "" {
		return 0, BadRequest("%s is required", field)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, BadRequest("%s must be a non-negative integer", field)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, BadRequest("%s must be a non-negative integer without leading zeros", field)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, BadRequest("%s is larger than the largest generation", field)
	}
	return varplane.Generation(n), nil
}

// RequiredGeneration is Generation for a field that must be given.
func RequiredGeneration(field string, raw json.RawMessage) (varplane.Generation, error) {
	if IsNull(raw) {
		return 0, BadRequest("%s is required", field)
	}
	return Generation(field, raw)
}

// IsNull reports whether a raw field is absent or JSON null.
func IsNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

// RequiredScope parses a required scope field of a body, naming field in
// its errors.
func RequiredScope(field string, s *string) (varplane.Scope, error) {
	if s == nil {
		return "", BadRequest("%s is required", field)
	}
	return ScopeField(field, *s)
}

// ScopeField parses a scope given as field, naming field in its errors.
func ScopeField(field, s string) (varplane.Scope, error) {
	sc, err := varplane.ParseScope(s)
	if err != nil {
		return "", BadRequest("%s: %s", field, varplane.ErrorMessage(err))
	}
	return sc, nil
}

// Optional returns *s, or "" when the field was absent.
func Optional(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// QueryParams walks a raw query string, calling fn for each name=value pair
// with both unescaped. It allocates only when a part is escaped, so the read
// path stays cheap. A malformed escape is bad-request.
func QueryParams(raw string, fn func(name, value string) error) error {
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
		return "", BadRequest("query string has a malformed escape")
	}
	return u, nil
}

// ParseReadScope extracts the scope of GET {base} from a raw query string:
// exactly one key (which must contain a dot) or one group (which must not).
// Missing, doubled, conflicting or malformed scopes are bad-request.
// Unrelated parameters are ignored.
func ParseReadScope(rawQuery string) (varplane.Scope, error) {
	var scope, field string
	err := QueryParams(rawQuery, func(name, value string) error {
		if name != "key" && name != "group" {
			return nil
		}
		if field != "" {
			return BadRequest("give exactly one key or group parameter")
		}
		field, scope = name, value
		return nil
	})
	if err != nil {
		return "", err
	}
	if field == "" {
		return "", BadRequest("a key or group parameter is required")
	}
	return CheckKind(field, scope)
}

// CheckKind validates a key/group/prefix query value.
func CheckKind(field, value string) (varplane.Scope, error) {
	sc, err := ScopeField(field, value)
	if err != nil {
		return "", err
	}
	switch {
	case field == "key" && sc.IsGroup():
		return "", BadRequest("key must contain a dot (use group for a single segment)")
	case field == "group" && sc.IsKey():
		return "", BadRequest("group must not contain a dot (use key)")
	}
	return sc, nil
}

// SingleParams extracts the named parameters of an admin query, each at
// most once; a repeated one is bad-request.
func SingleParams(rawQuery string, names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	err := QueryParams(rawQuery, func(name, value string) error {
		for _, n := range names {
			if n == name {
				if _, dup := out[name]; dup {
					return BadRequest("parameter %s is given more than once", name)
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
// watch prefix: the scope and all its descendants. The "everything" target
// of a watch (all=1) is the empty scope with Subtree set: the subtree of
// every scope (see Everything).
type Target struct {
	Scope   varplane.Scope
	Subtree bool
}

// Everything is the target of GET {base}/watch?all=1: every scope. An
// authorizer sees it as Access{Scope: "", Subtree: true}, which a grant
// limited to some prefixes does not cover.
var Everything = Target{Scope: "", Subtree: true}

// IsEverything reports whether t is the Everything target.
func (t Target) IsEverything() bool { return t == Everything }

// Targets reads the repeatable key, group and (when prefixes) prefix
// parameters in request order. With prefixes (a watch), all=1 asks for
// every scope instead and must stand alone: it returns [Everything]. An
// empty prefix is refused rather than read as everything, so that an unset
// shell variable never widens a watch.
func Targets(rawQuery string, prefixes bool) ([]Target, error) {
	var out []Target
	all := false
	err := QueryParams(rawQuery, func(name, value string) error {
		switch {
		case name == "key" || name == "group":
		case name == "prefix" && prefixes:
		case name == "all" && prefixes:
			if value != "1" || all {
				return BadRequest("all must be given once, as all=1")
			}
			all = true
			return nil
		default:
			return nil
		}
		if len(out) == MaxBatchScopes {
			return BadRequest("at most %d scopes per request", MaxBatchScopes)
		}
		var sc varplane.Scope
		var err error
		if name == "prefix" {
			if value == "" {
				return BadRequest("prefix is empty (to watch every scope, send all=1)")
			}
			sc, err = ScopeField(name, value)
		} else {
			sc, err = CheckKind(name, value)
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
	switch {
	case all && len(out) > 0:
		return nil, BadRequest("all=1 watches every scope: give it without key, group or prefix")
	case all:
		return []Target{Everything}, nil
	case len(out) == 0 && prefixes:
		return nil, BadRequest("at least one key, group or prefix parameter is required (or all=1 for every scope)")
	case len(out) == 0:
		return nil, BadRequest("at least one key or group parameter is required")
	}
	return out, nil
}

// StoredLimits are the limits of a document a store may hold: the
// ceilings of every limit, so that whatever was acknowledged can be read
// back.
var StoredLimits = varplane.Limits{MaxBodyBytes: varplane.MaxBodyCeiling, MaxDepth: varplane.MaxDepthCeiling,
	MaxStringBytes: varplane.MaxBodyCeiling, MaxMembers: varplane.MaxBodyCeiling}.WithDefaults()

// DecodeStored decodes a stored document (the access control's
// principals, a migration's report.json) into dst with the strict decoder
// of the requests, within StoredLimits: field names match exactly, and an
// unknown or repeated field, a wrong type or trailing data is bad-request
// naming the field.
func DecodeStored(doc []byte, dst any) error { return DecodeStrict(doc, dst, StoredLimits) }
