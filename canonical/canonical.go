// Package canonical turns JSON into its RFC 8785 (JCS) canonical form and
// computes revision digests over it. Canonical bytes are the identity of a
// document: equal values give equal bytes, whatever their key order,
// whitespace or escaping.
//
// RFC 8785 reads numbers as IEEE 754 doubles, so an integer beyond ±2^53
// would silently change; Transform refuses such input (see SafeNumbers) rather
// than store a different value.
package canonical

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/gowebpki/jcs"

	"github.com/varplane/varplane/internal/jsontext"
)

// DigestPrefix starts every revision digest.
const DigestPrefix = "sha256:"

// MaxSafeInteger is 2^53, the largest magnitude at which every integer is
// exact as an IEEE 754 double.
const MaxSafeInteger = 1 << 53

// ErrUnsafeNumber reports a number that canonicalisation would change.
var ErrUnsafeNumber = errors.New("canonical: number cannot be represented exactly")

// Transform returns the canonical form of the JSON value in data. It fails on
// invalid JSON, duplicate object keys, lone surrogates and invalid UTF-8, and
// with an *UnsafeNumber on the numbers SafeNumbers refuses. Its output is
// accepted by Transform and returned unchanged.
func Transform(data []byte) ([]byte, error) {
	if err := SafeNumbers(data); err != nil {
		return nil, err
	}
	return TransformChecked(data)
}

// TransformChecked is Transform for data whose numbers the caller has
// already checked with SafeNumbers or UnsafeNumbers: it skips that pass.
func TransformChecked(data []byte) ([]byte, error) {
	if simpleCanonical(data) {
		return append([]byte(nil), data...), nil
	}
	out, err := jcs.Transform(data)
	if err != nil {
		return nil, fmt.Errorf("canonical: %w", err)
	}
	return out, nil
}

// TransformCheckedShared is TransformChecked that returns data itself, not
// a copy, when data is already in canonical form: for a caller that only
// reads the result (to hash it) and does not modify data meanwhile.
func TransformCheckedShared(data []byte) ([]byte, error) {
	if simpleCanonical(data) {
		return data, nil
	}
	return TransformChecked(data)
}

// Digest returns "sha256:" + 64 lowercase hex digits of the SHA-256 of the
// canonical form of data.
func Digest(data []byte) (string, error) {
	c, err := Transform(data)
	if err != nil {
		return "", err
	}
	return DigestCanonical(c), nil
}

// DigestCanonical returns the digest of bytes that are already canonical.
func DigestCanonical(c []byte) string {
	sum := sha256.Sum256(c)
	var b [len(DigestPrefix) + 2*sha256.Size]byte
	copy(b[:], DigestPrefix)
	hex.Encode(b[len(DigestPrefix):], sum[:])
	return string(b[:])
}

// UnsafeNumber describes the first number in a document that canonical JSON
// would not preserve, with the JSON Pointer of where it stands.
type UnsafeNumber struct {
	Path   string
	Reason string
}

// Error names the number's location and the reason, never the number itself.
func (u *UnsafeNumber) Error() string {
	at := u.Path
	if at == "" {
		at = "the document root" // "" is the root's JSON Pointer, unreadable in a sentence
	}
	return fmt.Sprintf("canonical: number at %s %s", at, u.Reason)
}

// Unwrap returns ErrUnsafeNumber, so errors.Is(err, ErrUnsafeNumber) holds.
func (u *UnsafeNumber) Unwrap() error { return ErrUnsafeNumber }

// SafeNumbers checks every number of the JSON value in data and returns an
// *UnsafeNumber for the first one that canonicalisation would change or that
// would leave the safe range: an integer literal beyond ±2^53, a value whose
// canonical form would be such an integer (1e16, 10000000000000000.0), a
// value beyond the range of a double, or a non-zero value that would
// underflow to 0. Floats written with an exponent that stays in the
// canonical form (1.5e300) are accepted. Invalid JSON is reported as a
// plain error.
func SafeNumbers(data []byte) error {
	issues, err := UnsafeNumbers(data, 1)
	if err != nil {
		return err
	}
	if len(issues) > 0 {
		return &issues[0]
	}
	return nil
}

