package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
)

// Ceilings are the most permissive document limits a deployment may
// configure. Every store must read back whatever they allow.
var Ceilings = varplane.Limits{
	MaxBodyBytes:   varplane.MaxBodyCeiling,
	MaxDepth:       varplane.MaxDepthCeiling,
	MaxStringBytes: varplane.MaxBodyCeiling,
	MaxNumberBytes: varplane.MaxBodyCeiling,
	MaxMembers:     varplane.MaxBodyCeiling,
}

// ceilingString is the repeated text of the long string of CeilingDocument:
// every escape JSON has, both spellings of non-ASCII text, a surrogate pair,
// and the characters encoding/json would HTML-escape ("<", ">", "&", raw
// U+2028), which a store must keep as they are.
const ceilingString = `plain ASCII 0123456789 \"quoted\" back\\slash \/ \b\f\n\r\t \u0000\u001F\u007f ` +
	`\u00e9 é ü 日本語 ключ 😀 \ud83d\ude00 <script>&amp;</script> ` + "\u2028\u2029" + ` \u2028 | `

// ceilingNumbers are long numbers whose text canonical JSON keeps, so an
// engine accepts them as they are.
var ceilingNumbers = []string{
	"-1.7976931348623157e+308", "2.2250738585072014e-308", "5e-324", "9007199254740991",
	"-9007199254740991", "0.30000000000000004", "123456789.12345679", "-0", "1.5e+300",
}

