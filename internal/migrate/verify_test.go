package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/internal/migrate"
)

// exportLinked publishes good into a new store of kind k, deactivates the
// app subtree (a cascade), publishes app.a again and exports the store.
func exportLinked(t *testing.T, open func(*testing.T) varplane.Store) (string, *migrate.Report) {
	t.Helper()
	ctx := context.Background()
	s := open(t)
	e := engineOf(t, s)
	if _, err := migrate.Publish(ctx, e, writeDir(t, good, nil), migrate.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: "app", ExpectedGeneration: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(ctx, varplane.PublishRequest{Scope: "app.a", Document: json.RawMessage(`{"limit":12}`), ExpectedGeneration: 2, Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	if st := must(s.State(ctx, "app.a")); st.Chain.Seq == 0 {
		t.Fatalf("the %s store did not link its events", s.Name())
	}
	dir := filepath.Join(t.TempDir(), "export")
	rep, err := migrate.Export(ctx, s, dir, migrate.DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	return dir, rep
}

// historyLines returns history.jsonl's lines, each with its scope and kind.
func historyLines(t *testing.T, dir string) []historyLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, migrate.HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []historyLine
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		var ev varplane.Event
		if err := eventjson.DecodeEvent([]byte(strings.TrimSuffix(l, "\n")), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, historyLine{text: l, ev: ev})
	}
	return out
}

type historyLine struct {
	text string
	ev   varplane.Event
}

func writeLines(t *testing.T, dir string, lines []historyLine) {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
	}
	if err := os.WriteFile(filepath.Join(dir, migrate.HistoryFile), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// find returns the index of the seq-th event of scope in lines (seq 0: its
// last line).
func find(t *testing.T, lines []historyLine, scope varplane.Scope, seq uint64) int {
	t.Helper()
	at := -1
	for i, l := range lines {
		if l.ev.Scope == scope && (seq == 0 || l.ev.Seq == seq) {
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("no line of %s at seq %d", scope, seq)
	}
	return at
}

// editReport rewrites report.json through edit.
func editReport(t *testing.T, dir string, edit func(*migrate.Manifest)) {
	t.Helper()
	p := filepath.Join(dir, migrate.ReportFile)
	var m migrate.Manifest
	if err := json.Unmarshal(must(os.ReadFile(p)), &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	if err := os.WriteFile(p, must(json.Marshal(&m)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyExport: an export verifies without its store, carries the
// chain heads and digest of the store, still publishes, and every way of
// altering it is caught, naming the broken or missing link (scope and seq)
// or the file.
func TestVerifyExport(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			dir, rep := exportLinked(t, k.open)
			got, err := migrate.VerifyExport(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Digest != rep.Chain.Digest || got.Digest != varplane.ChainDigest(got.Heads) || got.Heads["app.a"].Seq != 4 || got.Cascades != 2 {
				t.Fatalf("verified %+v; the export reported %+v", got, rep.Chain)
			}
			dst := k.open(t)
			if _, err := migrate.Publish(ctx, engineOf(t, dst), dir, migrate.PublishOptions{}); err != nil {
				t.Fatalf("publish of the export: %v", err)
			}

			for _, tc := range []struct {
				name  string
				edit  func(t *testing.T, dir string)
				scope varplane.Scope // a *ChainError for this scope and seq, or an error naming want
				seq   uint64
				want  string
			}{
				{"a document edited", func(t *testing.T, dir string) {
					lines := historyLines(t, dir)
					i := find(t, lines, "app.a", 1)
					lines[i].text = strings.Replace(lines[i].text, `"document":{"limit":10}`, `"document":{"limit":11}`, 1)
					writeLines(t, dir, lines)
				}, "app.a", 1, "document does not match"},
				{"an event line deleted", func(t *testing.T, dir string) {
					lines := historyLines(t, dir)
					writeLines(t, dir, slices.Delete(lines, find(t, lines, "app.a", 2), find(t, lines, "app.a", 2)+1))
				}, "app.a", 2, "missing: the next event has seq 3"},
				{"a scope's last line deleted", func(t *testing.T, dir string) {
					lines := historyLines(t, dir)
					i := find(t, lines, "root", 0)
					writeLines(t, dir, slices.Delete(lines, i, i+1))
				}, "root", 2, "missing: the scope's chain head is at seq 2"},
				{"an event changed", func(t *testing.T, dir string) {
					lines := historyLines(t, dir)
					i := find(t, lines, "grp", 2)
					lines[i].text = strings.Replace(lines[i].text, `"actor":"migrate"`, `"actor":"mallory"`, 1)
					writeLines(t, dir, lines)
				}, "grp", 2, "hash does not match"},
				{"a link forged past the recorded head", func(t *testing.T, dir string) {
					lines := historyLines(t, dir)
					i := find(t, lines, "grp", 0)
					ev := lines[i].ev
					ev.Kind, ev.Generation, ev.Revision, ev.PreviousGeneration = varplane.EventDeactivated, 2, "", varplane.GenerationPtr(1)
					varplane.ChainHead{Seq: ev.Seq, Hash: ev.Hash}.Next(&ev)
					lines = slices.Insert(lines, i+1, historyLine{text: string(eventjson.Event(&ev)) + "\n", ev: ev})
					writeLines(t, dir, lines)
				}, "grp", 3, "goes on past the chain head"},
				{"a chain head changed in the report", func(t *testing.T, dir string) {
					editReport(t, dir, func(m *migrate.Manifest) {
						h := m.Chain.Heads["grp"]
						h.Hash = strings.Repeat("0", 64)
						m.Chain.Heads["grp"] = h
					})
				}, "", 0, "is not the digest of its heads"},
				{"a chain head and the digest changed in the report", func(t *testing.T, dir string) {
					editReport(t, dir, func(m *migrate.Manifest) {
						h := m.Chain.Heads["grp"]
						h.Hash = strings.Repeat("0", 64)
						m.Chain.Heads["grp"] = h
						m.Chain.Digest = varplane.ChainDigest(m.Chain.Heads)
					})
				}, "grp", 2, "another hash"},
				{"a head file changed", func(t *testing.T, dir string) {
					if err := os.WriteFile(filepath.Join(dir, "root.json"), []byte(`{"root.tier":"lead"}`+"\n"), 0o600); err != nil {
						t.Fatal(err)
					}
				}, "", 0, "root.json: digest"},
				{"a head file changed with its digest", func(t *testing.T, dir string) {
					data := []byte(`{"root.tier":"lead"}` + "\n")
					if err := os.WriteFile(filepath.Join(dir, "root.json"), data, 0o600); err != nil {
						t.Fatal(err)
					}
					editReport(t, dir, func(m *migrate.Manifest) { m.Files["root.json"] = canonical.DigestCanonical(data) })
				}, "", 0, "root.json: the document is not revision"},
				{"a head file deleted from the report", func(t *testing.T, dir string) {
					editReport(t, dir, func(m *migrate.Manifest) { delete(m.Files, "scopes/grp.json") })
				}, "", 0, "the head of grp"},
				{"history.jsonl's digest changed in the report", func(t *testing.T, dir string) {
					editReport(t, dir, func(m *migrate.Manifest) { m.Chain.History = canonical.DigestCanonical([]byte("x")) })
				}, "", 0, "history.jsonl: digest"},
				{"a damaged line", func(t *testing.T, dir string) {
					lines := historyLines(t, dir)
					lines[3].text = `{"kind":` + "\n"
					writeLines(t, dir, lines)
				}, "", 0, "history.jsonl line 4: not an event"},
				{"a scope's lines apart", func(t *testing.T, dir string) {
					lines := historyLines(t, dir)
					i := find(t, lines, "app.a", 1)
					l := lines[i]
					writeLines(t, dir, append(slices.Delete(lines, i, i+1), l))
				}, "", 0, "again after line"},
				{"cut short", func(t *testing.T, dir string) {
					p := filepath.Join(dir, migrate.HistoryFile)
					b := must(os.ReadFile(p))
					if err := os.WriteFile(p, b[:len(b)-10], 0o600); err != nil {
						t.Fatal(err)
					}
				}, "", 0, "cut short"},
				{"history.jsonl missing", func(t *testing.T, dir string) {
					if err := os.Remove(filepath.Join(dir, migrate.HistoryFile)); err != nil {
						t.Fatal(err)
					}
				}, "", 0, "open history.jsonl"},
				{"no chain in the report", func(t *testing.T, dir string) {
					editReport(t, dir, func(m *migrate.Manifest) { m.Chain = nil })
				}, "", 0, "has no chain"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					d := t.TempDir()
					if err := os.CopyFS(d, os.DirFS(dir)); err != nil {
						t.Fatal(err)
					}
					tc.edit(t, d)
					_, err := migrate.VerifyExport(ctx, d)
					if err == nil {
						t.Fatal("the altered export verified")
					}
					var ce *varplane.ChainError
					switch {
					case tc.scope != "":
						if !errors.As(err, &ce) || ce.Scope != tc.scope || ce.Seq != tc.seq || !strings.Contains(ce.Problem, tc.want) {
							t.Fatalf("VerifyExport = %v; want the link of %s at seq %d: %q", err, tc.scope, tc.seq, tc.want)
						}
					case !strings.Contains(err.Error(), tc.want):
						t.Fatalf("VerifyExport = %v; want %q", err, tc.want)
					}
				})
			}
		})
	}
}
