package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/migrate"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
)

// kinds are the stores the migration runs on: each call opens a new, empty
// store of that kind.
var kinds = []struct {
	name string
	open func(t *testing.T) varplane.Store
}{
	{"file", func(t *testing.T) varplane.Store {
		s, err := file.Open(context.Background(), filepath.Join(t.TempDir(), "log.jsonl"), file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"redis", func(t *testing.T) varplane.Store {
		s, err := redis.Open(context.Background(), redisURL(t), redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
}

func redisURL(t *testing.T) string {
	t.Helper()
	return redistest.PrefixURL(t, "migrate")
}

// accessOwned is the access control as `varplane migrate` passes it.
var accessOwned = []migrate.Owned{{Owner: access.Owner, Check: func(doc []byte) error {
	_, err := access.ParseDocument(doc)
	return err
}}}

func engineOf(t *testing.T, s varplane.Store) *varplane.Engine {
	e := varplane.NewEngine(s, varplane.Options{Owners: []varplane.Owner{access.Owner}})
	t.Cleanup(e.Close)
	return e
}

// writeDir writes files (relative path → content) and a report.json with
// their digests, then applies edit to the report's files map.
func writeDir(t *testing.T, files map[string]string, edit func(map[string]string)) string {
	t.Helper()
	dir := t.TempDir()
	digests := map[string]string{}
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		digests[rel] = canonical.DigestCanonical([]byte(content))
	}
	if edit != nil {
		edit(digests)
	}
	b, _ := json.Marshal(map[string]any{"files": digests})
	if err := os.WriteFile(filepath.Join(dir, migrate.ReportFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

var good = map[string]string{
	"root.json":              `{"root.tier":"gold"}`,
	"scopes/app.a.json":      `{"limit": 10}`,
	"scopes/app.b.yaml":      "limit: 20\nnames: [x, y]\n",
	"scopes/grp.json":        `{"grp.k": true}`,
	"scopes/deep.x.y.z.json": `[1,2,3]`,
}

// heads returns every head of s: scope → revision and schemaId.
func heads(t *testing.T, s varplane.Store) map[varplane.Scope]string {
	t.Helper()
	ctx := context.Background()
	scopes, err := s.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[varplane.Scope]string{}
	for _, sc := range scopes {
		st, err := s.State(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		if st.Head != nil {
			out[sc] = string(st.Head.Revision) + " " + st.Head.SchemaID
		}
	}
	return out
}

func rejected(t *testing.T, err error, want string) {
	t.Helper()
	var re *migrate.RejectedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *RejectedError", err)
	}
	if !strings.Contains(re.Error(), want) {
		t.Fatalf("err = %v, want it to name %q", err, want)
	}
}

func TestPublish(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			s := k.open(t)
			e := engineOf(t, s)
			rep, err := migrate.Publish(ctx, e, writeDir(t, good, nil), migrate.PublishOptions{Root: "platform.base"})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Published != len(good) || rep.Documents[0].Path != "root.json" || rep.Documents[0].Scope != "platform.base" {
				t.Fatalf("report %+v", rep)
			}
			h := heads(t, s)
			if len(h) != len(good) {
				t.Fatalf("heads %v", h)
			}
			st, _ := s.State(ctx, "app.b")
			if string(st.Head.Document) != `{"limit":20,"names":["x","y"]}` {
				t.Fatalf("yaml published as %s", st.Head.Document)
			}
			for _, ev := range must(s.History(ctx, "platform.base")) {
				if ev.Actor != "migrate" || !strings.HasPrefix(ev.Reason, "migrate publish ") {
					t.Fatalf("event %+v", ev)
				}
			}

			// Again without --resume: every scope exists, nothing more is written.
			before := histories(t, s)
			_, err = migrate.Publish(ctx, e, writeDir(t, good, nil), migrate.PublishOptions{Root: "platform.base"})
			rejected(t, err, "already published identically")
			// --resume with identical data: everything skipped.
			rep, err = migrate.Publish(ctx, e, writeDir(t, good, nil), migrate.PublishOptions{Root: "platform.base", Resume: true})
			if err != nil || rep.Skipped != len(good) || rep.Published != 0 {
				t.Fatalf("resume: %+v %v", rep, err)
			}
			// Other content over an existing head stops the run, even with
			// --resume, naming it; nothing more is written.
			changed := clone(good)
			changed["scopes/app.a.json"] = `{"limit": 11}`
			changed["scopes/new.one.json"] = `{}`
			_, err = migrate.Publish(ctx, e, writeDir(t, changed, nil), migrate.PublishOptions{Root: "platform.base", Resume: true})
			rejected(t, err, "scopes/app.a.json: app.a already has a head with other content")
			if after := histories(t, s); after != before {
				t.Fatal("a refused publish wrote something")
			}
		})
	}
}

// TestPublishRejects: any problem writes nothing at all.
func TestPublishRejects(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		edit  func(map[string]string)
		want  string
	}{
		{"invalid document", with("scopes/grp.json", `{"other": 1}`), nil, "scopes/grp.json: invalid: var.group-scope-shape"},
		{"not json", with("scopes/app.a.json", `{"limit": `), nil, "scopes/app.a.json: not valid JSON"},
		{"bad yaml", with("scopes/app.b.yaml", "limit: 010\n"), nil, "scopes/app.b.yaml"},
		{"digest mismatch", good, func(m map[string]string) { m["scopes/app.a.json"] = canonical.DigestCanonical([]byte("x")) }, "scopes/app.a.json: digest"},
		{"root missing", without("root.json"), nil, "root.json is missing"},
		{"unlisted file", good, func(m map[string]string) { delete(m, "scopes/app.a.json") }, "scopes/app.a.json: not listed"},
		{"listed, absent", good, func(m map[string]string) { m["scopes/gone.json"] = canonical.DigestCanonical(nil) }, "scopes/gone.json: listed"},
		{"stray file", with("notes.txt", "hi"), nil, "notes.txt: unexpected"},
		{"bad name", with("scopes/a..b.json", "{}"), nil, "scopes/a..b.json: not <scope>"},
		{"scope twice", with("scopes/app.a.yaml", "limit: 1\n"), nil, "scope app.a is also given"},
		{"bad access document", with("scopes/varplane.access.json", `{"principals":{"a":{}}}`), nil, "scopes/varplane.access.json"},
		{"bad digest form", good, func(m map[string]string) { m["root.json"] = "md5:00" }, "is not sha256:"},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					s := k.open(t)
					_, err := migrate.Publish(context.Background(), engineOf(t, s), writeDir(t, tc.files, tc.edit), migrate.PublishOptions{Owned: accessOwned})
					rejected(t, err, tc.want)
					if sc := must(s.Scopes(context.Background())); len(sc) != 0 {
						t.Fatalf("a rejected publish wrote %v", sc)
					}
				})
			}
		})
	}
	t.Run("no report", func(t *testing.T) {
		dir := writeDir(t, good, nil)
		_ = os.Remove(filepath.Join(dir, migrate.ReportFile))
		_, err := migrate.Publish(context.Background(), engineOf(t, kinds[0].open(t)), dir, migrate.PublishOptions{Owned: accessOwned})
		rejected(t, err, "report.json is missing")
	})
}

