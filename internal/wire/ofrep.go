package wire

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
)

// OpenFeature flags (docs/openfeature.md). The one parser of a flag key and
// the one lookup of its value, shared by the server's OFREP routes and the
// SDK's OpenFeature provider, and the one table of OFREP's error codes.

// MaxFlagKeyBytes bounds a flag key: a scope (varplane.MaxScopeBytes) and
// a JSON Pointer into its document.
const MaxFlagKeyBytes = 4096

// FlagKey is a parsed flag key: `<scope>` names the scope's whole document,
// `<scope>#<JSON Pointer>` (RFC 6901) one value in it.
type FlagKey struct {
	Scope varplane.Scope
	// Pointer is the JSON Pointer as written after '#' ("" for the whole
	// document: a bare scope, or a scope followed by '#' alone).
	Pointer string
	// Tokens are the pointer's reference tokens, unescaped (~1 is '/', ~0
	// is '~'); none for the whole document.
	Tokens []string
}

// ParseFlagKey parses a flag key. The scope is everything before the first
// '#' (so a scope holding '#' cannot be named as a flag) and must be a
// valid scope; what follows is a JSON Pointer: empty (the whole document)
// or '/' followed by tokens separated by '/', in which '~' is only ever
// followed by '0' or '1'. A key longer than MaxFlagKeyBytes, an invalid
// scope or pointer is a bad-request error that quotes nothing of the key.
func ParseFlagKey(key string) (FlagKey, error) {
	if len(key) > MaxFlagKeyBytes {
		return FlagKey{}, BadRequest("a flag key is at most %d bytes", MaxFlagKeyBytes)
	}
	scope, ptr, _ := strings.Cut(key, "#")
	sc, err := varplane.ParseScope(scope)
	if err != nil {
		return FlagKey{}, BadRequest("the flag key's scope is not a valid scope: %s", varplane.ErrorMessage(err))
	}
	fk := FlagKey{Scope: sc, Pointer: ptr}
	if ptr == "" {
		return fk, nil
	}
	if ptr[0] != '/' {
		return FlagKey{}, BadRequest("the flag key's JSON Pointer must be empty or start with '/'")
	}
	rest := ptr[1:]
	for {
		tok, more, found := strings.Cut(rest, "/")
		u, ok := canonical.UnescapeToken(tok)
		if !ok {
			return FlagKey{}, BadRequest("the flag key's JSON Pointer has '~' not followed by 0 or 1")
		}
		fk.Tokens = append(fk.Tokens, u)
		if !found {
			return fk, nil
		}
		rest = more
	}
}

// ErrFlagValueNotFound is the error of LookupFlag when the document has no
// value at the pointer: OFREP's FLAG_NOT_FOUND.
var ErrFlagValueNotFound = &varplane.Error{Code: varplane.CodeNotFound, Message: "the document has no value at the flag key's JSON Pointer"}

// LookupFlag returns the value at tokens in doc, a JSON document (a stored
// one: valid, without duplicate names), as a slice of doc, never a copy
// (doc is not modified; the slice shares its memory). A token names an object's member, or an array's element by
// its decimal index without leading zeros ("-", past the end, names none).
// A missing value is ErrFlagValueNotFound.
func LookupFlag(doc []byte, tokens []string) ([]byte, error) {
	if len(tokens) == 0 {
		return doc, nil
	}
	lk := lookups.Get().(*lookup)
	defer lookups.Put(lk)
	lk.buf = *bytes.NewBuffer(doc)
	dec := &lk.dec
	// A stored document has no repeated names and valid UTF-8: the
	// decoder need not keep the names it read to check them.
	dec.Reset(&lk.buf, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	defer func() { // the pool holds no document
		lk.buf = bytes.Buffer{}
		dec.Reset(&lk.buf)
	}()
	for _, tok := range tokens {
		switch dec.PeekKind() {
		case '{':
			if _, err := dec.ReadToken(); err != nil {
				return nil, lookupError(err)
			}
			for {
				if dec.PeekKind() == '}' {
					return nil, ErrFlagValueNotFound
				}
				name, err := dec.ReadToken()
				if err != nil {
					return nil, lookupError(err)
				}
				if name.String() == tok {
					break
				}
				if err := dec.SkipValue(); err != nil {
					return nil, lookupError(err)
				}
			}
		case '[':
			n, ok := arrayIndex(tok)
			if !ok {
				return nil, ErrFlagValueNotFound
			}
			if _, err := dec.ReadToken(); err != nil {
				return nil, lookupError(err)
			}
			for i := 0; ; i++ {
				if dec.PeekKind() == ']' {
					return nil, ErrFlagValueNotFound
				}
				if i == n {
					break
				}
				if err := dec.SkipValue(); err != nil {
					return nil, lookupError(err)
				}
			}
		default:
			return nil, ErrFlagValueNotFound
		}
	}
	v, err := dec.ReadValue()
	if err != nil {
		return nil, lookupError(err)
	}
	// The decoder reads a bytes.Buffer in place: v is doc's own bytes, and
	// stays valid since nothing reads the decoder after it.
	return v, nil
}

// lookup is a decoder with its input, reused across lookups.
type lookup struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var lookups = sync.Pool{New: func() any { return new(lookup) }}

// arrayIndex reads an array index token: "0", or digits without a leading
// zero, within an int.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (tok[0] == '0' && len(tok) > 1) {
		return 0, false
	}
	n, err := strconv.Atoi(tok)
	return n, err == nil && n >= 0
}

