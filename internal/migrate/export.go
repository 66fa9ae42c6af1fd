package migrate

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/eventjson"
)

// ExportChain is report.json's account of an export's history.jsonl: what
// varplane.VerifyStore found in the store as the export read it (its
// counts, every scope's chain head and their ChainDigest, the value to
// anchor the export by), the scope root.json holds, and the SHA-256 of
// history.jsonl's bytes.
type ExportChain struct {
	varplane.StoreReport
	Root    varplane.Scope `json:"root"`
	History string         `json:"history"`
}

// Export writes every head of store into dir as a directory Publish
// accepts: root's head as root.json, every other head as
// scopes/<scope>.json, every scope's history as history.jsonl, and
// report.json with each file's digest, the schema of each head that names
// one, and the chain (ExportChain). dir must not exist or be empty. A root
// without a head, or a scope with a head that cannot be a file name (it
// holds "/" or "\", or starts with "."), is a *RejectedError and nothing is
// written.
//
// history.jsonl holds one event a line (the JSON of the file store's log,
// with seq, hash and the document where the store keeps it), the scopes in
// bytewise order and each scope's events in log order. The export verifies
// the store as it reads it (varplane.VerifyStore): a store whose chain is
// broken is not exported, and the error names the first broken link. The
// heads exported are the ones the histories leave active, so the files and
// history.jsonl agree even while servers commit meanwhile. VerifyExport
// checks an export without the store.
func Export(ctx context.Context, store varplane.Store, dir string, root varplane.Scope) (*Report, error) {
	if root == "" {
		root = DefaultRoot
	}
	if _, err := varplane.ParseScope(string(root)); err != nil {
		return nil, err
	}
	var bad problems
	switch entries, err := os.ReadDir(dir); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", dir, err)
	case len(entries) > 0:
		bad.addf("%s is not empty: export writes into a new or empty directory", dir)
	}
	scopes, err := store.Scopes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the scopes: %w", err)
	}
	heads := map[varplane.Scope]bool{}
	for _, sc := range scopes {
		st, err := store.State(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("read the head of %s: %w", sc, err)
		}
		heads[sc] = st.Head != nil
	}
	checkHeads(heads, root, &bad)
	if err := bad.err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, ScopesDir), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	x, err := writeHistory(ctx, store, filepath.Join(dir, HistoryFile))
	if err != nil {
		return nil, err
	}
	// The heads the histories leave, checked again: a head published or
	// deactivated between the two reads could change the answer.
	for sc := range heads {
		heads[sc] = false
	}
	for sc, h := range x.heads {
		heads[sc] = h.rev != ""
	}
	checkHeads(heads, root, &bad)
	if err := bad.err(); err != nil {
		return nil, fmt.Errorf("the store changed during the export (run it again into an empty directory): %w", err)
	}
	man := Manifest{Files: map[string]string{}, Schemas: map[string]SchemaNames{},
		Chain: &ExportChain{StoreReport: *x.report, Root: root, History: x.digest}}
	rep := &Report{Documents: []Document{}, Chain: man.Chain}
	for _, sc := range x.order {
		h := x.heads[sc]
		if h.rev == "" {
			continue
		}
		rec, err := store.Revision(ctx, sc, h.rev)
		if err != nil {
			return rep, fmt.Errorf("read revision %s of %s: %w", h.rev, sc, err)
		}
		rel := headFile(sc, root)
		data := append(append([]byte(nil), rec.Document...), '\n')
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(rel)), data, 0o600); err != nil {
			return rep, fmt.Errorf("write %s: %w", rel, err)
		}
		man.Files[rel] = fileDigest(data)
		if rec.SchemaID != "" {
			man.Schemas[rel] = SchemaNames{SchemaID: rec.SchemaID, SchemaVersion: rec.SchemaVersion}
		}
		rep.add(Document{Path: rel, Scope: sc, Status: StatusExported, Generation: h.gen, Revision: h.rev})
	}
	data, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return rep, fmt.Errorf("encode %s: %w", ReportFile, err)
	}
	// report.json last: a directory without it is refused by Publish, so an
	// export cut short is never mistaken for a whole one.
	if err := os.WriteFile(filepath.Join(dir, ReportFile), append(data, '\n'), 0o600); err != nil {
		return rep, fmt.Errorf("write %s: %w", ReportFile, err)
	}
	return rep, nil
}

