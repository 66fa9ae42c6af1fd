package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/wire"
)

// PublishOptions configure Publish.
type PublishOptions struct {
	// Root is the scope root.json is published as (DefaultRoot when empty).
	Root varplane.Scope
	// Resume skips documents whose scope already serves them identically
	// (same revision, schemaId and schemaVersion) instead of stopping.
	Resume bool
	// Actor is recorded as the actor of every publish ("migrate" when empty).
	Actor string
	// Owned are the subsystems that own scopes of the store (the access
	// control's principals): a document of an owned scope is checked by its
	// owner before anything is written, and published in the owner's name.
	// The tool writes the store directly and is trusted with every scope,
	// owned ones included.
	Owned []Owned
}

// Owned is a subsystem that owns scopes: Owner is what it registers with
// the engine (varplane.Options.Owners), Check refuses a document it could
// not read back (nil accepts every document the engine accepts).
type Owned struct {
	Owner varplane.Owner
	Check func(doc []byte) error
}

// ownerOf returns the owner of scope among opts.Owned, or nil.
func (opts *PublishOptions) ownerOf(scope varplane.Scope) *Owned {
	for i := range opts.Owned {
		if opts.Owned[i].Owner.Owns(scope) {
			return &opts.Owned[i]
		}
	}
	return nil
}

// planned is one document that passed every check.
type planned struct {
	path     string
	scope    varplane.Scope
	doc      json.RawMessage
	schema   SchemaNames
	revision varplane.Revision
	expected varplane.Generation
	skip     bool
}

// Publish publishes the documents of dir through e, root.json first, then
// every scopes/ document in scope order. Before anything is written it
// checks every file against report.json, converts YAML (wire.YAMLToJSON),
// validates every document as the engine would (schemas included, and the
// access scope's document by its decoder) and reads every head: a scope
// that already has a head stops the run unless opts.Resume is set and it
// serves the same document. Any problem is a *RejectedError listing them
// all, and nothing is written. A publish that fails once writing has begun
// (a head published meanwhile, the store down) stops the run with that
// error: what was published stays, and a run with Resume continues it.
func Publish(ctx context.Context, e *varplane.Engine, dir string, opts PublishOptions) (*Report, error) {
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	if _, err := varplane.ParseScope(string(opts.Root)); err != nil {
		return nil, err
	}
	if opts.Actor == "" {
		opts.Actor = "migrate"
	}
	plan, err := check(ctx, e, dir, opts)
	if err != nil {
		return nil, err
	}
	rep := &Report{Documents: []Document{}}
	for _, p := range plan {
		if p.skip {
			rep.add(Document{Path: p.path, Scope: p.scope, Status: StatusSkipped, Revision: p.revision})
			continue
		}
		res, err := e.Publish(ctx, varplane.PublishRequest{
			Scope: p.scope, Document: p.doc, SchemaID: p.schema.SchemaID, SchemaVersion: p.schema.SchemaVersion,
			ExpectedGeneration: p.expected, Actor: opts.Actor, Owner: ownerName(opts.ownerOf(p.scope)),
			Reason: "migrate publish " + p.path,
		})
		if err != nil {
			return rep, fmt.Errorf("publish %s as %s: %w", p.path, p.scope, err)
		}
		rep.add(Document{Path: p.path, Scope: p.scope, Status: StatusPublished, Generation: res.Generation, Revision: res.Revision})
	}
	return rep, nil
}

// ownerName names the owner a publish writes as ("" for a scope nobody
// owns).
func ownerName(o *Owned) string {
	if o == nil {
		return ""
	}
	return o.Owner.Name
}

// check runs every check of Publish and returns the plan, root first.
func check(ctx context.Context, e *varplane.Engine, dir string, opts PublishOptions) ([]planned, error) {
	var bad problems
	man, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	files, err := listDocuments(dir, &bad)
	if err != nil {
		return nil, err
	}
	if _, ok := files[RootFile]; ok {
		files[RootFile] = opts.Root
	} else {
		bad.addf("%s is missing (required: the root document, published as %s)", RootFile, opts.Root)
	}
	for rel := range man.Files {
		if _, ok := files[rel]; !ok {
			bad.addf("%s: listed in %s but not in the directory", rel, ReportFile)
		}
	}
	for rel := range man.Schemas {
		if _, ok := man.Files[rel]; !ok {
			bad.addf("%s: has a schema in %s but no digest", rel, ReportFile)
		}
	}
	rels := make([]string, 0, len(files))
	for rel := range files {
		rels = append(rels, rel)
	}
	// Root first, then the scopes in scope order.
	sort.Slice(rels, func(i, j int) bool {
		if (rels[i] == RootFile) != (rels[j] == RootFile) {
			return rels[i] == RootFile
		}
		return files[rels[i]] < files[rels[j]]
	})
	byScope := map[varplane.Scope]string{}
	var plan []planned
	for _, rel := range rels {
		scope := files[rel]
		if other, dup := byScope[scope]; dup {
			bad.addf("%s: scope %s is also given by %s", rel, scope, other)
			continue
		}
		byScope[scope] = rel
		p, ok := checkDocument(ctx, e, dir, rel, scope, man, opts, &bad)
		if ok {
			plan = append(plan, p)
		}
	}
	if err := bad.err(); err != nil {
		return nil, err
	}
	return plan, nil
}