func lookupError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return varplane.Errorf(varplane.CodeInternal, "flag lookup: the document ends early")
	}
	return varplane.Errorf(varplane.CodeInternal, "flag lookup: %v", err)
}

// OFREPContext is what the server reads of an OFREP evaluation context:
// the targeting key, and the flags a bulk evaluation names. Every other
// member is accepted and ignored.
type OFREPContext struct {
	// TargetingKey is context.targetingKey ("" when absent).
	TargetingKey string `json:"targetingKey"`
	// Flags is context.flags: the flag keys a bulk evaluation answers
	// (nil when absent: every readable scope).
	Flags []string `json:"flags"`
}

// MaxOFREPFlags bounds the flags of one bulk evaluation, named in its
// context or readable by its caller.
const MaxOFREPFlags = MaxBatchScopes

// DecodeOFREP decodes the body of an OFREP evaluation request,
// {"context": {...}}, held to lim like any request body (its context is
// a document one level down): a body past a limit is limit-exceeded; one
// that is not a JSON object, whose context is not an object, or whose
// targetingKey or flags are of another type (a string; an array of at most
// MaxOFREPFlags strings) is bad-request. Unknown members are ignored,
// at the top as in the context: a provider may send more than OFREP says.
func DecodeOFREP(body []byte, lim varplane.Limits) (OFREPContext, error) {
	var out OFREPContext
	if len(bytes.TrimSpace(body)) == 0 {
		return out, BadRequest("request body is required")
	}
	if _, err := lim.CheckBody(body, 1); err != nil {
		return out, err
	}
	var req struct {
		Context jsontext.Value `json:"context"`
	}
	if bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
		return out, BadRequest("request body must be a JSON object")
	}
	if err := jsonv2.Unmarshal(body, &req); err != nil {
		return out, BadRequest("request body is not an OFREP evaluation request")
	}
	if len(req.Context) == 0 || req.Context.Kind() == 'n' {
		return out, nil
	}
	if req.Context.Kind() != '{' {
		return out, BadRequest("context must be an object")
	}
	if err := jsonv2.Unmarshal(req.Context, &out); err != nil {
		return OFREPContext{}, BadRequest("context.targetingKey must be a string and context.flags an array of strings")
	}
	if len(out.Flags) > MaxOFREPFlags {
		return OFREPContext{}, &varplane.Error{Code: varplane.CodeLimitExceeded, Limit: "ofrep-flags",
			Message: "context.flags names more than " + strconv.Itoa(MaxOFREPFlags) + " flags"}
	}
	return out, nil
}

// OFREP error codes (the OpenFeature specification's error codes).
const (
	OFREPFlagNotFound        = "FLAG_NOT_FOUND"
	OFREPParseError          = "PARSE_ERROR"
	OFREPTypeMismatch        = "TYPE_MISMATCH"
	OFREPTargetingKeyMissing = "TARGETING_KEY_MISSING"
	OFREPInvalidContext      = "INVALID_CONTEXT"
	OFREPGeneral             = "GENERAL"
)

// OFREPCode is OFREP's error code of a varplane code: the one table.
// A flag that does not exist, cannot exist (a malformed key) or has no
// head is FLAG_NOT_FOUND; a request body or context refused is
// INVALID_CONTEXT; a missing targeting key TARGETING_KEY_MISSING; the rest
// GENERAL.
func OFREPCode(code varplane.Code) string {
	switch code {
	case varplane.CodeNotFound, varplane.CodeNoHead, varplane.CodeRevisionReclaimed:
		return OFREPFlagNotFound
	case varplane.CodeBadRequest, varplane.CodeLimitExceeded, varplane.CodePayloadTooLarge,
		varplane.CodeUnsupportedMediaType:
		return OFREPInvalidContext
	case varplane.CodeTargetingKeyMissing:
		return OFREPTargetingKeyMissing
	}
	return OFREPGeneral
}

// OFREPFailure is OFREP's evaluation failure: the body of an error answer,
// and an item of a bulk answer.
type OFREPFailure struct {
	Key          string `json:"key,omitempty"`
	ErrorCode    string `json:"errorCode"`
	ErrorDetails string `json:"errorDetails,omitempty"`
}

// OFREPFailureOf is the failure err answers for key: its OFREP code and the
// client-safe sentence of BodyOf (never the cause of an internal error).
func OFREPFailureOf(key string, err error) OFREPFailure {
	b := BodyOf(err)
	return OFREPFailure{Key: key, ErrorCode: OFREPCode(b.Code), ErrorDetails: b.Error}
}

// WriteOFREPError answers err to an OFREP request with the status of
// err's code (Status, the one table) and OFREP's failure body; key is the
// flag of a single evaluation ("" for a bulk one). It logs as WriteError.
func WriteOFREPError(w http.ResponseWriter, r *http.Request, log *slog.Logger, key string, err error) {
	body, status := answerError(w, r, log, err)
	// A flag not found is 404 whatever made it so (a reclaimed revision).
	if OFREPCode(body.Code) == OFREPFlagNotFound {
		status = http.StatusNotFound
	}
	WriteJSON(w, status, OFREPFailure{Key: key, ErrorCode: OFREPCode(body.Code), ErrorDetails: body.Error})
}
