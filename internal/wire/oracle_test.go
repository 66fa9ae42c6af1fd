package wire

// The decoder DecodeStrict replaced, kept as the oracle of its answers: a
// token-by-token encoding/json decoding that checks the top-level fields
// itself. FuzzDecodeStrict holds the two to the same verdicts.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// decodeStrictTokens is decodeStrict for any body, with a json.Decoder:
// slower, and the way that reports where invalid JSON breaks.
func decodeStrictTokens(body []byte, dst any) error {
	if err := checkFields(body, fieldNames(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return BadRequest("request body has data after the JSON object")
	}
	return nil
}

// checkField refuses a top-level key that is not exactly one of fields, or
// that seen already holds, and records it in seen.
func checkField(name string, fields, seen map[string]bool) error {
	if !fields[name] {
		if safeName(name) {
			return BadRequest("unknown field %s", name)
		}
		return BadRequest("request body has an unknown field")
	}
	if seen[name] {
		return BadRequest("field %s is given more than once", name)
	}
	seen[name] = true
	return nil
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
		return BadRequest("request body must be a JSON object")
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
			return BadRequest("request body has data after the JSON object")
		}
		return decodeError(err)
	}
	return nil
}

func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return BadRequest("request body is not valid JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return BadRequest("request body must be a JSON object")
		}
		return BadRequest("field %s must be %s", typ.Field, jsonKind(typ.Type.Kind().String()))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return BadRequest("request body is truncated JSON")
	}
	const prefix = "json: unknown field "
	if msg := err.Error(); strings.HasPrefix(msg, prefix) {
		name, uerr := strconv.Unquote(strings.TrimPrefix(msg, prefix))
		if uerr == nil && safeName(name) {
			return BadRequest("unknown field %s", name)
		}
		return BadRequest("request body has an unknown field")
	}
	return BadRequest("request body is not a valid request")
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
