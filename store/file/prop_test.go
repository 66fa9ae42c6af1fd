package file_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/file"
	"github.com/varplane/varplane/store/storetest"
)

var propScopes = []varplane.Scope{"a", "a.b", "a.b.c", "b", "b.x"}

// snapshot renders what a store answers for every scope of propScopes.
func snapshot(t *rapid.T, s varplane.Store) string {
	ctx := context.Background()
	var b strings.Builder
	for _, sc := range propScopes {
		st, err := s.State(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.History(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s gen=%d events=%d", sc, st.Generation, len(h))
		if st.Head != nil {
			fmt.Fprintf(&b, " head=%s", st.Head.Revision)
		}
		if st.LastRejected != nil {
			fmt.Fprintf(&b, " rejected=%s", st.LastRejected.RejectionReason)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestPrefixFold writes random operation sequences, then opens copies of
// random prefixes of the log: a prefix ending where a batch ends (after its
// sync line) folds to exactly the state the store had when that batch was
// acknowledged, and a prefix ending inside a batch folds to the state before
// it (the torn batch is cut).
func TestPrefixFold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dir, err := os.MkdirTemp("", "varplane-prefix-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "log.jsonl")
		ctx := context.Background()
		s, err := file.Open(ctx, path, file.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		type point struct {
			size int64
			snap string
		}
		size0, _ := s.LogSize()
		points := []point{{size0, snapshot(t, s)}}
		n := rapid.IntRange(1, 30).Draw(t, "ops")
		for range n {
			sc := rapid.SampledFrom(propScopes).Draw(t, "scope")
			st, _ := s.State(ctx, sc)
			expected := st.Generation
			if rapid.IntRange(0, 5).Draw(t, "wrong") == 0 {
				expected++
			}
			d := storetest.Doc(rapid.IntRange(0, 2).Draw(t, "doc"))
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				err = s.Append(ctx, storetest.CreatedEvent(sc, d), 0)
			case 1:
				err = s.Append(ctx, storetest.ActivatedEvent(sc, storetest.RevisionOf(d), expected), expected)
			case 2:
				err = s.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent(sc, expected), expected)
			case 3:
				err = s.Append(ctx, &varplane.Event{Kind: varplane.EventRejected, Scope: sc, RejectionReason: fmt.Sprintf("r%d", n)}, 0)
			}
			if err != nil && !errors.Is(err, varplane.ErrConflict) && !errors.Is(err, varplane.ErrNotFound) && !errors.Is(err, varplane.ErrRevisionExists) {
				t.Fatalf("unexpected error: %v", err)
			}
			size, err := s.LogSize()
			if err != nil {
				t.Fatal(err)
			}
			if size != points[len(points)-1].size {
				points = append(points, point{size, snapshot(t, s)})
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		full, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			k := rapid.IntRange(0, len(points)-1).Draw(t, "point")
			cut := int(points[k].size)
			want := points[k].snap
			if k+1 < len(points) && rapid.Bool().Draw(t, "torn") {
				cut = rapid.IntRange(cut, int(points[k+1].size)-1).Draw(t, "cut")
			}
			cp := filepath.Join(dir, fmt.Sprintf("prefix-%d.jsonl", i))
			if err := os.WriteFile(cp, full[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			ps, err := file.Open(ctx, cp, file.Options{NoSync: true, Logger: quiet})
			if err != nil {
				t.Fatalf("open prefix of %d bytes: %v", cut, err)
			}
			got := snapshot(t, ps)
			_ = ps.Close()
			if got != want {
				t.Fatalf("prefix of %d bytes (point %d at %d):\n got\n%s want\n%s", cut, k, points[k].size, got, want)
			}
		}
	})
}
