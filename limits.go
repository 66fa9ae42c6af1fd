package varplane

import (
	"fmt"
	"unicode/utf8"
)

// Limits bound the size and shape of what varplane accepts: request bodies
// at every entrance, and every document the engine stores. The same numbers
// hold at decode time (the wire layer) and in the engine, and every store
// reads back whatever they allow (a store's reader accepts at least
// MaxDepthCeiling+EnvelopeDepth levels), so a document that was acknowledged
// can always be read again.
//
// A zero field takes its default; see DefaultLimits.
type Limits struct {
	// MaxBodyBytes bounds a request body, and a document (413
	// payload-too-large beyond).
	MaxBodyBytes int64
	// MaxDepth bounds the nesting of objects and arrays in a document: a
	// scalar is depth 0, {"a":1} depth 1. At most MaxDepthCeiling.
	MaxDepth int
	// MaxStringBytes bounds every string and object member name, in bytes
	// of its JSON text (escapes included).
	MaxStringBytes int
	// MaxNumberBytes bounds the text of a number literal.
	MaxNumberBytes int
	// MaxMembers bounds the members of one object or the elements of one
	// array.
	MaxMembers int
}

// The defaults of Limits, and the ceilings no configuration may pass.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMaxDepth       = 64
	DefaultMaxStringBytes = 256 << 10
	DefaultMaxNumberBytes = 64
	DefaultMaxMembers     = 10_000

	// MaxDepthCeiling is the largest MaxDepth a deployment may choose.
	MaxDepthCeiling = 512
	// EnvelopeDepth is the nesting a store or a request adds around a
	// document (a log line, a request body, a batch answer). A store's
	// reader accepts MaxDepthCeiling+EnvelopeDepth levels.
	EnvelopeDepth = 8
	// MaxBodyCeiling is the largest MaxBodyBytes a deployment may choose.
	MaxBodyCeiling = 64 << 20
)

// DefaultLimits returns the limits in force when none are configured.
func DefaultLimits() Limits { return Limits{}.WithDefaults() }

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxStringBytes <= 0 {
		l.MaxStringBytes = DefaultMaxStringBytes
	}
	if l.MaxNumberBytes <= 0 {
		l.MaxNumberBytes = DefaultMaxNumberBytes
	}
	if l.MaxMembers <= 0 {
		l.MaxMembers = DefaultMaxMembers
	}
	return l
}

// Validate reports a limit beyond its ceiling, as a bad-request error naming
// it. Zero fields are valid (they take their defaults).
func (l Limits) Validate() error {
	switch {
	case l.MaxDepth > MaxDepthCeiling:
		return Errorf(CodeBadRequest, "the document depth limit is %d at most, not %d", MaxDepthCeiling, l.MaxDepth)
	case l.MaxBodyBytes > MaxBodyCeiling:
		return Errorf(CodeBadRequest, "the body size limit is %d bytes at most, not %d", MaxBodyCeiling, l.MaxBodyBytes)
	case l.MaxStringBytes > MaxBodyCeiling, l.MaxNumberBytes > MaxBodyCeiling, l.MaxMembers > MaxBodyCeiling:
		return Errorf(CodeBadRequest, "a document limit is larger than %d", MaxBodyCeiling)
	}
	return nil
}

// LimitError is the error of a document or body beyond a limit: code
// limit-exceeded (or payload-too-large for the size), naming the limit and
// the byte offset where it was passed, never the content.
func limitError(what string, max int, offset int) *Error {
	return &Error{
		Code:    CodeLimitExceeded,
		Message: fmt.Sprintf("%s (limit %d) at byte %d", what, max, offset),
		Limit:   what,
	}
}

// CheckJSON checks that b is one valid JSON value (valid UTF-8, nothing but
// white space after it) within l, allowing extraDepth levels of nesting
// beyond l.MaxDepth for the envelope around a document (0 for a document
// itself). It is a single pass with no recursion and no allocation beyond a
// stack of MaxDepth+extraDepth entries, so it is safe to run on hostile input
// before anything else parses it. It returns a limit-exceeded *Error for a
// limit, payload-too-large for the size, and bad-request for malformed JSON.
func (l Limits) CheckJSON(b []byte, extraDepth int) error {
	l = l.WithDefaults()
	if int64(len(b)) > l.MaxBodyBytes {
		return Errorf(CodePayloadTooLarge, "the body is larger than %d bytes", l.MaxBodyBytes)
	}
	s := scanner{b: b, lim: l, maxDepth: l.MaxDepth + extraDepth}
	s.kinds, s.counts = s.kindsBuf[:0], s.countsBuf[:0]
	return s.run()
}