// CeilingDocument returns the document the conformance suite stores at the
// ceilings: compact, exactly MaxDepthCeiling levels deep (its "deep" member
// is MaxDepthCeiling-1 levels of alternating objects and arrays), with one
// string longer than the file store's 1 MiB read buffer, objects and arrays
// with more members than the default member limit, and long numbers. It is
// a few MiB, not MaxBodyCeiling: no store's reader bounds a line, a record
// or a string, so beyond the read buffer a larger document exercises no
// other path, and the case runs on every store on every test run.
func CeilingDocument() json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"long":"`)
	for b.Len() < 3<<19 { // 1.5 MiB
		b.WriteString(ceilingString)
	}
	b.WriteString(`","members":{`)
	const members = 2*varplane.DefaultMaxMembers + 1
	for i := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"m%05d":%s`, i, ceilingNumbers[i%len(ceilingNumbers)])
	}
	b.WriteString(`},"numbers":[`)
	for i := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(ceilingNumbers[i%len(ceilingNumbers)])
	}
	b.WriteString(`],"deep":`)
	b.Write(deepValue(varplane.MaxDepthCeiling - 1))
	b.WriteByte('}')
	return b.Bytes()
}

// deepValue returns a compact value exactly levels deep, alternating objects
// and arrays, each level with scalar siblings of its nested member.
func deepValue(levels int) []byte {
	var pre, post []byte
	for i := range levels {
		if i%2 == 0 {
			pre = append(pre, `{"n":-1.5e-300,"s":"é\u00e9\n","d":`...)
			post = append(post, '}')
		} else {
			pre = append(pre, `[true,null,1,`...)
			post = append(post, ']')
		}
	}
	pre = append(pre, `"the bottom \"\\ 😀"`...)
	for i := len(post) - 1; i >= 0; i-- {
		pre = append(pre, post[i])
	}
	return pre
}

// failer is what the checks need of a *testing.T or a *rapid.T.
type failer interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// checkAccepted fails t unless doc is what an engine configured at the
// ceilings accepts and stores as it is: within Ceilings, compact, and with
// numbers canonical JSON keeps.
func checkAccepted(t failer, doc []byte) {
	t.Helper()
	if err := Ceilings.CheckJSON(doc, 0); err != nil {
		t.Fatalf("the test document is beyond the ceilings: %v", err)
	}
	var c bytes.Buffer
	if err := json.Compact(&c, doc); err != nil || !bytes.Equal(c.Bytes(), doc) {
		t.Fatalf("the test document is not compact JSON (%v)", err)
	}
}

// wantDocument checks, byte for byte, what s answers for doc stored as rev
// in scope: its revision record, its revision-created event and, when
// active, its head.
func wantDocument(t failer, s varplane.Store, scope varplane.Scope, rev varplane.Revision, doc []byte, active bool) {
	t.Helper()
	ctx := context.Background()
	rec, err := s.Revision(ctx, scope, rev)
	if err != nil {
		t.Fatalf("Revision %s of %s: %v", rev, scope, err)
	}
	if !bytes.Equal(rec.Document, doc) {
		t.Errorf("revision record of %s: document differs from what was stored (%d bytes, want %d; first difference at byte %d)",
			scope, len(rec.Document), len(doc), firstDiff(rec.Document, doc))
	}
	hist, err := s.History(ctx, scope)
	if err != nil {
		t.Fatalf("History of %s: %v", scope, err)
	}
	if len(hist) == 0 || hist[0].Kind != varplane.EventRevisionCreated {
		t.Fatalf("history of %s = %s, want a revision-created event first", scope, kinds(hist))
	}
	if !bytes.Equal(hist[0].Document, doc) {
		t.Errorf("revision-created event of %s: document differs (%d bytes, want %d; first difference at byte %d)",
			scope, len(hist[0].Document), len(doc), firstDiff(hist[0].Document, doc))
	}
	if !active {
		return
	}
	st, err := s.State(ctx, scope)
	if err != nil {
		t.Fatalf("State of %s: %v", scope, err)
	}
	if st.Head == nil || st.Head.Revision != rev {
		t.Fatalf("state of %s has no head %s", scope, rev)
	}
	if !bytes.Equal(st.Head.Document, doc) {
		t.Errorf("head of %s: document differs (%d bytes, want %d; first difference at byte %d)",
			scope, len(st.Head.Document), len(doc), firstDiff(st.Head.Document, doc))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// testDocumentAtTheCeilings stores the deepest and largest document an engine
// configured at the ceilings accepts and reads it back byte for byte, also
// after a restart: a store whose reader refused it would lose an
// acknowledged revision on the next start.
func testDocumentAtTheCeilings(t *testing.T, h Harness) {
	doc := CeilingDocument()
	checkAccepted(t, doc)
	// It is the deepest: one more level is refused.
	if err := Ceilings.CheckJSON(append(append([]byte("["), doc...), ']'), 0); err == nil {
		t.Fatal("a document one level deeper than the ceiling document is accepted: it is not at the depth ceiling")
	}
	if err := canonical.SafeNumbers(doc); err != nil {
		t.Fatalf("the ceiling document has numbers canonical JSON changes: %v", err)
	}
	const scope = varplane.Scope("ceiling.doc")
	s := h.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	rev := mustCreate(t, s, scope, doc)
	mustActivate(t, s, scope, rev, 0)
	wantDocument(t, s, scope, rev, doc, true)
	if h.Reopen == nil {
		return
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	wantDocument(t, s, scope, rev, doc, true)
}

// stored is one document the round-trip property committed.
type stored struct {
	scope  varplane.Scope
	rev    varplane.Revision
	doc    []byte
	active bool
}

// testDocumentRoundTrip is the property that whatever the decoder accepts at
// the ceilings round-trips byte for byte through the store: generated JSON
// documents (any depth up to the ceiling, strings with every escape and
// spelling, lone surrogates, arbitrary number text, empty and repeated
// members) are read back as they were given, and, when the store can
// restart, again after a restart. Every check commits to one store, each
// in a scope of its own; the restart happens once, after the checks.
func testDocumentRoundTrip(t *testing.T, h Harness) {
	s := h.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	var all []stored
	rapid.Check(t, func(rt *rapid.T) {
		doc := genDocument(rt)
		checkAccepted(rt, doc)
		st := stored{scope: varplane.Scope("prop.d" + strconv.Itoa(len(all))), doc: doc}
		ev := CreatedEvent(st.scope, doc)
		if err := s.Append(ctx, ev, 0); err != nil {
			rt.Fatalf("create a revision of %d bytes: %v", len(doc), err)
		}
		st.rev = ev.Revision
		if rapid.Bool().Draw(rt, "activate") {
			if err := s.Append(ctx, ActivatedEvent(st.scope, st.rev, 0), 0); err != nil {
				rt.Fatalf("activate: %v", err)
			}
			st.active = true
		}
		all = append(all, st)
		wantDocument(rt, s, st.scope, st.rev, doc, st.active)
	})
	if h.Reopen == nil || t.Failed() {
		return
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	for _, st := range all {
		wantDocument(t, s, st.scope, st.rev, st.doc, st.active)
	}
}

// genDocument draws a compact JSON document within Ceilings. Its depth is
// drawn up to MaxDepthCeiling; one member of each container continues to
// that depth while the others stay shallow, so that deep documents stay
// small.
func genDocument(t *rapid.T) []byte {
	depth := rapid.IntRange(0, varplane.MaxDepthCeiling).Draw(t, "depth")
	return appendValue(t, nil, depth)
}

// appendValue appends a value exactly depth levels deep.
func appendValue(t *rapid.T, b []byte, depth int) []byte {
	if depth == 0 {
		switch rapid.IntRange(0, 3).Draw(t, "scalar") {
		case 0:
			return appendGenString(t, b)
		case 1:
			return append(b, rapid.StringMatching(`-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,4})?`).Draw(t, "number")...)
		default:
			return append(b, rapid.SampledFrom([]string{"true", "false", "null"}).Draw(t, "literal")...)
		}
	}
	object := rapid.Bool().Draw(t, "object")
	lo := 1
	if depth == 1 {
		lo = 0 // an empty container is one level deep
	}
	hi := 4
	if depth > 16 {
		hi = 2 // deep documents stay small: most levels have one sibling at most
	}
	n := rapid.IntRange(lo, hi).Draw(t, "members")
	spine := rapid.IntRange(0, max(n-1, 0)).Draw(t, "spine")
	opening, closing := byte('['), byte(']')
	if object {
		opening, closing = '{', '}'
	}
	b = append(b, opening)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		if object {
			b = appendGenString(t, b)
			b = append(b, ':')
		}
		d := depth - 1
		if i != spine {
			d = rapid.IntRange(0, min(d, 1)).Draw(t, "shallow")
		}
		b = appendValue(t, b, d)
	}
	return append(b, closing)
}

// specialRunes are the characters a JSON string must escape or that
// encoders treat specially.
var specialRunes = []rune{'"', '\\', '/', '\b', '\f', '\n', '\r', '\t', 0, 0x1f, 0x7f, '<', '>', '&', '\u2028', '\u2029', 'é', '日', '😀', utf8.RuneError}

// appendGenString appends a JSON string drawn from any characters, each
// spelled one of the ways JSON allows (as it is, short escape, \u escape in
// either case, surrogate pair), with an occasional lone surrogate escape.
func appendGenString(t *rapid.T, b []byte) []byte {
	runes := rapid.SliceOfN(rapid.OneOf(rapid.Rune(), rapid.SampledFrom(specialRunes)), 0, 10).Draw(t, "runes")
	b = append(b, '"')
	for _, r := range runes {
		style := rapid.IntRange(0, 3).Draw(t, "spelling")
		mustEscape := r == '"' || r == '\\' || r < 0x20
		switch {
		case style == 3 && r < 0x10000:
			b = appendU(b, r, rapid.Bool().Draw(t, "upper"))
		case style == 3:
			hi, lo := utf16.EncodeRune(r)
			b = appendU(appendU(b, hi, false), lo, true)
		case style == 2 && strings.ContainsRune("\"\\/\b\f\n\r\t", r):
			b = append(b, '\\', map[rune]byte{'"': '"', '\\': '\\', '/': '/', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}[r])
		case mustEscape:
			b = appendU(b, r, false)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	if rapid.IntRange(0, 15).Draw(t, "lone surrogate") == 0 {
		b = append(b, rapid.SampledFrom([]string{`\ud800`, `\uDBFF`, `\udc00`, `\uDFFF`}).Draw(t, "surrogate")...)
	}
	return append(b, '"')
}

func appendU(b []byte, r rune, upper bool) []byte {
	hex := fmt.Sprintf(`\u%04x`, r)
	if upper {
		hex = `\u` + strings.ToUpper(hex[2:])
	}
	return append(b, hex...)
}
