// Package jsonpatch computes and applies RFC 6902 JSON Patches between two
// JSON documents: the one diff of the project (the CLI's diff and, later,
// the reviewed changes' server-side diff share it).
//
// Diff is deterministic: objects are walked in sorted key order, arrays
// index by index (a changed element is replaced or recursed into, extra
// elements are removed from the end backwards or added at the end), so the
// same two documents always give the same patch. It is not a minimal edit
// script (an insertion at the front of an array replaces every element
// after it); it is a correct one: Apply(from, Diff(from, to)) equals to.
//
// Numbers are compared and carried as their JSON text (1 and 1.0 differ),
// so no precision is lost through float64.
package jsonpatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/jsontext"
)

// The operations of RFC 6902.
const (
	OpAdd     = "add"
	OpRemove  = "remove"
	OpReplace = "replace"
	OpMove    = "move"
	OpCopy    = "copy"
	OpTest    = "test"
)

// Operation is one RFC 6902 operation. Value is set for add, replace and
// test (JSON null is the four bytes null, never omitted); From for move and
// copy. Paths are RFC 6901 JSON Pointers. Old, which is not part of the
// patch, is the value a remove or replace of DiffBounded takes away, when
// Bounds.Old asked for it (for a text form).
type Operation struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
	Old   json.RawMessage `json:"-"`
}

// Patch is an RFC 6902 document: operations applied in order.
type Patch []Operation

// Diff returns the patch that turns from into to; an empty (non-nil) patch
// when they are equal. It returns an error when either is not one JSON
// value.
func Diff(from, to []byte) (Patch, error) {
	return DiffBounded(context.Background(), from, to, Bounds{})
}

// Bounds bound the work and the patch of DiffBounded.
type Bounds struct {
	// MaxBytes bounds the patch's size, each operation counting its
	// path, its values (Value and Old) and OpCost bytes: about the size
	// of its JSON text, or of its text form. 0 is no bound.
	MaxBytes int64
	// Old asks for each remove's and replace's Old.
	Old bool
}

// OpCost is what an operation counts towards Bounds.MaxBytes beyond its
// path and values: its JSON's members and punctuation.
const OpCost = 48

// ErrTooLarge is DiffBounded's error for a patch past Bounds.MaxBytes.
var ErrTooLarge = errors.New("jsonpatch: the patch is larger than its bound")

// checkEvery is how many values the diff visits between two looks at its
// context.
const checkEvery = 1024

