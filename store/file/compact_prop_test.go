package file_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

// TestCompactionMatchesMemory: any sequence of commits, compactions (with
// any revisions to reclaim) and restarts leaves the file store answering
// exactly what the memory store answers after the same commits and
// reclamations.
func TestCompactionMatchesMemory(t *testing.T) {
	scopes := []varplane.Scope{"p", "p.a", "p.a.b", "q"}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		path := logPath(t)
		fs, err := file.Open(ctx, path, file.Options{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = fs.Close() }()
		mem := memory.New()
		ts := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
		both := func(fn func(s varplane.Store) error) {
			ef, em := fn(fs), fn(mem)
			if (ef == nil) != (em == nil) || varplane.ErrorCode(ef) != varplane.ErrorCode(em) {
				rt.Fatalf("file: %v; memory: %v", ef, em)
			}
		}
		keys := 0
		for i := range rapid.IntRange(1, 40).Draw(rt, "ops") {
			ts = ts.Add(time.Second)
			sc := rapid.SampledFrom(scopes).Draw(rt, "scope")
			st, _ := mem.State(ctx, sc)
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1:
				doc := rapid.IntRange(0, 5).Draw(rt, "doc")
				both(func(s varplane.Store) error {
					c := storetest.CreatedEvent(sc, storetest.Doc(doc))
					a := storetest.ActivatedEvent(sc, c.Revision, st.Generation)
					c.Timestamp, a.Timestamp = ts, ts
					a.IdempotencyKey, a.RequestHash = fmt.Sprint("key-", i), "h"
					_, err := s.AppendPublish(ctx, c, a, st.Generation)
					return err
				})
				keys = i + 1
			case 2:
				doc := rapid.IntRange(0, 5).Draw(rt, "doc")
				both(func(s varplane.Store) error {
					c := storetest.CreatedEvent(sc, storetest.Doc(doc))
					c.Timestamp = ts
					return s.Append(ctx, c, 0)
				})
			case 3:
				both(func(s varplane.Store) error {
					d := storetest.DeactivatedEvent(sc, st.Generation)
					d.Timestamp = ts
					return s.AppendSubtreeDeactivation(ctx, d, st.Generation)
				})
			case 4:
				both(func(s varplane.Store) error {
					return s.Append(ctx, &varplane.Event{Kind: varplane.EventRejected, Scope: sc, RejectionReason: fmt.Sprint(i), Timestamp: ts}, 0)
				})
			case 5:
				reclaim := map[varplane.Scope][]varplane.Revision{}
				for _, s := range scopes {
					hist, _ := mem.History(ctx, s)
					for _, ev := range hist {
						if ev.Kind == varplane.EventRevisionCreated && rapid.Bool().Draw(rt, "reclaim") {
							reclaim[s] = append(reclaim[s], ev.Revision)
						}
					}
					if _, err := mem.ReclaimRevisions(ctx, s, reclaim[s]); err != nil {
						rt.Fatal(err)
					}
				}
				if _, err := fs.Compact(ctx, reclaim); err != nil {
					rt.Fatalf("Compact: %v", err)
				}
			case 6:
				if err := fs.Close(); err != nil {
					rt.Fatal(err)
				}
				if fs, err = file.Open(ctx, path, file.Options{NoSync: true}); err != nil {
					rt.Fatalf("reopen: %v", err)
				}
			}
			if got, want := snapshotOf(t, fs, keys), snapshotOf(t, mem, keys); got != want {
				rt.Fatalf("after op %d, file:\n%s\nmemory:\n%s", i, got, want)
			}
		}
	})
}
