package migrate_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/migrate"
	"github.com/varplane/varplane/schema"
	"github.com/varplane/varplane/store/memory"
)

// TestPublishSchemas: a document report.json names a schema for is
// validated against it and published with it; export keeps the names, so
// publishing the export gives the same heads; without the schema the run
// is rejected.
func TestPublishSchemas(t *testing.T) {
	ctx := context.Background()
	sdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(sdir, "limits.json"), []byte(`{"type":"object","properties":{"limit":{"type":"integer"}},"required":["limit"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := schema.LoadDir(ctx, sdir)
	if err != nil {
		t.Fatal(err)
	}
	withSchema := func(doc string) string {
		files := map[string]string{"root.json": `{"root.k":1}`, "scopes/app.a.json": doc}
		dir := writeDir(t, files, nil)
		digests := map[string]string{}
		for rel, c := range files {
			digests[rel] = canonical.DigestCanonical([]byte(c))
		}
		b, _ := json.Marshal(map[string]any{"files": digests, "schemas": map[string]any{"scopes/app.a.json": map[string]string{"schemaId": "limits", "schemaVersion": "1"}}})
		if err := os.WriteFile(filepath.Join(dir, migrate.ReportFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	newEngine := func(v varplane.Validator) (*varplane.Engine, varplane.Store) {
		s := memory.New()
		e := varplane.NewEngine(s, varplane.Options{Validator: v})
		t.Cleanup(e.Close)
		return e, s
	}

	e, s := newEngine(reg)
	_, err = migrate.Publish(ctx, e, withSchema(`{"limit":"ten"}`), migrate.PublishOptions{})
	rejected(t, err, "scopes/app.a.json: invalid")
	if _, err := migrate.Publish(ctx, e, withSchema(`{"limit":10}`), migrate.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.State(ctx, "app.a")
	if st.Head.SchemaID != "limits" || st.Head.SchemaVersion != "1" {
		t.Fatalf("head %+v", st.Head)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := migrate.Export(ctx, s, out, migrate.DefaultRoot); err != nil {
		t.Fatal(err)
	}
	noSchemas, _ := newEngine(nil)
	_, err = migrate.Publish(ctx, noSchemas, out, migrate.PublishOptions{})
	rejected(t, err, "document.unknown-schema")
	e2, s2 := newEngine(reg)
	if _, err := migrate.Publish(ctx, e2, out, migrate.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if a, b := heads(t, s), heads(t, s2); !equal(a, b) {
		t.Fatalf("heads differ:\n%v\n%v", a, b)
	}
}
