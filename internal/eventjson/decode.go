package eventjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/varplane/varplane"
)

// The decoder is hand-written for the same reason as the encoder: restart
// decodes every event of the file log, and a replica decodes every head it
// reads from a shared store; reflection-based decoding was the largest cost
// of both. It decodes what this package writes, and any encoding/json output
// of the same shapes, to the same values.

// Interner shares the strings that repeat across many decoded events
// (scopes, actors, schema ids), so that a replayed log holds one copy of
// each. It is bounded: past maxInterned strings, new ones are copied. An
// Interner is not safe for concurrent use; a nil *Interner copies every
// string.
type Interner struct {
	m map[string]string
}

// NewInterner returns an empty Interner.
func NewInterner() *Interner { return &Interner{m: make(map[string]string)} }

const (
	maxInterned    = 1 << 20
	maxInternedLen = 128
)

func (in *Interner) str(b []byte) string {
	if in == nil || len(b) > maxInternedLen {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}

// ErrSyntax is wrapped by every decoding error.
var ErrSyntax = errors.New("invalid stored JSON")

type decoder struct {
	b   []byte
	p   int
	in  *Interner
	tmp []byte
	// lazy leaves the document out of the event and records where it is
	// in b (docAt, docLen): replay keeps bodies on disk (bodies.go).
	lazy          bool
	docAt, docLen int
}

func (d *decoder) fail(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", ErrSyntax, d.p, fmt.Sprintf(format, args...))
}

// DecodeEvent decodes the JSON form of one event (a log line without its
// newline, or a stored event body) into ev, which is reset first. Unknown
// fields are skipped; a member of the event given twice is refused. Every byte
// slice of ev is freshly allocated (ev does not alias b).
func DecodeEvent(b []byte, ev *varplane.Event) error {
	return DecodeEventWith(b, ev, nil)
}

// DecodeEventWith is DecodeEvent sharing repeated strings through in (nil
// copies them all).
func DecodeEventWith(b []byte, ev *varplane.Event, in *Interner) error {
	d := decoder{b: b, in: in}
	return d.event(ev)
}

// DecodeEventLazy is DecodeEventWith without the document: it returns where
// the document is in b (docLen 0 when the event has none), for a reader that
// keeps documents where they are. The document's grammar is checked all the
// same.
func DecodeEventLazy(b []byte, ev *varplane.Event, in *Interner) (docAt, docLen int, err error) {
	d := decoder{b: b, in: in, lazy: true}
	err = d.event(ev)
	return d.docAt, d.docLen, err
}

// DecodeRecord decodes the JSON form of one revision record into rec,
// which is reset first, as DecodeEvent does an event.
func DecodeRecord(b []byte, rec *varplane.RevisionRecord) error {
	d := decoder{b: b}
	return d.record(rec)
}

func (d *decoder) event(ev *varplane.Event) error {
	*ev = varplane.Event{}
	// A member named twice is refused: varplane never writes one, and
	// readers disagree on which value counts (this one kept the last),
	// so a line edited by appending "actor":"someone" would read one way
	// here, under a chain that verifies, and another way elsewhere.
	var seen uint32
	return d.object(func(key []byte) error {
		if bit := eventMemberBit(key); bit != 0 {
			if seen&bit != 0 {
				return d.fail("member %q appears twice", key)
			}
			seen |= bit
		}
		return d.field(key, ev)
	})
}

// eventMemberBit is a bit of its own for each member an event has (0 for
// any other name, which the decoder skips).
func eventMemberBit(key []byte) uint32 {
	switch string(key) {
	case "kind":
		return 1 << 0
	case "scope":
		return 1 << 1
	case "revision":
		return 1 << 2
	case "document":
		return 1 << 3
	case "schemaId":
		return 1 << 4
	case "schemaVersion":
		return 1 << 5
	case "generation":
		return 1 << 6
	case "previousGeneration":
		return 1 << 7
	case "actor":
		return 1 << 8
	case "onBehalfOf":
		return 1 << 9
	case "reason":
		return 1 << 10
	case "idempotencyKey":
		return 1 << 11
	case "requestHash":
		return 1 << 12
	case "rejectionReason":
		return 1 << 13
	case "cascade":
		return 1 << 14
	case "timestamp":
		return 1 << 15
	case "unauthenticated":
		return 1 << 16
	case "seq":
		return 1 << 17
	case "hash":
		return 1 << 18
	case "rollbackOf":
		return 1 << 19
	}
	return 0
}

func (d *decoder) record(rec *varplane.RevisionRecord) error {
	*rec = varplane.RevisionRecord{}
	return d.object(func(key []byte) error { return d.recordField(key, rec) })
}

// object decodes the top-level object of b, handing each field's key to
// field with d at the field's value, and checks that nothing follows it.
func (d *decoder) object(field func(key []byte) error) error {
	d.ws()
	if !d.eat('{') {
		return d.fail("want an object")
	}
	d.ws()
	if d.eat('}') {
		return d.end()
	}
	for {
		d.ws()
		key, err := d.rawString()
		if err != nil {
			return err
		}
		d.ws()
		if !d.eat(':') {
			return d.fail("want ':'")
		}
		d.ws()
		if err := field(key); err != nil {
			return err
		}
		d.ws()
		if d.eat(',') {
			continue
		}
		if d.eat('}') {
			return d.end()
		}
		return d.fail("want ',' or '}'")
	}
}

func (d *decoder) end() error {
	d.ws()
	if d.p != len(d.b) {
		return d.fail("trailing data")
	}
	return nil
}

func (d *decoder) ws() {
	for d.p < len(d.b) {
		switch d.b[d.p] {
		case ' ', '\t', '\n', '\r':
			d.p++
		default:
			return
		}
	}
}

func (d *decoder) eat(c byte) bool {
	if d.p < len(d.b) && d.b[d.p] == c {
		d.p++
		return true
	}
	return false
}

func (d *decoder) null() bool {
	if len(d.b)-d.p >= 4 && string(d.b[d.p:d.p+4]) == "null" {
		d.p += 4
		return true
	}
	return false
}

func (d *decoder) field(key []byte, ev *varplane.Event) error {
	var err error
	switch string(key) {
	case "kind":
		var s []byte
		if s, err = d.strOrNull(); err == nil && s != nil {
			ev.Kind = kindOf(s, d.in)
		}
	case "scope":
		err = d.strField((*string)(&ev.Scope))
	case "revision":
		// Not interned: a digest names one revision, and the fold shares
		// the created record's string with every event naming it.
		err = d.strPlain((*string)(&ev.Revision))
	case "document":
		ev.Document, err = d.document()
	case "schemaId":
		err = d.strField(&ev.SchemaID)
	case "schemaVersion":
		err = d.strField(&ev.SchemaVersion)
	case "generation":
		if !d.null() {
			var g uint64
			g, err = d.uint()
			ev.Generation = varplane.Generation(g)
		}
	case "previousGeneration":
		if d.null() {
			ev.PreviousGeneration = nil
		} else {
			var g uint64
			if g, err = d.uint(); err == nil {
				ev.PreviousGeneration = varplane.GenerationPtr(varplane.Generation(g))
			}
		}
	case "actor":
		err = d.strField(&ev.Actor)
	case "onBehalfOf":
		err = d.strField(&ev.OnBehalfOf)
	case "reason":
		err = d.strField(&ev.Reason)
	case "idempotencyKey":
		err = d.strPlain(&ev.IdempotencyKey)
	case "requestHash":
		err = d.strPlain(&ev.RequestHash)
	case "rejectionReason":
		err = d.strPlain(&ev.RejectionReason)
	case "cascade":
		ev.Cascade, err = d.cascade()
	case "timestamp":
		err = d.timeField(&ev.Timestamp)
	case "unauthenticated":
		ev.Unauthenticated, err = d.boolOrNull()
	case "seq":
		if !d.null() {
			ev.Seq, err = d.uint()
		}
	case "hash":
		err = d.strPlain(&ev.Hash)
	case "rollbackOf":
		if !d.null() {
			var g uint64
			g, err = d.uint()
			ev.RollbackOf = varplane.Generation(g)
		}
	default:
		err = d.skipValue(1)
	}
	return err
}

// document validates the document at d.p and returns a copy of it, or, when
// d is lazy, nil and its place in d.docAt and d.docLen. A null document is
// nil, as encoding/json decodes it into a json.RawMessage.
func (d *decoder) document() (json.RawMessage, error) {
	start := d.p
	if err := d.skipValue(1); err != nil {
		return nil, err
	}
	if d.lazy {
		d.docAt, d.docLen = start, d.p-start
		return nil, nil
	}
	return append(json.RawMessage(nil), d.b[start:d.p]...), nil
}

// recordField decodes the value of one field of a revision record.
func (d *decoder) recordField(key []byte, rec *varplane.RevisionRecord) error {
	var err error
	switch string(key) {
	case "scope":
		err = d.strField((*string)(&rec.Scope))
	case "revision":
		err = d.strPlain((*string)(&rec.Revision))
	case "document":
		rec.Document, err = d.document()
	case "schemaId":
		err = d.strField(&rec.SchemaID)
	case "schemaVersion":
		err = d.strField(&rec.SchemaVersion)
	case "actor":
		err = d.strField(&rec.Actor)
	case "createdAt":
		err = d.timeField(&rec.CreatedAt)
	default:
		err = d.skipValue(1)
	}
	return err
}

// timeField decodes an RFC 3339 string (or null, which leaves *dst as it
// is).
func (d *decoder) timeField(dst *time.Time) error {
	s, err := d.strOrNull()
	if err != nil || s == nil {
		return err
	}
	if *dst, err = parseTime(s); err != nil {
		return d.fail("time: %v", err)
	}
	return nil
}

func kindOf(s []byte, in *Interner) varplane.EventKind {
	switch string(s) {
	case string(varplane.EventRevisionCreated):
		return varplane.EventRevisionCreated
	case string(varplane.EventActivated):
		return varplane.EventActivated
	case string(varplane.EventDeactivated):
		return varplane.EventDeactivated
	case string(varplane.EventRejected):
		return varplane.EventRejected
	}
	return varplane.EventKind(in.str(s))
}

// strField decodes a string (or null, which leaves *dst unchanged) through
// the interner.
func (d *decoder) strField(dst *string) error {
	s, err := d.strOrNull()
	if err == nil && s != nil {
		*dst = d.in.str(s)
	}
	return err
}

// strPlain is strField for values that rarely repeat.
func (d *decoder) strPlain(dst *string) error {
	s, err := d.strOrNull()
	if err == nil && s != nil {
		*dst = string(s)
	}
	return err
}

// strOrNull returns the unescaped bytes of a string (valid only until the
// next call), or nil for null.
func (d *decoder) strOrNull() ([]byte, error) {
	if d.null() {
		return nil, nil
	}
	s, err := d.rawString()
	if err != nil {
		return nil, err
	}
	if s == nil {
		s = []byte{}
	}
	return s, nil
}

// rawString decodes a string at d.p, unescaping into d.tmp when needed. The
// result is valid until the next call.
func (d *decoder) rawString() ([]byte, error) {
	if !d.eat('"') {
		return nil, d.fail("want a string")
	}
	start := d.p
	q := bytes.IndexByte(d.b[start:], '"')
	if q < 0 {
		return nil, d.fail("unterminated string")
	}
	s := d.b[start : start+q]
	ascii := true
	for i, c := range s {
		if c == '\\' {
			d.p = start + i
			return d.escapedString(start)
		}
		if c < 0x20 {
			d.p = start + i
			return nil, d.fail("control character in string")
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	d.p = start + q + 1
	if !ascii && !utf8.Valid(s) {
		return nil, d.fail("string is not valid UTF-8")
	}
	return s, nil
}

func (d *decoder) escapedString(start int) ([]byte, error) {
	out := append(d.tmp[:0], d.b[start:d.p]...)
	for d.p < len(d.b) {
		c := d.b[d.p]
		switch {
		case c == '"':
			d.p++
			d.tmp = out
			if !utf8.Valid(out) {
				return nil, d.fail("string is not valid UTF-8")
			}
			return out, nil
		case c < 0x20:
			return nil, d.fail("control character in string")
		case c != '\\':
			out = append(out, c)
			d.p++
			continue
		}
		d.p++
		if d.p >= len(d.b) {
			break
		}
		e := d.b[d.p]
		d.p++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, d.fail("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A pair, or U+FFFD for a lone surrogate (as encoding/json).
				save := d.p
				if d.eat('\\') && d.eat('u') {
					if r2, ok := d.hex4(); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
				}
				d.p = save
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, d.fail("bad escape")
		}
	}
	return nil, d.fail("unterminated string")
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.b)-d.p < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.p : d.p+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.p += 4
	return r, true
}

func (d *decoder) uint() (uint64, error) {
	start := d.p
	for d.p < len(d.b) && d.b[d.p] >= '0' && d.b[d.p] <= '9' {
		d.p++
	}
	digits := d.b[start:d.p]
	if len(digits) == 0 || (len(digits) > 1 && digits[0] == '0') {
		return 0, d.fail("want an unsigned integer")
	}
	if d.p < len(d.b) && (d.b[d.p] == '.' || d.b[d.p] == 'e' || d.b[d.p] == 'E') {
		return 0, d.fail("want an unsigned integer")
	}
	var n uint64
	for _, c := range digits {
		v := uint64(c - '0')
		if n > (1<<64-1-v)/10 {
			return 0, d.fail("integer overflows")
		}
		n = n*10 + v
	}
	return n, nil
}

func (d *decoder) cascade() ([]varplane.CascadeEntry, error) {
	if d.null() {
		return nil, nil
	}
	if !d.eat('[') {
		return nil, d.fail("cascade: want an array")
	}
	var out []varplane.CascadeEntry
	d.ws()
	if d.eat(']') {
		return out, nil
	}
	for {
		d.ws()
		var c varplane.CascadeEntry
		if !d.eat('{') {
			return nil, d.fail("cascade entry: want an object")
		}
		d.ws()
		if !d.eat('}') {
			for {
				d.ws()
				key, err := d.rawString()
				if err != nil {
					return nil, err
				}
				d.ws()
				if !d.eat(':') {
					return nil, d.fail("want ':'")
				}
				d.ws()
				switch string(key) {
				case "scope":
					err = d.strField((*string)(&c.Scope))
				case "generation":
					if !d.null() {
						var g uint64
						g, err = d.uint()
						c.Generation = varplane.Generation(g)
					}
				default:
					err = d.skipValue(3)
				}
				if err != nil {
					return nil, err
				}
				d.ws()
				if d.eat(',') {
					continue
				}
				if d.eat('}') {
					break
				}
				return nil, d.fail("want ',' or '}'")
			}
		}
		out = append(out, c)
		d.ws()
		if d.eat(',') {
			continue
		}
		if d.eat(']') {
			return out, nil
		}
		return nil, d.fail("want ',' or ']'")
	}
}

// maxLineDepth bounds the nesting of one stored value (a log line, an event
// body, a record): the deepest document any allowed configuration accepts,
// plus the envelope around it. The bound must
// never be below what the engine accepts, or a document that was
// acknowledged would make the next Open refuse the log; it exists only so
// that a hostile line cannot exhaust the stack.
const maxLineDepth = varplane.MaxDepthCeiling + varplane.EnvelopeDepth

// skipValue validates and skips one JSON value. depth is the number of
// containers of the line that enclose the value (1 for a field of the event
// object).
func (d *decoder) skipValue(depth int) error {
	if d.p >= len(d.b) {
		return d.fail("want a value")
	}
	switch c := d.b[d.p]; {
	case c == '"':
		return d.skipString()
	case c == '{':
		return d.skipContainer(depth, '}')
	case c == '[':
		return d.skipContainer(depth, ']')
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.skipNumber()
	}
	return d.fail("want a value")
}

// skipContainer validates and skips the object (end '}') or array (end
// ']') whose opening byte is at d.p: its members, each a key, ':' and a
// value in an object, and a value in an array.
func (d *decoder) skipContainer(depth int, end byte) error {
	if depth >= maxLineDepth {
		return d.fail("nested deeper than %d levels", maxLineDepth)
	}
	d.p++
	d.ws()
	if d.eat(end) {
		return nil
	}
	for {
		d.ws()
		if end == '}' {
			if err := d.skipString(); err != nil {
				return err
			}
			d.ws()
			if !d.eat(':') {
				return d.fail("want ':'")
			}
			d.ws()
		}
		if err := d.skipValue(depth + 1); err != nil {
			return err
		}
		d.ws()
		if d.eat(',') {
			continue
		}
		if d.eat(end) {
			return nil
		}
		return d.fail("want ',' or '%c'", end)
	}
}

func (d *decoder) literal(lit string) error {
	if len(d.b)-d.p >= len(lit) && string(d.b[d.p:d.p+len(lit)]) == lit {
		d.p += len(lit)
		return nil
	}
	return d.fail("bad literal")
}

// plainByte marks the bytes that may stand in a JSON string as they are:
// everything but the quote, the backslash and control characters.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (d *decoder) skipString() error {
	if !d.eat('"') {
		return d.fail("want a string")
	}
	for d.p < len(d.b) {
		// Documents are mostly long plain strings: run over ordinary bytes
		// four at a time before looking at the one that ends the run.
		b, p := d.b, d.p
		for p+4 <= len(b) && plainByte[b[p]] && plainByte[b[p+1]] && plainByte[b[p+2]] && plainByte[b[p+3]] {
			p += 4
		}
		for p < len(b) && plainByte[b[p]] {
			p++
		}
		d.p = p
		if d.p >= len(d.b) {
			break
		}
		c := d.b[d.p]
		switch {
		case c == '"':
			d.p++
			return nil
		case c < 0x20:
			return d.fail("control character in string")
		case c == '\\':
			d.p++
			if d.p >= len(d.b) {
				return d.fail("unterminated string")
			}
			switch d.b[d.p] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.p++
			case 'u':
				d.p++
				if _, ok := d.hex4(); !ok {
					return d.fail("bad \\u escape")
				}
			default:
				return d.fail("bad escape")
			}
			continue
		}
		d.p++
	}
	return d.fail("unterminated string")
}

