package canonical

import "encoding/json"

// ShortIntegerDigits bounds the integer literals that need no number check:
// 10^15 < 2^53, so such a literal is an exact double inside the safe range,
// and its canonical form is itself. UnsafeNumbers reports nothing for a
// valid JSON value whose every number is an integer literal (no fraction,
// no exponent) of at most this many digits, so a caller that has already
// scanned the value and seen only such numbers may skip it.
const ShortIntegerDigits = 15

// shortIntegersOnly reports whether data is one valid JSON value whose every
// number is an integer literal of at most ShortIntegerDigits digits. For such
// data UnsafeNumbers has nothing to report, and one byte scan plus
// json.Valid answers that several times faster than tokenising the document
// (the common case: configuration documents hold flags, strings and small
// counts). Anything else, invalid JSON included, goes the tokenising way.
func shortIntegersOnly(data []byte) bool {
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			if c == '-' {
				j++
			}
			start := j
			for j < len(data) && data[j] >= '0' && data[j] <= '9' {
				j++
			}
			if n := j - start; n == 0 || n > ShortIntegerDigits {
				return false
			}
			if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
				return false
			}
			i = j - 1
		}
	}
	return json.Valid(data)
}

// maxSimpleDepth bounds the nesting simpleCanonical follows; deeper
// documents take the general way.
const maxSimpleDepth = 64

// simpleCanonical reports whether data is already the canonical form of a
// JSON value built only from printable-ASCII strings without escapes,
// integer literals of at most ShortIntegerDigits digits (not -0), true, false
// and null, with no whitespace and every object's keys in strictly
// increasing order. The canonical form of such data is data itself, so
// TransformChecked returns it without parsing it into a tree; a document
// that is generated in canonical form (as a client can send it) takes this
// way. Anything else takes the general transform.
func simpleCanonical(data []byte) bool {
	p := simpleParser{b: data}
	return p.value(0) && p.i == len(data)
}

type simpleParser struct {
	b []byte
	i int
}

func (p *simpleParser) value(depth int) bool {
	if p.i >= len(p.b) || depth > maxSimpleDepth {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		if p.eat('}') {
			return true
		}
		var last []byte
		for {
			key, ok := p.str()
			if !ok || (last != nil && string(key) <= string(last)) || !p.eat(':') || !p.value(depth+1) {
				return false
			}
			last = key
			if p.eat('}') {
				return true
			}
			if !p.eat(',') {
				return false
			}
		}
	case c == '[':
		p.i++
		if p.eat(']') {
			return true
		}
		for {
			if !p.value(depth + 1) {
				return false
			}
			if p.eat(']') {
				return true
			}
			if !p.eat(',') {
				return false
			}
		}
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return p.integer()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
				p.i += len(lit)
				return true
			}
		}
		return false
	}
}

func (p *simpleParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes and returns its
// content.
func (p *simpleParser) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// integer reads 0 or an integer literal of 1 to ShortIntegerDigits digits
// without a leading zero, negative or not (but not -0).
func (p *simpleParser) integer() bool {
	neg := p.eat('-')
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n := p.i - start
	switch {
	case n == 0 || n > ShortIntegerDigits:
		return false
	case p.b[start] == '0' && (n > 1 || neg):
		return false
	}
	return p.i >= len(p.b) || (p.b[p.i] != '.' && p.b[p.i] != 'e' && p.b[p.i] != 'E')
}