// DiffBounded is Diff in time linear in the size of from, to and the
// patch: each value of either document is visited once, and a path is
// written out only for an operation. It looks at ctx as it goes and
// returns ctx's error once ctx is done, and ErrTooLarge (wrapped) as soon
// as the patch passes b.MaxBytes.
func DiffBounded(ctx context.Context, from, to []byte, b Bounds) (Patch, error) {
	a, err := decode(from)
	if err != nil {
		return nil, fmt.Errorf("jsonpatch: from: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	y, err := decode(to)
	if err != nil {
		return nil, fmt.Errorf("jsonpatch: to: %w", err)
	}
	d := differ{ctx: ctx, bounds: b, patch: Patch{}}
	if err := d.diff(a, y); err != nil {
		return nil, err
	}
	return d.patch, nil
}

// Apply returns doc with patch applied, in order. Any failed operation
// (a missing path, a failed test, an index out of range) fails the whole
// patch and returns an error naming the operation; doc is not modified.
func Apply(doc []byte, patch Patch) ([]byte, error) {
	v, err := decode(doc)
	if err != nil {
		return nil, fmt.Errorf("jsonpatch: document: %w", err)
	}
	for i, op := range patch {
		if v, err = apply(v, op); err != nil {
			return nil, fmt.Errorf("jsonpatch: operation %d (%s %s): %w", i+1, op.Op, op.Path, err)
		}
	}
	return encode(v)
}

// Equal reports whether a and b are the same JSON value (object members in
// any order, numbers by their text). Invalid JSON is never equal.
func Equal(a, b []byte) bool {
	x, err := decode(a)
	if err != nil {
		return false
	}
	y, err := decode(b)
	return err == nil && equal(x, y)
}

// Get returns the value at pointer (RFC 6901) in doc, or an error when doc
// is not JSON or has nothing there.
func Get(doc []byte, pointer string) (json.RawMessage, error) {
	v, err := decode(doc)
	if err != nil {
		return nil, fmt.Errorf("jsonpatch: document: %w", err)
	}
	path, err := parsePointer(pointer)
	if err != nil {
		return nil, fmt.Errorf("jsonpatch: %w", err)
	}
	if v, err = get(v, path); err != nil {
		return nil, fmt.Errorf("jsonpatch: %s: %w", pointer, err)
	}
	return encode(v)
}

// AppendPointer appends the JSON Pointer token for key to path ("~" as
// "~0", "/" as "~1").
func AppendPointer(path, key string) string {
	return path + "/" + canonical.EscapeToken(key)
}

func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

func encode(v any) ([]byte, error) { return jsontext.Marshal(v) }

// differ walks two decoded documents. The path of the value it visits is
// kept as a stack of escaped tokens and joined only for an operation, so
// a deep document costs no path for what is unchanged.
type differ struct {
	ctx    context.Context
	bounds Bounds
	patch  Patch
	toks   []string
	size   int64 // of the patch so far, as Bounds.MaxBytes counts it
	steps  int
}

// path returns the JSON Pointer of the value visited.
func (d *differ) path() string {
	n := 0
	for _, t := range d.toks {
		n += len(t) + 1
	}
	var b strings.Builder
	b.Grow(n)
	for _, t := range d.toks {
		b.WriteByte('/')
		b.WriteString(t)
	}
	return b.String()
}

// emit appends op at the path visited, or at its member or element tok
// (an escaped token) when child, with value v when hasValue and, for a
// remove or replace when Bounds.Old, old.
func (d *differ) emit(op string, child bool, tok string, v any, hasValue bool, old any) error {
	if child {
		d.toks = append(d.toks, tok)
		defer func() { d.toks = d.toks[:len(d.toks)-1] }()
	}
	o := Operation{Op: op, Path: d.path()}
	var err error
	if hasValue {
		if o.Value, err = encode(v); err != nil {
			return err
		}
	}
	if d.bounds.Old && op != OpAdd {
		if o.Old, err = encode(old); err != nil {
			return err
		}
	}
	d.size += int64(len(o.Path)+len(o.Value)+len(o.Old)) + OpCost
	if d.bounds.MaxBytes > 0 && d.size > d.bounds.MaxBytes {
		return fmt.Errorf("%w (%d bytes)", ErrTooLarge, d.bounds.MaxBytes)
	}
	d.patch = append(d.patch, o)
	return nil
}

func (d *differ) diff(a, b any) error {
	if d.steps++; d.steps%checkEvery == 0 {
		if err := d.ctx.Err(); err != nil {
			return err
		}
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(x)+len(y))
		for k := range x {
			keys = append(keys, k)
		}
		for k := range y {
			if _, ok := x[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			av, inA := x[k]
			bv, inB := y[k]
			var err error
			switch {
			case !inB:
				err = d.emit(OpRemove, true, canonical.EscapeToken(k), nil, false, av)
			case !inA:
				err = d.emit(OpAdd, true, canonical.EscapeToken(k), bv, true, nil)
			default:
				d.toks = append(d.toks, canonical.EscapeToken(k))
				err = d.diff(av, bv)
				d.toks = d.toks[:len(d.toks)-1]
			}
			if err != nil {
				return err
			}
		}
		return nil
	case []any:
		y, ok := b.([]any)
		if !ok {
			break
		}
		n := min(len(x), len(y))
		for i := 0; i < n; i++ {
			d.toks = append(d.toks, strconv.Itoa(i))
			err := d.diff(x[i], y[i])
			d.toks = d.toks[:len(d.toks)-1]
			if err != nil {
				return err
			}
		}
		for i := len(x) - 1; i >= n; i-- {
			if err := d.emit(OpRemove, true, strconv.Itoa(i), nil, false, x[i]); err != nil {
				return err
			}
		}
		for i := n; i < len(y); i++ {
			if err := d.emit(OpAdd, true, "-", y[i], true, nil); err != nil {
				return err
			}
		}
		return nil
	}
	if equal(a, b) {
		return nil
	}
	return d.emit(OpReplace, false, "", b, true, a)
}

func equal(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

// parsePointer splits an RFC 6901 pointer into its unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("path %q does not start with /", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		tok, ok := canonical.UnescapeToken(t)
		if !ok {
			return nil, fmt.Errorf("path %q has a bad ~ escape", p)
		}
		toks[i] = tok
	}
	return toks, nil
}

func apply(doc any, op Operation) (any, error) {
	path, err := parsePointer(op.Path)
	if err != nil {
		return nil, err
	}
	value := func() (any, error) {
		if op.Value == nil {
			return nil, fmt.Errorf("value is missing")
		}
		return decode(op.Value)
	}
	switch op.Op {
	case OpAdd:
		v, err := value()
		if err != nil {
			return nil, err
		}
		return put(doc, path, v, false)
	case OpReplace:
		v, err := value()
		if err != nil {
			return nil, err
		}
		return put(doc, path, v, true)
	case OpRemove:
		doc, _, err := take(doc, path)
		return doc, err
	case OpTest:
		v, err := value()
		if err != nil {
			return nil, err
		}
		cur, err := get(doc, path)
		if err != nil {
			return nil, err
		}
		if !equal(cur, v) {
			return nil, fmt.Errorf("test failed")
		}
		return doc, nil
	case OpMove, OpCopy:
		from, err := parsePointer(op.From)
		if err != nil {
			return nil, err
		}
		var v any
		if op.Op == OpMove {
			if len(path) > len(from) && strings.HasPrefix(op.Path, op.From+"/") {
				return nil, fmt.Errorf("cannot move a value into itself")
			}
			if doc, v, err = take(doc, from); err != nil {
				return nil, err
			}
		} else {
			if v, err = get(doc, from); err != nil {
				return nil, err
			}
			v = clone(v)
		}
		return put(doc, path, v, false)
	}
	return nil, fmt.Errorf("unknown op %q", op.Op)
}

func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = clone(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = clone(e)
		}
		return s
	}
	return v
}

