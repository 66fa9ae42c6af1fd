package postgres

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/replica"
	"github.com/varplane/varplane/store/storetest"
)

// unmerge expands merged payloads back into one (kind, lines) per commit.
func unmerge(t *testing.T, payloads []string) []string {
	t.Helper()
	var out []string
	for _, p := range payloads {
		if len(p) > maxPayload+len("deactivated each\n") {
			t.Errorf("payload of %d bytes, over the bound", len(p))
		}
		kind, rest, _ := strings.Cut(p, "\n")
		k, each := strings.CutSuffix(kind, eachSuffix)
		if !each {
			out = append(out, p)
			continue
		}
		lines := strings.Split(rest, "\n")
		if len(lines) < 2 {
			t.Errorf("merged payload %q holds one commit: it should go plain", p)
		}
		for _, l := range lines {
			out = append(out, k+"\n"+l)
		}
	}
	return out
}

// TestMergePayloads: runs of one-line payloads of one kind merge into
// "<kind> each" payloads within the bound; everything else goes as it is;
// expanding the result gives the commits back in their order.
func TestMergePayloads(t *testing.T) {
	act := func(i int) string { return fmt.Sprintf("activated\n%d %d scope.%d", i+10, i+1, i) }
	long := make([]string, 400)
	for i := range long {
		long[i] = fmt.Sprintf("activated\n%d %d %s.%d", i, i, strings.Repeat("s", 60), i)
	}
	cases := []struct {
		name string
		in   []string
		want int // payloads sent
	}{
		{"none", nil, 0},
		{"one", []string{act(1)}, 1},
		{"run", []string{act(1), act(2), act(3)}, 1},
		{"kinds alternate", []string{act(1), "rejected\n4 1 r", act(2), act(3)}, 3},
		{"subtree in between", []string{act(1), act(2), "deactivated\n5 2 a\n3 4 a.b", act(3), act(4)}, 3},
		{"everything", []string{act(1), "deactivated\n*", act(2)}, 3},
		{"bounded", long, 4},
		{"scope twice", []string{act(1), act(2), "activated\n30 2 scope.1", act(3)}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := mergePayloads(slices.Clone(c.in))
			if len(got) != c.want {
				t.Errorf("%d payloads %q, want %d", len(got), got, c.want)
			}
			for _, p := range got {
				if len(p) > maxPayload+len("activated each") {
					t.Errorf("payload of %d bytes", len(p))
				}
				if kind, rest, _ := strings.Cut(p, "\n"); strings.HasSuffix(kind, eachSuffix) {
					inv, ok := replica.ParseInvalidation(strings.TrimSuffix(kind, eachSuffix) + "\n" + rest)
					if !ok || inv.All || len(inv.Lines) < 2 {
						t.Errorf("merged payload %q parses as %+v, %v", p, inv, ok)
					}
				}
			}
			if back := unmerge(t, got); !slices.Equal(back, c.in) {
				t.Errorf("expanded %q, want %q", back, c.in)
			}
		})
	}
}

// TestConcurrentPublishesReachReplica: concurrent publishes through A
// (batched, and announced in merged notifications) reach B as one
// activated commit each, with its own scope and generation, and B serves
// every head.
func TestConcurrentPublishesReachReplica(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	chB := watchChan(t, b)
	const writers, rounds = 24, 3
	for i := range writers {
		// B follows every scope from generation 0 (a scope it has not
		// read it would deliver from the first head it reads)
		state(t, b, varplane.Scope(fmt.Sprintf("pub.merge.k%d", i)))
	}
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc := varplane.Scope(fmt.Sprintf("pub.merge.k%d", i))
				if _, err := publishOn(a, sc, storetest.Doc(round*100+i), "", varplane.Generation(round)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	seen := map[varplane.Scope][]varplane.Generation{}
	for k := range writers * rounds {
		var c varplane.Commit
		select {
		case c = <-chB:
		case <-time.After(10 * time.Second):
			t.Fatalf("B delivered %d commits of %d: %v", k, writers*rounds, seen)
		}
		if c.Kind != varplane.EventActivated || len(c.Changes) != 1 || c.Changes[0].Scope != c.Scope || c.Changes[0].Head == nil {
			t.Fatalf("B's commit = %+v, want one activation of one scope", c)
		}
		seen[c.Scope] = append(seen[c.Scope], c.Changes[0].Generation)
	}
	for i := range writers {
		sc := varplane.Scope(fmt.Sprintf("pub.merge.k%d", i))
		if g := seen[sc]; !slices.Equal(g, []varplane.Generation{1, 2, 3}) {
			t.Errorf("B delivered generations %v of %s, want 1, 2, 3 in order", g, sc)
		}
		if st := state(t, b, sc); st.Generation != rounds || st.Head == nil {
			t.Errorf("B's state of %s = %+v", sc, st)
		}
	}
	select {
	case extra := <-chB:
		t.Errorf("B heard an extra commit: %+v", extra)
	case <-time.After(300 * time.Millisecond):
	}
	if st := b.Stats(); st.Notifications >= writers*rounds {
		t.Logf("no notification carried more than one commit (a slow machine): %d notifications", st.Notifications)
	}
}
