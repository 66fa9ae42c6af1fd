package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/varplane/varplane"
)

// maxSchemaFile bounds the size of one schema file, so a stray large file in
// the directory fails the load instead of exhausting memory.
const maxSchemaFile = 8 << 20

// Registry maps schemaIds to compiled schemas. The zero value is an empty
// registry. It is safe for concurrent use.
type Registry struct {
	mu   sync.Mutex // serialises Add
	snap atomic.Pointer[map[string]*Schema]
}

var _ varplane.Validator = (*Registry)(nil)

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{} }

// Add compiles schema and registers it as id. It fails, naming id, when id
// is empty, already registered, or the schema does not compile (see
// Compile); the registry is then unchanged.
func (r *Registry) Add(id string, schema json.RawMessage) error {
	s, err := compileJSON(schema)
	if err != nil {
		return fmt.Errorf("schema %q: %w", id, err)
	}
	return r.put(id, s)
}

// put publishes a new snapshot holding s as id: readers never see a map
// being written.
func (r *Registry) put(id string, s *Schema) error {
	if id == "" {
		return errors.New("schema: empty schemaId")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.schemas()
	if _, dup := old[id]; dup {
		return fmt.Errorf("schema %q: already registered", id)
	}
	next := make(map[string]*Schema, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[id] = s
	r.snap.Store(&next)
	return nil
}

// schemas returns the current snapshot; callers must not modify it.
func (r *Registry) schemas() map[string]*Schema {
	if m := r.snap.Load(); m != nil {
		return *m
	}
	return nil
}

// Lookup returns the schema registered as id.
func (r *Registry) Lookup(id string) (*Schema, bool) {
	s, ok := r.schemas()[id]
	return s, ok
}

// IDs returns the registered schemaIds, sorted.
func (r *Registry) IDs() []string {
	m := r.schemas()
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Validate checks doc against the schema registered as schemaID (see
// Schema.Validate). It returns an error wrapping varplane.ErrUnknownSchema
// when no such schema is registered.
func (r *Registry) Validate(schemaID string, doc json.RawMessage) ([]varplane.Issue, error) {
	s, ok := r.Lookup(schemaID)
	if !ok {
		return nil, fmt.Errorf("%w: %q", varplane.ErrUnknownSchema, schemaID)
	}
	return s.Validate(doc)
}

// LoadDir returns a Registry holding every .json, .yaml and .yml file under
// dir (recursively; names starting with "." are skipped). A file's schemaId
// is its slash-separated path relative to dir without the extension. It
// fails, naming the file, on a file that cannot be read, parsed or compiled,
// and on two files that give the same schemaId; it fails with ctx's error
// when ctx ends during the load.
func LoadDir(ctx context.Context, dir string) (*Registry, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("schema: load directory: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("schema: load directory %s: not a directory", dir)
	}
	r, err := LoadFS(ctx, os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	return r, nil
}

// LoadFS is LoadDir over a file system, for schemas embedded in a binary;
// paths in its errors are relative to fsys.
func LoadFS(ctx context.Context, fsys fs.FS) (*Registry, error) {
	r := NewRegistry()
	source := map[string]string{} // schemaId → file, to name both sides of a clash
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("schema: %s: %w", p, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := d.Name()
		if p != "." && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		ext := path.Ext(name)
		switch ext {
		case ".json", ".yaml", ".yml":
		default:
			return nil
		}
		id := strings.TrimSuffix(p, ext)
		if prev, dup := source[id]; dup {
			return fmt.Errorf("schema: %s: schemaId %q is also defined by %s", p, id, prev)
		}
		s, err := loadFile(fsys, p, ext)
		if err != nil {
			return fmt.Errorf("schema: %s: %w", p, err)
		}
		if err := r.put(id, s); err != nil {
			return fmt.Errorf("schema: %s: %w", p, err)
		}
		source[id] = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func loadFile(fsys fs.FS, p, ext string) (*Schema, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSchemaFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSchemaFile {
		return nil, fmt.Errorf("larger than %d bytes", maxSchemaFile)
	}
	if ext == ".json" {
		return compileJSON(data)
	}
	doc, err := yamlToJSON(data)
	if err != nil {
		return nil, err
	}
	return compileJSON(doc)
}