// checkDocument checks one file: its digest, its form, its validity and its
// scope's head.
func checkDocument(ctx context.Context, e *varplane.Engine, dir, rel string, scope varplane.Scope, man *Manifest, opts PublishOptions, bad *problems) (planned, bool) {
	want, listed := man.Files[rel]
	if !listed {
		bad.addf("%s: not listed in %s", rel, ReportFile)
		return planned{}, false
	}
	data, err := readFile(filepath.Join(dir, filepath.FromSlash(rel)), e.Limits().MaxBodyBytes)
	if err != nil {
		bad.addf("%s: %v", rel, err)
		return planned{}, false
	}
	if got := fileDigest(data); got != want {
		bad.addf("%s: digest %s does not match %s in %s", rel, got, want, ReportFile)
		return planned{}, false
	}
	doc := json.RawMessage(data)
	if ext := path.Ext(rel); ext == ".yaml" || ext == ".yml" {
		if doc, err = wire.YAMLToJSON(data, e.Limits()); err != nil {
			bad.addf("%s: %s", rel, varplane.ErrorMessage(err))
			return planned{}, false
		}
	}
	schema := man.Schemas[rel]
	res, err := e.Validate(ctx, varplane.ValidateRequest{Document: doc, SchemaID: schema.SchemaID, Scope: scope})
	if err != nil {
		bad.addf("%s: %s", rel, varplane.ErrorMessage(err))
		return planned{}, false
	}
	if !res.Valid {
		bad.addf("%s: invalid: %s", rel, varplane.RejectionReason(res.Issues))
		return planned{}, false
	}
	if o := opts.ownerOf(scope); o != nil && o.Check != nil {
		if err := o.Check(doc); err != nil {
			bad.addf("%s: %s", rel, varplane.ErrorMessage(err))
			return planned{}, false
		}
	}
	rev, err := canonical.Digest(doc)
	if err != nil {
		bad.addf("%s: cannot be canonicalised", rel)
		return planned{}, false
	}
	p := planned{path: rel, scope: scope, doc: doc, schema: schema, revision: varplane.Revision(rev)}
	st, err := e.Store().State(ctx, scope)
	if err != nil {
		bad.addf("%s: read the head of %s: %v", rel, scope, err)
		return planned{}, false
	}
	p.expected = st.Generation
	if h := st.Head; h != nil {
		same := h.Revision == p.revision && h.SchemaID == schema.SchemaID && h.SchemaVersion == schema.SchemaVersion
		switch {
		case same && opts.Resume:
			p.skip = true
		case same:
			bad.addf("%s: %s is already published identically (generation %d); --resume skips it", rel, scope, h.Generation)
			return planned{}, false
		default:
			bad.addf("%s: %s already has a head with other content (generation %d, revision %s); publish never overwrites", rel, scope, h.Generation, h.Revision)
			return planned{}, false
		}
	}
	return p, true
}

// readManifest reads and checks report.json.
func readManifest(dir string) (*Manifest, error) {
	data, err := readFile(filepath.Join(dir, ReportFile), varplane.MaxBodyCeiling)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &RejectedError{Problems: []string{ReportFile + " is missing: it records the SHA-256 of every file"}}
	}
	if err != nil {
		return nil, &RejectedError{Problems: []string{fmt.Sprintf("%s: %v", ReportFile, err)}}
	}
	var m Manifest
	if err := wire.DecodeStored(data, &m); err != nil || m.Files == nil {
		return nil, &RejectedError{Problems: []string{ReportFile + ` is not {"files": {"<relative path>": "sha256:<64 hex>"}}`}}
	}
	var bad problems
	for rel, d := range m.Files {
		if _, err := varplane.ParseRevision(d); err != nil {
			bad.addf("%s: the digest of %s in %s is not sha256: and 64 lowercase hex digits", ReportFile, rel, ReportFile)
		}
	}
	return &m, bad.err()
}

// listDocuments returns the document files of dir (slash-separated paths
// relative to dir) and the scope each names. Anything else in dir is a
// problem: a stray file may be a document left out by mistake.
func listDocuments(dir string, bad *problems) (map[string]varplane.Scope, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &RejectedError{Problems: []string{fmt.Sprintf("read %s: %v", dir, err)}}
	}
	files := map[string]varplane.Scope{}
	for _, en := range entries {
		switch name := en.Name(); {
		case name == ReportFile:
		case name == HistoryFile && en.Type().IsRegular(): // an export's history: not a document
		case name == RootFile && en.Type().IsRegular():
			files[RootFile] = "" // the caller names the root scope
		case name == ScopesDir && en.IsDir():
			sub, err := os.ReadDir(filepath.Join(dir, ScopesDir))
			if err != nil {
				return nil, &RejectedError{Problems: []string{fmt.Sprintf("read %s: %v", ScopesDir, err)}}
			}
			for _, f := range sub {
				rel := ScopesDir + "/" + f.Name()
				scope, ok := scopeOfFile(f.Name())
				switch {
				case !f.Type().IsRegular():
					bad.addf("%s: not a regular file (documents are %s/<scope>.json or .yaml)", rel, ScopesDir)
				case !ok:
					bad.addf("%s: not <scope>.json, .yaml or .yml with a valid scope", rel)
				default:
					files[rel] = scope
				}
			}
		default:
			bad.addf("%s: unexpected (a migration directory holds %s, %s, %s and %s/)", name, RootFile, ReportFile, HistoryFile, ScopesDir)
		}
	}
	return files, nil
}

// scopeOfFile returns the scope a scopes/ file name gives.
func scopeOfFile(name string) (varplane.Scope, bool) {
	ext := path.Ext(name)
	switch ext {
	case ".json", ".yaml", ".yml":
	default:
		return "", false
	}
	s := varplane.Scope(strings.TrimSuffix(name, ext))
	return s, s.Valid()
}

// readFile reads at most limit bytes of path; a larger file is an error.
func readFile(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}