// CheckAndCompact is CheckJSON and json.Compact in one pass: it checks b as
// CheckJSON does, with the same errors, and returns b without its
// insignificant white space (key order, escapes and number text as
// written). An already compact b is returned itself, not copied; otherwise
// the result is a new slice of one allocation.
func (l Limits) CheckAndCompact(b []byte, extraDepth int) ([]byte, error) {
	out, _, err := l.checkAndCompact(b, extraDepth)
	return out, err
}

// numberShape summarises the number literals of a scanned value, so that a
// caller can skip a pass that only numbers beyond it could concern.
type numberShape struct {
	// integersOnly: no literal has a fraction or an exponent.
	integersOnly bool
	// maxDigits is the most digits in the integer part of any literal.
	maxDigits int
}

// checkAndCompact is CheckAndCompact that also reports the shape of the
// value's numbers.
func (l Limits) checkAndCompact(b []byte, extraDepth int) ([]byte, numberShape, error) {
	l = l.WithDefaults()
	if int64(len(b)) > l.MaxBodyBytes {
		return nil, numberShape{}, Errorf(CodePayloadTooLarge, "the body is larger than %d bytes", l.MaxBodyBytes)
	}
	s := scanner{b: b, lim: l, maxDepth: l.MaxDepth + extraDepth, compact: true, numbers: numberShape{integersOnly: true}}
	s.kinds, s.counts = s.kindsBuf[:0], s.countsBuf[:0]
	if err := s.run(); err != nil {
		return nil, numberShape{}, err
	}
	if s.out == nil {
		return b, s.numbers, nil
	}
	return append(s.out, b[s.last:]...), s.numbers, nil
}

// scanStack is the nesting a scanner holds without growing its stack.
const scanStack = 16

type scanner struct {
	b        []byte
	i        int
	lim      Limits
	maxDepth int
	// stack holds, per open container, '{' or '[' and its member count.
	kinds  []byte
	counts []int
	// The stack's first levels, so that a typical document's scan
	// allocates once (the scanner).
	kindsBuf  [scanStack]byte
	countsBuf [scanStack]int

	// compact asks for the value without white space: out holds the bytes
	// kept before b[last:], and stays nil until the first white space.
	compact bool
	out     []byte
	last    int
	numbers numberShape

	// spans, when set, records the members of a top-level object
	// (CheckBody; a pointer, so that the other scans do not carry the
	// records); spaces counts the runs of white space seen, so that a span
	// knows whether it holds any.
	spans  *bodySpans
	spaces int
}

func (s *scanner) syntax(what string) error {
	return Errorf(CodeBadRequest, "not valid JSON: %s at byte %d", what, s.i)
}

func (s *scanner) space() {
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
			continue
		}
		break
	}
	if s.i > start {
		s.spaces++
		if s.compact {
			s.cut(start)
		}
	}
}

// cut drops b[start:s.i], white space, from the compacted output.
func (s *scanner) cut(start int) {
	if s.out == nil {
		s.out = make([]byte, 0, len(s.b)-(s.i-start)) // compacting never grows a value
	}
	s.out = append(s.out, s.b[s.last:start]...)
	s.last = s.i
}

