package canonical

import "strings"

// EscapeToken returns s as one reference token of a JSON Pointer (RFC
// 6901): "~" written "~0" and "/" written "~1". It is the one escaper of
// the project: validation issues, schema errors, the component
// configuration, JSON Patch and canonicalisation's errors all name paths
// with it.
func EscapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	b := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '~':
			b = append(b, '~', '0')
		case '/':
			b = append(b, '~', '1')
		default:
			b = append(b, s[i])
		}
	}
	return string(b)
}

// UnescapeToken reverses EscapeToken. It reports false for a "~" that is
// not followed by "0" or "1", which no escaped token holds.
func UnescapeToken(t string) (string, bool) {
	if !strings.Contains(t, "~") {
		return t, true
	}
	b := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		if t[i] != '~' {
			b = append(b, t[i])
			continue
		}
		if i+1 == len(t) || (t[i+1] != '0' && t[i+1] != '1') {
			return "", false
		}
		if t[i+1] == '0' {
			b = append(b, '~')
		} else {
			b = append(b, '/')
		}
		i++
	}
	return string(b), true
}
