package migrate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/eventjson"
)

// maxHistoryLine bounds one line of history.jsonl: an event holds at most
// a document of MaxBodyCeiling bytes, and its other members are small.
const maxHistoryLine = varplane.MaxBodyCeiling + 1<<20

// VerifyExport checks an export directory end to end without its store,
// and returns what it found in history.jsonl: every scope's chain
// (varplane.VerifyStore over the file: links, cascade entries, documents
// against their revisions), the chain heads and their digest against the
// ones report.json records, history.jsonl's bytes against its digest
// there, and every head file against its digest and against the head its
// scope's history leaves (its revision and schema), with no head left
// without its file. The first problem is the error: a *varplane.ChainError
// naming the scope, the seq and what is wrong for a broken or missing link,
// a *RejectedError for a report.json that is not one, an error naming the
// file or the line otherwise.
//
// It reads history.jsonl twice (once to index it, once a scope at a time)
// and holds one scope's history at a time; a line longer than an event can
// be is refused.
func VerifyExport(ctx context.Context, dir string) (*varplane.StoreReport, error) {
	man, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	if man.Chain == nil {
		return nil, fmt.Errorf("%s has no chain: the directory was not written by an export that carries one", ReportFile)
	}
	ch := man.Chain
	if ch.Digest != varplane.ChainDigest(ch.Heads) {
		return nil, fmt.Errorf("%s: the chain digest %s is not the digest of its heads (%s)", ReportFile, ch.Digest, varplane.ChainDigest(ch.Heads))
	}
	f, err := os.Open(filepath.Join(dir, HistoryFile))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", HistoryFile, err)
	}
	defer f.Close()
	src, err := indexHistory(f, maxHistoryLine)
	if err != nil {
		return nil, err
	}
	src.kept = ch.Heads
	rep, err := varplane.VerifyStore(ctx, src)
	if err != nil {
		return rep, fmt.Errorf("%s: %w", HistoryFile, err)
	}
	switch {
	case !maps.Equal(rep.Heads, ch.Heads):
		// Each head report.json names is a link the history holds
		// (VerifyStore): the history goes on past one of them.
		for _, sc := range slices.Sorted(maps.Keys(rep.Heads)) {
			if ch.Heads[sc] != rep.Heads[sc] {
				return rep, &varplane.ChainError{Scope: sc, Seq: ch.Heads[sc].Seq + 1, Index: src.heads[sc].past,
					Problem: fmt.Sprintf("the history goes on past the chain head %s records (seq %d)", ReportFile, ch.Heads[sc].Seq)}
			}
		}
	case rep.Events != ch.Events || rep.Scopes != ch.Scopes || rep.Unchained != ch.Unchained:
		return rep, fmt.Errorf("%s: %d events of %d scopes (%d unchained), and %s records %d of %d (%d)",
			HistoryFile, rep.Events, rep.Scopes, rep.Unchained, ReportFile, ch.Events, ch.Scopes, ch.Unchained)
	case src.digest != ch.History:
		return rep, fmt.Errorf("%s: digest %s does not match %s in %s", HistoryFile, src.digest, ch.History, ReportFile)
	}
	return rep, verifyHeadFiles(dir, man, src.heads)
}

// verifyHeadFiles checks every file report.json lists against its digest
// and against the head its scope's history leaves, and that every head
// has its file.
func verifyHeadFiles(dir string, man *Manifest, heads map[varplane.Scope]headRecord) error {
	files := map[varplane.Scope]string{}
	for _, rel := range slices.Sorted(maps.Keys(man.Files)) {
		scope := man.Chain.Root
		if rel != RootFile {
			name, ok := cutScopesDir(rel)
			if ok {
				scope, ok = scopeOfFile(name)
			}
			if !ok {
				return fmt.Errorf("%s: listed in %s, and not %s or %s/<scope>.json", rel, ReportFile, RootFile, ScopesDir)
			}
		}
		files[scope] = rel
		data, err := readFile(filepath.Join(dir, filepath.FromSlash(rel)), varplane.MaxBodyCeiling+1)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if got := fileDigest(data); got != man.Files[rel] {
			return fmt.Errorf("%s: digest %s does not match %s in %s", rel, got, man.Files[rel], ReportFile)
		}
		h, ok := heads[scope]
		if !ok || h.rev == "" {
			return fmt.Errorf("%s: %s has no head in %s", rel, scope, HistoryFile)
		}
		if d, err := canonical.Digest(data); err != nil || varplane.Revision(d) != h.rev {
			return fmt.Errorf("%s: the document is not revision %s, the head of %s in %s", rel, h.rev, scope, HistoryFile)
		}
		if h.schema != nil && man.Schemas[rel] != *h.schema {
			return fmt.Errorf("%s: schema %+v in %s, and its revision was created with %+v", rel, man.Schemas[rel], ReportFile, *h.schema)
		}
	}
	for _, sc := range slices.Sorted(maps.Keys(heads)) {
		if heads[sc].rev != "" && files[sc] == "" {
			return fmt.Errorf("%s: the head of %s (revision %s) has no file", HistoryFile, sc, heads[sc].rev)
		}
	}
	return nil
}

// cutScopesDir returns the file name of a path in scopes/.
func cutScopesDir(rel string) (string, bool) {
	name, ok := strings.CutPrefix(rel, ScopesDir+"/")
	return name, ok && !strings.Contains(name, "/")
}

// headRecord is the head a scope's history leaves, with the schema its
// revision was created with as the export writes it (nil when the history
// holds no creation of it), and the index of its first event past the
// chain head report.json records.
type headRecord struct {
	activeHead
	schema *SchemaNames
	past   int
}

// span is where a scope's lines are in history.jsonl.
type span struct {
	offset int64
	line   int // of the first, counting from 1
	n      int
}

