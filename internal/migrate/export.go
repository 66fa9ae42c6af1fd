package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/varplane/varplane"
)

// Export writes every head of store into dir as a directory Publish
// accepts: root's head as root.json, every other head as
// scopes/<scope>.json, and report.json with each file's digest and the
// schema of each head that names one. dir must not exist or be empty. A
// root without a head, or a scope that cannot be a file name (it holds "/"
// or "\", or starts with "."), is a *RejectedError and nothing is written.
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
	type file struct {
		rel  string
		head *varplane.Head
	}
	var files []file
	rootFound := false
	for _, sc := range scopes {
		st, err := store.State(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("read the head of %s: %w", sc, err)
		}
		if st.Head == nil {
			continue
		}
		rel := RootFile
		if sc == root {
			rootFound = true
		} else {
			if strings.ContainsAny(string(sc), `/\`) || strings.HasPrefix(string(sc), ".") {
				bad.addf("scope %s cannot be a file name (it holds / or \\, or starts with .)", sc)
				continue
			}
			rel = ScopesDir + "/" + string(sc) + ".json"
		}
		files = append(files, file{rel, st.Head})
	}
	if !rootFound {
		bad.addf("the root scope %s has no head (name the root with --root)", root)
	}
	if err := bad.err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, ScopesDir), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	man := Manifest{Files: map[string]string{}, Schemas: map[string]SchemaNames{}}
	rep := &Report{Documents: []Document{}}
	for _, f := range files {
		data := append(append([]byte(nil), f.head.Document...), '\n')
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(f.rel)), data, 0o600); err != nil {
			return rep, fmt.Errorf("write %s: %w", f.rel, err)
		}
		man.Files[f.rel] = fileDigest(data)
		if f.head.SchemaID != "" {
			man.Schemas[f.rel] = SchemaNames{SchemaID: f.head.SchemaID, SchemaVersion: f.head.SchemaVersion}
		}
		rep.add(Document{Path: f.rel, Scope: f.head.Scope, Status: StatusExported, Generation: f.head.Generation, Revision: f.head.Revision})
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
