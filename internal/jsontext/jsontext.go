// Package jsontext writes JSON text the one way varplane writes it: strings
// escape what JSON requires plus U+2028 and U+2029 (so a body is also safe
// inside a script), never HTML characters, and invalid UTF-8 becomes U+FFFD,
// exactly as encoding/json with SetEscapeHTML(false). It imports nothing of
// varplane, so the domain, the stores and the wire layer all share it.
package jsontext

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string.
func AppendString(b []byte, s string) []byte { return appendString(b, s, false) }

// AppendCanonicalString appends s as RFC 8785 (section 3.2.2.2) serializes a
// string: only '"', '\\' and the controls below U+0020 escaped (\b, \t, \n,
// \f, \r or \u00xx), U+2028 and U+2029 as they are, and invalid UTF-8 as
// the character U+FFFD, so that the output is the canonical form of what
// AppendString writes. The event chain hashes it (canonical.AppendString).
func AppendCanonicalString(b []byte, s string) []byte { return appendString(b, s, true) }

func appendString(b []byte, s string, jcs bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			if jcs {
				b = append(b, "\uFFFD"...)
			} else {
				b = append(b, `\ufffd`...)
			}
			i += size
			start = i
			continue
		}
		if !jcs && (r == '\u2028' || r == '\u2029') {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Marshal encodes v compactly, without HTML escaping and without a trailing
// newline. Its strings are written as AppendString writes them.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// Indent returns the JSON text raw indented by two spaces a level, as
// every text meant for people is (the CLI, the console, the files it
// writes); raw itself when it is not JSON. Strings are kept as they are:
// nothing is escaped again.
func Indent(raw []byte) []byte {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return raw
	}
	return buf.Bytes()
}

// MarshalIndent encodes v as Marshal does, indented as Indent does.
func MarshalIndent(v any) ([]byte, error) {
	b, err := Marshal(v)
	if err != nil {
		return nil, err
	}
	return Indent(b), nil
}
