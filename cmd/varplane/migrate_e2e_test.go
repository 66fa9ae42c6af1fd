package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/redis"
)

// migrationDir writes a migration directory: files and a report.json with
// their digests (edit changes the digests before they are written).
func migrationDir(t *testing.T, files map[string]string, edit func(map[string]string)) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	digests := map[string]string{}
	for rel, content := range files {
		digests[rel] = canonical.DigestCanonical([]byte(content))
	}
	if edit != nil {
		edit(digests)
	}
	b, _ := json.Marshal(map[string]any{"files": digests})
	writeFiles(t, dir, map[string]string{"report.json": string(b)})
	return dir
}

var migrationFiles = map[string]string{
	"root.json":         `{"root.tier": "gold"}`,
	"scopes/app.a.json": `{"limit": 10}`,
	"scopes/app.b.yaml": "limit: 20\n",
}

func withFile(rel, content string) map[string]string {
	m := map[string]string{}
	for k, v := range migrationFiles {
		m[k] = v
	}
	if content == "" {
		delete(m, rel)
	} else {
		m[rel] = content
	}
	return m
}

// storeHeads opens the store at u in-process (no other process holds it)
// and returns its heads: scope → revision.
func storeHeads(t *testing.T, u string) map[string]string {
	t.Helper()
	ctx := context.Background()
	var s varplane.Store
	var err error
	if p, ok := strings.CutPrefix(u, "file:"); ok {
		s, err = file.Open(ctx, p, file.Options{})
	} else {
		s, err = redis.Open(ctx, u, redis.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scopes, err := s.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, sc := range scopes {
		st, err := s.State(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		if st.Head != nil {
			out[string(sc)] = string(st.Head.Revision)
		}
	}
	return out
}

var tokenRE = regexp.MustCompile(`token: (vpt_[A-Za-z0-9_-]{43})`)

// TestMigrate runs varplane migrate on the file and Redis stores: every exit
// code of the list, nothing written on a rejection, bootstrap once
// (and again with --force), and export then publish into an empty store
// giving the same heads.
func TestMigrate(t *testing.T) {
	redisBase := ""
	for _, kind := range []string{"file", "redis"} {
		t.Run(kind, func(t *testing.T) {
			n := 0
			newStore := func() string {
				n++
				if kind == "file" {
					return "file:" + filepath.Join(t.TempDir(), "log.jsonl")
				}
				if redisBase == "" {
					redisBase = startRedis(t)
				}
				return strings.Replace(redisBase, "prefix=e2e", "prefix=m"+strings.Repeat("x", n), 1)
			}
			run := func(t *testing.T, want int, args ...string) cliResult {
				t.Helper()
				r := runCLI(t, nil, "", args...)
				if r.code != want {
					t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, r.code, want, r.stdout, r.stderr)
				}
				return r
			}
			to := newStore()
			good := migrationDir(t, migrationFiles, nil)

			// Usage errors: 2, before anything is opened.
			run(t, 2, "migrate", "publish", "--to", to, "--in", good, "--bogus")
			run(t, 2, "migrate", "publish", "--to", to)
			run(t, 2, "migrate", "publish", "--in", good)
			run(t, 2, "migrate", "publish", "--to", to, "--in", good, "--root", "a..b")
			run(t, 2, "migrate", "publish", "--to", "memory:", "--in", good)
			run(t, 2, "migrate", "frobnicate")
			run(t, 2, "migrate", "bootstrap", "--to", to)
			run(t, 2, "migrate", "export", "--from", to)

			// Rejected data: 1, nothing written.
			for name, dir := range map[string]string{
				"root.json missing": migrationDir(t, withFile("root.json", ""), nil),
				"invalid document":  migrationDir(t, withFile("scopes/app.a.json", `{"limit": `), nil),
				"digest mismatch": migrationDir(t, migrationFiles, func(m map[string]string) {
					m["scopes/app.b.yaml"] = canonical.DigestCanonical([]byte("other"))
				}),
			} {
				r := run(t, 1, "migrate", "publish", "--to", to, "--in", dir)
				if !strings.Contains(r.stderr, "nothing written") {
					t.Errorf("%s: stderr %q", name, r.stderr)
				}
				if h := storeHeads(t, to); len(h) != 0 {
					t.Fatalf("%s: wrote %v", name, h)
				}
			}

			// Published: one line per document, root first, and a summary.
			r := run(t, 0, "migrate", "publish", "--to", to, "--in", good)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 4 || !strings.HasPrefix(lines[0], "published root.json → root generation 1 sha256:") || lines[3] != "published 3, skipped 0" {
				t.Fatalf("publish output:\n%s", r.stdout)
			}
			heads := storeHeads(t, to)
			// Onto existing documents: 1, naming one, nothing more written.
			r = run(t, 1, "migrate", "publish", "--to", to, "--in", migrationDir(t, withFile("scopes/app.a.json", `{"limit": 11}`), nil), "--resume")
			if !strings.Contains(r.stderr, "scopes/app.a.json: app.a already has a head with other content") {
				t.Fatalf("stderr: %s", r.stderr)
			}
			run(t, 1, "migrate", "publish", "--to", to, "--in", good)
			if h := storeHeads(t, to); !sameHeads(h, heads) {
				t.Fatalf("heads moved: %v, were %v", h, heads)
			}
			// --resume with identical data: 0, everything skipped.
			r = run(t, 0, "migrate", "publish", "--to", to, "--in", good, "--resume", "-o", "json")
			var rep struct{ Published, Skipped int }
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Skipped != 3 || rep.Published != 0 {
				t.Fatalf("resume report %s (%v)", r.stdout, err)
			}

			// Bootstrap: once, then refused, then --force.
			r = run(t, 0, "migrate", "bootstrap", "--to", to, "--admin", "root-admin")
			first := tokenRE.FindStringSubmatch(r.stdout)
			if first == nil {
				t.Fatalf("bootstrap printed no token: %s", r.stdout)
			}
			r = run(t, 1, "migrate", "bootstrap", "--to", to, "--admin", "other")
			if !strings.Contains(r.stderr, "an administrator exists") {
				t.Fatalf("stderr: %s", r.stderr)
			}
			r = run(t, 0, "migrate", "bootstrap", "--to", to, "--admin", "root-admin", "--force")
			if second := tokenRE.FindStringSubmatch(r.stdout); second == nil || second[1] == first[1] {
				t.Fatalf("forced bootstrap: %s", r.stdout)
			}

			// Export, then publish into an empty store: the same heads,
			// the access scope included.
			out := filepath.Join(t.TempDir(), "out")
			run(t, 0, "migrate", "export", "--from", to, "--out", out)
			run(t, 1, "migrate", "export", "--from", to, "--out", out) // not empty
			if _, err := os.Stat(filepath.Join(out, "scopes", "varplane.access.json")); err != nil {
				t.Fatal(err)
			}
			for _, dst := range []string{newStore(), "file:" + filepath.Join(t.TempDir(), "other.jsonl")} {
				run(t, 0, "migrate", "publish", "--to", dst, "--in", out)
				if a, b := storeHeads(t, to), storeHeads(t, dst); !sameHeads(a, b) || len(a) != 4 {
					t.Fatalf("heads after export and publish:\n%v\n%v", a, b)
				}
			}
		})
	}
}

func sameHeads(a, b map[string]string) bool {
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