// UnsafeNumbers returns up to limit numbers of data (all when limit <= 0) that
// canonicalisation would change, in document order. It returns an error when
// data is not one JSON value, unless limit numbers were found before the
// malformed part.
func UnsafeNumbers(data []byte, limit int) ([]UnsafeNumber, error) {
	if shortIntegersOnly(data) {
		return nil, nil
	}
	return unsafeNumbersTokens(data, limit)
}

// unsafeNumbersTokens is UnsafeNumbers for any data: it tokenises the
// document to find each number and the path to it.
func unsafeNumbersTokens(data []byte, limit int) ([]UnsafeNumber, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []UnsafeNumber
	type frame struct {
		object bool
		index  int
		key    string
		want   bool // object: next token is a key
	}
	var stack []frame
	path := func() string {
		var b []byte
		for _, f := range stack {
			b = append(b, '/')
			if f.object {
				b = append(b, EscapeToken(f.key)...)
			} else {
				b = strconv.AppendInt(b, int64(f.index), 10)
			}
		}
		if len(b) == 0 {
			return ""
		}
		return string(b)
	}
	values := 0 // complete top-level values; exactly one is valid JSON
	afterValue := func() {
		if len(stack) == 0 {
			values++
		}
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].want = true
			} else {
				stack[n-1].index++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			// The decoder reports a truncated document as a plain EOF.
			if len(stack) > 0 || values == 0 {
				return nil, fmt.Errorf("canonical: %w", io.ErrUnexpectedEOF)
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("canonical: %w", err)
		}
		if len(stack) == 0 && values > 0 {
			return nil, errors.New("canonical: data after the JSON value")
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].want {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				afterValue()
				continue
			}
			stack[n-1].key, _ = tok.(string)
			stack[n-1].want = false
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, frame{object: true, want: true})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
				afterValue()
			}
			continue
		case json.Number:
			if reason := numberProblem(string(v)); reason != "" {
				out = append(out, UnsafeNumber{Path: path(), Reason: reason})
				if limit > 0 && len(out) >= limit {
					return out, nil
				}
			}
		}
		afterValue()
	}
	return out, nil
}

func numberProblem(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return "is out of the range of a double"
	}
	isInt, nonZero := true, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 'e' || c == 'E' {
			isInt = false
			break // exponent digits say nothing about zero-ness
		}
		if c == '.' {
			isInt = false
		}
		if c >= '1' && c <= '9' {
			nonZero = true
		}
	}
	if nonZero && f == 0 {
		// An underflow would turn a written non-zero value into 0.
		return "is too small for a double and would become 0"
	}
	if isInt {
		// Compare exactly: as a float64, 2^53+1 already rounds to 2^53.
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > MaxSafeInteger || n < -MaxSafeInteger {
			return "is an integer beyond ±2^53; send it as a string"
		}
		return ""
	}
	// ECMAScript formatting writes integral doubles below 1e21 without an
	// exponent: 1e16 would come out as an integer literal beyond 2^53, which
	// this check refuses, and canonical output must stay acceptable input.
	if a := math.Abs(f); a > MaxSafeInteger && a < 1e21 && f == math.Trunc(f) {
		return "would be written as an integer beyond ±2^53; send it as a string"
	}
	return ""
}

// AppendString appends s to b as RFC 8785 (section 3.2.2.2) serializes a
// string: '"' and '\\' escaped, the controls below U+0020 written as \b, \t,
// \n, \f, \r or \u00xx (lowercase hex), everything else as it is. Invalid
// UTF-8 is written as U+FFFD, so the output is always valid JSON; callers that
// hash it (the event chain) pass text the domain already validated.
func AppendString(b []byte, s string) []byte { return jsontext.AppendCanonicalString(b, s) }