// run walks the value with an explicit stack. After each value it decides,
// from the innermost open container, what may follow.
func (s *scanner) run() error {
	s.space()
	for {
		// Expect a value.
		if s.i >= len(s.b) {
			return s.syntax("unexpected end")
		}
		if s.spans != nil && len(s.kinds) == 1 && s.kinds[0] == '{' {
			s.spans.begin(s)
		}
		switch c := s.b[s.i]; {
		case c == '{' || c == '[':
			if len(s.kinds) >= s.maxDepth {
				return limitError("nesting deeper than the depth limit", s.lim.MaxDepth, s.i)
			}
			s.kinds = append(s.kinds, c)
			s.counts = append(s.counts, 0)
			s.i++
			s.space()
			if s.i < len(s.b) && (s.b[s.i] == '}' && c == '{' || s.b[s.i] == ']' && c == '[') {
				s.i++
				s.kinds, s.counts = s.kinds[:len(s.kinds)-1], s.counts[:len(s.counts)-1]
				break // an empty container is a complete value
			}
			if err := s.member(); err != nil {
				return err
			}
			continue
		case c == '"':
			if err := s.str(); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			if err := s.number(); err != nil {
				return err
			}
		case c == 't':
			if err := s.literal("true"); err != nil {
				return err
			}
		case c == 'f':
			if err := s.literal("false"); err != nil {
				return err
			}
		case c == 'n':
			if err := s.literal("null"); err != nil {
				return err
			}
		default:
			return s.syntax("unexpected character")
		}
		// A value is complete: close containers or move to the next member.
		for {
			if s.spans != nil && s.spans.open && len(s.kinds) == 1 {
				s.spans.end(s)
			}
			s.space()
			if len(s.kinds) == 0 {
				if s.i != len(s.b) {
					return s.syntax("data after the value")
				}
				return nil
			}
			if s.i >= len(s.b) {
				return s.syntax("unexpected end")
			}
			top := s.kinds[len(s.kinds)-1]
			c := s.b[s.i]
			if c == ',' {
				s.i++
				s.space()
				if err := s.member(); err != nil {
					return err
				}
				break
			}
			if top == '{' && c == '}' || top == '[' && c == ']' {
				s.i++
				s.kinds, s.counts = s.kinds[:len(s.kinds)-1], s.counts[:len(s.counts)-1]
				continue
			}
			return s.syntax("expected a comma or the end of the container")
		}
	}
}

// member starts the next member of the innermost container: it counts it
// and, in an object, reads its name and colon, leaving s.i at the value.
func (s *scanner) member() error {
	n := len(s.counts) - 1
	s.counts[n]++
	if s.counts[n] > s.lim.MaxMembers {
		return limitError("more members than the member limit", s.lim.MaxMembers, s.i)
	}
	if s.kinds[n] == '[' {
		return nil
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.syntax("expected a member name")
	}
	if err := s.str(); err != nil {
		return err
	}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return s.syntax("expected a colon")
	}
	s.i++
	s.space()
	return nil
}

func (s *scanner) str() error {
	start := s.i
	s.i++ // the opening quote
	for {
		// A run of plain ASCII (most of a string) is skipped in a tight
		// loop, and the length limit checked once after it, with the
		// verdict the per-byte check gives: the limit, unless the run ends
		// the input one byte before the limit would be passed there.
		b, j := s.b, s.i
		for j < len(b) {
			if c := b[j]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				break
			}
			j++
		}
		if j > s.i {
			if j-start-1 > s.lim.MaxStringBytes && (j < len(s.b) || j-start-2 > s.lim.MaxStringBytes) {
				return limitError("a string longer than the string limit", s.lim.MaxStringBytes, start)
			}
			s.i = j
		}
		if s.i >= len(s.b) {
			return s.syntax("unterminated string")
		}
		if s.i-start-1 > s.lim.MaxStringBytes {
			return limitError("a string longer than the string limit", s.lim.MaxStringBytes, start)
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return s.syntax("unterminated string")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) || !isHex4(s.b[s.i+2:s.i+6]) {
					return s.syntax("invalid \\u escape")
				}
				s.i += 6
			default:
				return s.syntax("invalid escape")
			}
		case c < 0x20:
			return s.syntax("control character in a string")
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				return s.syntax("invalid UTF-8")
			}
			s.i += size
		}
	}
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func (s *scanner) number() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	intStart := s.i
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.syntax("invalid number")
	}
	if n := s.i - intStart; n > s.numbers.maxDigits {
		s.numbers.maxDigits = n
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.numbers.integersOnly = false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.syntax("invalid number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.syntax("invalid number")
		}
	}
	if s.i-start > s.lim.MaxNumberBytes {
		return limitError("a number longer than the number limit", s.lim.MaxNumberBytes, start)
	}
	return nil
}

func (s *scanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.syntax("invalid literal")
	}
	s.i += len(word)
	return nil
}