func (d *decoder) digits() int {
	start := d.p
	for d.p < len(d.b) && d.b[d.p] >= '0' && d.b[d.p] <= '9' {
		d.p++
	}
	return d.p - start
}

func (d *decoder) skipNumber() error {
	d.eat('-')
	if d.eat('0') {
		// no more integer digits after a leading zero
	} else if d.digits() == 0 {
		return d.fail("bad number")
	}
	if d.eat('.') && d.digits() == 0 {
		return d.fail("bad number")
	}
	if d.eat('e') || d.eat('E') {
		if !d.eat('+') {
			d.eat('-')
		}
		if d.digits() == 0 {
			return d.fail("bad number")
		}
	}
	return nil
}

// parseTime parses an RFC 3339 timestamp, with a fast path for the UTC form
// the stores write (YYYY-MM-DDTHH:MM:SS[.fraction]Z).
func parseTime(s []byte) (time.Time, error) {
	if t, ok := parseUTC(s); ok {
		return t, nil
	}
	var t time.Time
	err := t.UnmarshalText(s)
	return t, err
}

func parseUTC(s []byte) (time.Time, bool) {
	if len(s) < 20 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	num := func(b []byte) (int, bool) {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(s[0:4])
	month, ok2 := num(s[5:7])
	day, ok3 := num(s[8:10])
	hour, ok4 := num(s[11:13])
	minute, ok5 := num(s[14:16])
	sec, ok6 := num(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	rest := s[19 : len(s)-1]
	if len(rest) > 0 {
		if rest[0] != '.' || len(rest) < 2 || len(rest) > 10 {
			return time.Time{}, false
		}
		frac, ok := num(rest[1:])
		if !ok {
			return time.Time{}, false
		}
		for range 10 - len(rest) {
			frac *= 10
		}
		nsec = frac
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// boolOrNull reads true, false or null (false, as encoding/json leaves a
// bool it is given null for).
func (d *decoder) boolOrNull() (bool, error) {
	switch {
	case d.null():
		return false, nil
	case len(d.b)-d.p >= 4 && string(d.b[d.p:d.p+4]) == "true":
		d.p += 4
		return true, nil
	}
	return false, d.literal("false")
}
