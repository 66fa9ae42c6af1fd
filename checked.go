package varplane

import (
	"encoding/json"
	"sync"

	"github.com/varplane/varplane/canonical"
)

// CheckedBody is a request body that Limits.CheckBody has scanned: valid
// JSON within those limits. It remembers where the members of its top-level
// object lie and what they hold, so that a document decoded from one of
// them (Document) is not scanned again by the engine nor by a store that
// takes a CheckedDocument.
type CheckedBody struct {
	b     []byte
	lim   Limits // with defaults
	extra int    // the extraDepth of the scan
	spans bodySpans
}

// maxBodySpans is how many members of a body's top-level object CheckBody
// records; a member past them is simply not offered as a CheckedDocument
// (the engine then scans it itself).
const maxBodySpans = 12

type bodySpan struct {
	start, end int
	compact    bool
	numbers    numberShape
}

// bodySpans records the values of a top-level object's members while a
// scanner walks it.
type bodySpans struct {
	n    int
	s    [maxBodySpans]bodySpan
	open bool
	// At a span's start: the scanner's white space count, and its number
	// shape (merged back at the end, so that the body's shape stays whole).
	spaces int
	outer  numberShape
}

func (sp *bodySpans) begin(s *scanner) {
	sp.open = true
	sp.spaces = s.spaces
	sp.outer = s.numbers
	s.numbers = numberShape{integersOnly: true}
	if sp.n < maxBodySpans {
		sp.s[sp.n].start = s.i
	}
}

func (sp *bodySpans) end(s *scanner) {
	sp.open = false
	if sp.n < maxBodySpans {
		sp.s[sp.n] = bodySpan{start: sp.s[sp.n].start, end: s.i, compact: s.spaces == sp.spaces, numbers: s.numbers}
		sp.n++
	}
	s.numbers.integersOnly = s.numbers.integersOnly && sp.outer.integersOnly
	s.numbers.maxDigits = max(s.numbers.maxDigits, sp.outer.maxDigits)
}

// CheckBody is CheckJSON(b, extraDepth) that returns what it learnt about
// b: the CheckedBody whose Document hands a member of b's top-level object
// to the engine as already checked. b must not be modified afterwards (the
// documents it yields are parts of b). Errors as CheckJSON.
func (l Limits) CheckBody(b []byte, extraDepth int) (CheckedBody, error) {
	l = l.WithDefaults()
	if int64(len(b)) > l.MaxBodyBytes {
		return CheckedBody{}, Errorf(CodePayloadTooLarge, "the body is larger than %d bytes", l.MaxBodyBytes)
	}
	// The scanner and its records come from a pool (the scanner's stack
	// points into itself, so it lives on the heap: one allocation of about
	// a kilobyte per request otherwise); the result copies the records.
	sc := bodyScanners.Get().(*bodyScanner)
	*sc = bodyScanner{s: scanner{b: b, lim: l, maxDepth: l.MaxDepth + extraDepth, numbers: numberShape{integersOnly: true}}}
	s := &sc.s
	s.spans = &sc.spans
	s.kinds, s.counts = s.kindsBuf[:0], s.countsBuf[:0]
	err := s.run()
	cb := CheckedBody{b: b, lim: l, extra: extraDepth, spans: sc.spans}
	*sc = bodyScanner{} // drop b and a stack grown past the buffers
	bodyScanners.Put(sc)
	if err != nil {
		return CheckedBody{}, err
	}
	return cb, nil
}

// bodyScanner is CheckBody's scanner with the records it fills.
type bodyScanner struct {
	s     scanner
	spans bodySpans
}

var bodyScanners = sync.Pool{New: func() any { return new(bodyScanner) }}

// Document returns doc as a CheckedDocument when doc is the value of a
// member of the body's top-level object, the very bytes of the body (not a
// copy), and holds no white space: then it is valid JSON, compact, and
// within the limits the body was checked against. Otherwise it returns the
// zero CheckedDocument, which nothing accepts as checked.
func (cb *CheckedBody) Document(doc []byte) CheckedDocument {
	if len(doc) == 0 || len(cb.b) == 0 || cb.extra > 1 {
		return CheckedDocument{}
	}
	for _, sp := range cb.spans.s[:cb.spans.n] {
		if sp.end-sp.start == len(doc) && &cb.b[sp.start] == &doc[0] {
			if !sp.compact {
				return CheckedDocument{}
			}
			return CheckedDocument{doc: doc, lim: cb.lim, depth: cb.lim.MaxDepth + cb.extra - 1,
				short: sp.numbers.integersOnly && sp.numbers.maxDigits <= canonical.ShortIntegerDigits}
		}
	}
	return CheckedDocument{}
}

// CheckedDocument is a document known to be valid JSON without white space
// (compact), within Limits: a CheckedBody made one, and only the engine and
// the stores read it. A store may take a CheckedDocument's word for the
// document it holds (CheckedPublisher) instead of scanning it again. The
// zero value holds nothing and vouches for nothing.
type CheckedDocument struct {
	doc   json.RawMessage
	lim   Limits
	depth int  // the nesting the document was held to
	short bool // every number literal an integer of at most shortIntegerDigits digits
}

// Holds reports whether doc is the checked document itself: the same bytes
// in memory (same start, same length), not merely equal ones.
func (c CheckedDocument) Holds(doc []byte) bool {
	return len(c.doc) > 0 && len(doc) == len(c.doc) && &doc[0] == &c.doc[0]
}

// MaxDepth returns the nesting the document was checked against (0 for the
// zero CheckedDocument).
func (c CheckedDocument) MaxDepth() int {
	if len(c.doc) == 0 {
		return 0
	}
	return c.depth
}

// within reports whether c was checked against limits at least as strict
// as l, for the document's own bounds.
func (c CheckedDocument) within(l Limits) bool {
	return len(c.doc) > 0 && c.depth <= l.MaxDepth && c.lim.MaxStringBytes <= l.MaxStringBytes &&
		c.lim.MaxNumberBytes <= l.MaxNumberBytes && c.lim.MaxMembers <= l.MaxMembers &&
		int64(len(c.doc)) <= l.MaxBodyBytes
}
