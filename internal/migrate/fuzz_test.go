package migrate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/migrate"
	"github.com/varplane/varplane/store/memory"
)

// FuzzPublishReport: whatever report.json holds, Publish never panics, and
// either publishes every document (the report was right) or rejects the run
// having written nothing.
func FuzzPublishReport(f *testing.F) {
	root, a := `{"root.k":1}`, `{"x":true}`
	f.Add(`{"files":{"root.json":"` + canonical.DigestCanonical([]byte(root)) + `","scopes/a.b.json":"` + canonical.DigestCanonical([]byte(a)) + `"}}`)
	f.Add(`{"files":{"root.json":"sha256:00"}}`)
	f.Add(`{"files":{},"schemas":{"root.json":{"schemaId":"x"}}}`)
	f.Add(`{"files":null}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, report string) {
		dir := t.TempDir()
		for rel, content := range map[string]string{"root.json": root, "scopes/a.b.json": a, "report.json": report} {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			_ = os.MkdirAll(filepath.Dir(p), 0o700)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s := memory.New()
		e := varplane.NewEngine(s, varplane.Options{})
		defer e.Close()
		rep, err := migrate.Publish(context.Background(), e, dir, migrate.PublishOptions{})
		scopes, _ := s.Scopes(context.Background())
		var re *migrate.RejectedError
		switch {
		case err == nil:
			if rep.Published != 2 || len(scopes) != 2 {
				t.Fatalf("published %+v, scopes %v", rep, scopes)
			}
		case errors.As(err, &re):
			if len(scopes) != 0 {
				t.Fatalf("rejected (%v) but wrote %v", err, scopes)
			}
		default:
			t.Fatalf("neither published nor rejected: %v", err)
		}
	})
}