// historyFile is history.jsonl read as a varplane.HistoryReader: its
// scopes, their histories (read from the file one scope at a time), the
// chain heads report.json keeps apart from them, and the revisions the
// history of the scope read last holds.
type historyFile struct {
	f      io.ReaderAt
	limit  int
	spans  map[varplane.Scope]span
	kept   map[varplane.Scope]varplane.ChainHead
	digest string
	heads  map[varplane.Scope]headRecord
	// the scope read last and its revision-created events by revision
	cur     varplane.Scope
	created map[varplane.Revision]*varplane.Event
}

// indexHistory reads history.jsonl once: where each scope's lines are (a
// scope's lines must be together) and the digest of its bytes. A line
// longer than limit bytes is refused.
func indexHistory(f *os.File, limit int) (*historyFile, error) {
	x := &historyFile{f: f, limit: limit, spans: map[varplane.Scope]span{}, heads: map[varplane.Scope]headRecord{}}
	h := sha256.New()
	sc := newLineScanner(io.TeeReader(f, h), limit)
	var (
		last varplane.Scope
		ev   varplane.Event
	)
	for sc.Scan() {
		if err := eventjson.DecodeEvent(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s line %d: not an event: %w", HistoryFile, sc.line, err)
		}
		if !ev.Scope.Valid() {
			return nil, fmt.Errorf("%s line %d: scope %q is not a valid scope", HistoryFile, sc.line, ev.Scope)
		}
		s, seen := x.spans[ev.Scope]
		switch {
		case !seen:
			s = span{offset: sc.offset, line: sc.line}
		case ev.Scope != last:
			return nil, fmt.Errorf("%s line %d: scope %q again after line %d (an export writes each scope's events together)", HistoryFile, sc.line, ev.Scope, s.line+s.n-1)
		}
		s.n++
		x.spans[ev.Scope] = s
		last = ev.Scope
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("%s line %d: longer than %d bytes, more than an event can be", HistoryFile, sc.line+1, limit)
	} else if err != nil {
		return nil, fmt.Errorf("%s line %d: %w", HistoryFile, sc.line+1, err)
	}
	x.digest = digestOf(h)
	return x, nil
}

// Scopes lists the scopes of the file and those report.json keeps a head
// for (a scope whose every line was deleted shows there).
func (x *historyFile) Scopes(context.Context) ([]varplane.Scope, error) {
	out := slices.Collect(maps.Keys(x.spans))
	for sc := range x.kept {
		if _, ok := x.spans[sc]; !ok {
			out = append(out, sc)
		}
	}
	slices.Sort(out)
	return out, nil
}

// State reports the chain head report.json records for scope.
func (x *historyFile) State(_ context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	return &varplane.ScopeState{Scope: scope, Chain: x.kept[scope]}, nil
}

// History reads scope's lines.
func (x *historyFile) History(_ context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	s := x.spans[scope]
	hist := make([]varplane.Event, 0, s.n)
	sc := newLineScanner(io.NewSectionReader(x.f, s.offset, 1<<62), x.limit)
	sc.line = s.line - 1
	for len(hist) < s.n && sc.Scan() {
		var ev varplane.Event
		if err := eventjson.DecodeEvent(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s line %d: not an event: %w", HistoryFile, sc.line, err)
		}
		hist = append(hist, ev)
	}
	if err := sc.Err(); err != nil || len(hist) != s.n {
		return nil, fmt.Errorf("%s changed while it was read (line %d): %v", HistoryFile, sc.line, err)
	}
	x.cur, x.created = scope, map[varplane.Revision]*varplane.Event{}
	for i := range hist {
		if ev := &hist[i]; ev.Kind == varplane.EventRevisionCreated {
			x.created[ev.Revision] = ev
		}
	}
	h := headRecord{activeHead: headOf(hist), past: len(hist)}
	if c := x.created[h.rev]; c != nil {
		h.schema = &SchemaNames{}
		if c.SchemaID != "" {
			h.schema = &SchemaNames{SchemaID: c.SchemaID, SchemaVersion: c.SchemaVersion}
		}
	}
	for i := range hist {
		if hist[i].Seq == x.kept[scope].Seq+1 {
			h.past = i
		}
	}
	x.heads[scope] = h
	return hist, nil
}

// Revision answers from the history read last: the document of the
// revision's last revision-created event, or ErrReclaimed when that event
// holds none (the store had reclaimed its body).
func (x *historyFile) Revision(_ context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	ev := x.created[rev]
	switch {
	case scope != x.cur || ev == nil:
		return nil, varplane.ErrNotFound
	case len(ev.Document) == 0:
		return nil, varplane.ErrReclaimed
	}
	return &varplane.RevisionRecord{Scope: scope, Revision: rev, Document: ev.Document, SchemaID: ev.SchemaID,
		SchemaVersion: ev.SchemaVersion, Actor: ev.Actor, CreatedAt: ev.Timestamp}, nil
}

// lineScanner reads newline-terminated lines of a bounded length,
// counting them and the offset of the current one.
type lineScanner struct {
	*bufio.Scanner
	line   int
	offset int64 // of the current line
	next   int64 // of the line after it
}

func newLineScanner(r io.Reader, limit int) *lineScanner {
	s := &lineScanner{Scanner: bufio.NewScanner(r)}
	s.Buffer(make([]byte, 0, min(64<<10, limit)), limit)
	s.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return 0, nil, errors.New("the last line has no newline (the file was cut short)")
		}
		return 0, nil, nil
	})
	return s
}

// Scan advances to the next line.
func (s *lineScanner) Scan() bool {
	if !s.Scanner.Scan() {
		return false
	}
	s.line++
	s.offset = s.next
	s.next += int64(len(s.Bytes())) + 1
	return true
}