func index(tok string, n int, end bool) (int, error) {
	if end && tok == "-" {
		return n, nil
	}
	if tok == "" || (len(tok) > 1 && tok[0] == '0') || strings.Trim(tok, "0123456789") != "" {
		return 0, fmt.Errorf("array index %q is not a number", tok)
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i > n || (!end && i == n) {
		return 0, fmt.Errorf("array index %s is out of range", tok)
	}
	return i, nil
}

func get(doc any, path []string) (any, error) {
	for _, tok := range path {
		switch x := doc.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, fmt.Errorf("member %q does not exist", tok)
			}
			doc = v
		case []any:
			i, err := index(tok, len(x), false)
			if err != nil {
				return nil, err
			}
			doc = x[i]
		default:
			return nil, fmt.Errorf("%q: not an object or array", tok)
		}
	}
	return doc, nil
}

// put adds v at path (replace: the location must exist) and returns the new
// document; containers on the way are rebuilt, never mutated, so a failed
// patch leaves the input as it was.
func put(doc any, path []string, v any, replace bool) (any, error) {
	if len(path) == 0 {
		return v, nil // the root always exists: add and replace set it
	}
	tok, rest := path[0], path[1:]
	switch x := doc.(type) {
	case map[string]any:
		m := make(map[string]any, len(x)+1)
		for k, e := range x {
			m[k] = e
		}
		cur, ok := x[tok]
		if len(rest) > 0 || replace {
			if !ok {
				return nil, fmt.Errorf("member %q does not exist", tok)
			}
		}
		if len(rest) == 0 {
			m[tok] = v
			return m, nil
		}
		nv, err := put(cur, rest, v, replace)
		if err != nil {
			return nil, err
		}
		m[tok] = nv
		return m, nil
	case []any:
		last := len(rest) == 0
		i, err := index(tok, len(x), last && !replace)
		if err != nil {
			return nil, err
		}
		s := make([]any, 0, len(x)+1)
		switch {
		case !last:
			nv, err := put(x[i], rest, v, replace)
			if err != nil {
				return nil, err
			}
			s = append(append(append(s, x[:i]...), nv), x[i+1:]...)
		case replace:
			s = append(append(append(s, x[:i]...), v), x[i+1:]...)
		default:
			s = append(append(append(s, x[:i]...), v), x[i:]...)
		}
		return s, nil
	}
	return nil, fmt.Errorf("%q: not an object or array", tok)
}

// take removes the value at path and returns the new document and the
// value.
func take(doc any, path []string) (any, any, error) {
	if len(path) == 0 {
		return nil, nil, fmt.Errorf("cannot remove the whole document")
	}
	tok, rest := path[0], path[1:]
	switch x := doc.(type) {
	case map[string]any:
		cur, ok := x[tok]
		if !ok {
			return nil, nil, fmt.Errorf("member %q does not exist", tok)
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = e
		}
		if len(rest) == 0 {
			delete(m, tok)
			return m, cur, nil
		}
		nv, taken, err := take(cur, rest)
		if err != nil {
			return nil, nil, err
		}
		m[tok] = nv
		return m, taken, nil
	case []any:
		i, err := index(tok, len(x), false)
		if err != nil {
			return nil, nil, err
		}
		s := make([]any, 0, len(x))
		if len(rest) == 0 {
			return append(append(s, x[:i]...), x[i+1:]...), x[i], nil
		}
		nv, taken, err := take(x[i], rest)
		if err != nil {
			return nil, nil, err
		}
		return append(append(append(s, x[:i]...), nv), x[i+1:]...), taken, nil
	}
	return nil, nil, fmt.Errorf("%q: not an object or array", tok)
}

// Line renders one operation for people, the one way every text form of a
// patch does (varplane diff, the control API's format=text, the console):
// "+ path: value" (added), "- path: old" (removed), "~ path: old ARROW
// value" (replaced), where old is the value the operation removes or
// replaces, root names the path of the whole document and arrow is "->"
// or "→".
func Line(op, path string, old, value []byte, root, arrow string) string {
	if path == "" {
		path = root
	}
	switch op {
	case OpAdd:
		return "+ " + path + ": " + string(value)
	case OpRemove:
		return "- " + path + ": " + string(old)
	}
	return "~ " + path + ": " + string(old) + " " + arrow + " " + string(value)
}