// TestExportPublish: export then publish into an empty store gives the same
// heads, access scope and schema names included, each way between stores.
func TestExportPublish(t *testing.T) {
	for _, from := range kinds {
		for _, to := range kinds {
			t.Run(from.name+"→"+to.name, func(t *testing.T) {
				ctx := context.Background()
				src := from.open(t)
				e := engineOf(t, src)
				if _, err := migrate.Publish(ctx, e, writeDir(t, good, nil), migrate.PublishOptions{Owned: accessOwned}); err != nil {
					t.Fatal(err)
				}
				admin, err := access.NewService(e).Bootstrap(ctx, "admin", "t", false)
				if err != nil {
					t.Fatal(err)
				}
				// A deactivated scope has no head and is not exported.
				if _, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "deep.x.y.z", ExpectedGeneration: 1}); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(t.TempDir(), "export")
				rep, err := migrate.Export(ctx, src, out, migrate.DefaultRoot)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Exported != len(good) { // the access scope in, deep.x.y.z out
					t.Fatalf("exported %d: %+v", rep.Exported, rep)
				}
				dst := to.open(t)
				if _, err := migrate.Publish(ctx, engineOf(t, dst), out, migrate.PublishOptions{Owned: accessOwned}); err != nil {
					t.Fatal(err)
				}
				if a, b := heads(t, src), heads(t, dst); !equal(a, b) {
					t.Fatalf("heads differ:\n%v\n%v", a, b)
				}
				// The administrator's token works on the new store.
				if _, err := varplane.Authorize(ctx, access.NewAuthorizer(dst), varplane.Access{Kind: varplane.KindMutate, Scope: "x", Token: admin.Token}); err != nil {
					t.Fatal(err)
				}
				// Exporting into a directory that is not empty is refused.
				_, err = migrate.Export(ctx, src, out, migrate.DefaultRoot)
				rejected(t, err, "is not empty")
				_, err = migrate.Export(ctx, src, t.TempDir(), "absent")
				rejected(t, err, "the root scope absent has no head")
			})
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func histories(t *testing.T, s varplane.Store) string {
	t.Helper()
	var b strings.Builder
	for _, sc := range must(s.Scopes(context.Background())) {
		raw, _ := json.Marshal(must(s.History(context.Background(), sc)))
		b.Write(raw)
	}
	return b.String()
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func with(rel, content string) map[string]string {
	m := clone(good)
	m[rel] = content
	return m
}

func without(rel string) map[string]string {
	m := clone(good)
	delete(m, rel)
	return m
}

func equal(a, b map[varplane.Scope]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