// checkHeads adds the problems of exporting heads (scope → has a head): a
// root without one, a scope with one that cannot be a file name.
func checkHeads(heads map[varplane.Scope]bool, root varplane.Scope, bad *problems) {
	for sc, has := range heads {
		if has && sc != root && (strings.ContainsAny(string(sc), `/\`) || strings.HasPrefix(string(sc), ".")) {
			bad.addf("scope %s cannot be a file name (it holds / or \\, or starts with .)", sc)
		}
	}
	if !heads[root] {
		bad.addf("the root scope %s has no head (name the root with --root)", root)
	}
}

// headFile is the file that holds the head of scope in an export.
func headFile(scope, root varplane.Scope) string {
	if scope == root {
		return RootFile
	}
	return ScopesDir + "/" + string(scope) + ".json"
}

// activeHead is the head a history leaves: the revision of its last
// activation, unless a deactivation (or a cascade entry) came after it,
// and the generation of its last activation or deactivation.
type activeHead struct {
	rev varplane.Revision
	gen varplane.Generation
}

// headOf folds a scope's history into the head it leaves.
func headOf(hist []varplane.Event) activeHead {
	var h activeHead
	for i := range hist {
		switch ev := &hist[i]; ev.Kind {
		case varplane.EventActivated:
			h = activeHead{rev: ev.Revision, gen: ev.Generation}
		case varplane.EventDeactivated:
			h = activeHead{gen: ev.Generation}
		}
	}
	return h
}

// exported is what writeHistory read of a store.
type exported struct {
	report *varplane.StoreReport
	digest string // of history.jsonl's bytes
	heads  map[varplane.Scope]activeHead
	order  []varplane.Scope // the scopes, in the order written
}

// writeHistory verifies store (varplane.VerifyStore) and writes every
// history it reads to name as it goes: one traversal of the store.
func writeHistory(ctx context.Context, store varplane.Store, name string) (*exported, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", HistoryFile, err)
	}
	defer f.Close()
	h := sha256.New()
	t := &historyTee{Store: store, w: bufio.NewWriterSize(io.MultiWriter(f, h), 1<<16), out: &exported{heads: map[varplane.Scope]activeHead{}}}
	rep, err := varplane.VerifyStore(ctx, t)
	if err == nil {
		err = t.err
	}
	if err != nil {
		return nil, fmt.Errorf("export the history: %w", err)
	}
	if err := t.w.Flush(); err != nil {
		return nil, fmt.Errorf("write %s: %w", HistoryFile, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("write %s: %w", HistoryFile, err)
	}
	t.out.report = rep
	t.out.digest = digestOf(h)
	return t.out, nil
}

// digestOf is a file digest ("sha256:" and 64 lowercase hex digits) of
// what h hashed.
func digestOf(h hash.Hash) string {
	return canonical.DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// historyTee is a store whose History also writes what it returns to w.
type historyTee struct {
	varplane.Store
	w   *bufio.Writer
	out *exported
	buf []byte
	err error // the first write error
}

func (t *historyTee) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	hist, err := t.Store.History(ctx, scope)
	if err != nil {
		return nil, err
	}
	for i := range hist {
		t.buf = append(eventjson.AppendEvent(t.buf[:0], &hist[i]), '\n')
		if _, err := t.w.Write(t.buf); err != nil && t.err == nil {
			t.err = fmt.Errorf("write %s: %w", HistoryFile, err)
		}
	}
	t.out.heads[scope] = headOf(hist)
	t.out.order = append(t.out.order, scope)
	return hist, nil
}
