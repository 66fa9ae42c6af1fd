package instance

import (
	"context"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// TestBoundsProperty: whatever sequence of reads, publications and
// deactivations, the root stays installed, no family holds more than its
// bound, at most 256 absent scopes are remembered per family, and a read
// answers the store's current document or no-head, never another one.
func TestBoundsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := memory.New()
		publish(t, mem, "root", `{"n":0}`)
		appBound := rapid.IntRange(1, 8).Draw(rt, "appBound")
		defBound := rapid.IntRange(1, 8).Draw(rt, "defBound")
		c, _ := newCache(t, mem, newFakeClock(), func(o *Options[value]) {
			o.Families = []Family{{Prefix: "app", MaxCached: appBound}}
			o.MaxCached = defBound
		})
		defer c.Close()
		ctx := context.Background()
		want := map[varplane.Scope]int{} // published value; absent when missing
		scopeGen := rapid.Custom(func(t *rapid.T) varplane.Scope {
			fam := rapid.SampledFrom([]string{"app", "tenant"}).Draw(t, "fam")
			return varplane.Scope(fmt.Sprintf("%s.s%d", fam, rapid.IntRange(0, 30).Draw(t, "i")))
		})
		for range rapid.IntRange(1, 120).Draw(rt, "steps") {
			sc := scopeGen.Draw(rt, "scope")
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				n := rapid.IntRange(1, 1000).Draw(rt, "n")
				publish(t, mem, sc, fmt.Sprintf(`{"n":%d}`, n))
				want[sc] = n
				// Watch installs asynchronously: wait until a read agrees.
				waitFor(t, "the publication", func() bool {
					d, err := c.Get(ctx, sc)
					return err == nil && d.Value.N == n
				})
			default:
				d, err := c.Get(ctx, sc)
				if n, ok := want[sc]; ok {
					if err != nil || d.Value.N != n {
						rt.Fatalf("Get(%s) = %+v, %v; want %d", sc, d, err, n)
					}
				} else if code(err) != varplane.CodeNoHead {
					rt.Fatalf("Get(%s) of a scope never published = %v, want no-head", sc, err)
				}
			}
			// Writers hold c.mu: count under it, so that an eviction and an
			// install running meanwhile are not both half seen.
			counts := map[string]int{}
			c.mu.Lock()
			c.entries.Range(func(k varplane.Scope, _ *entry[value]) bool {
				counts[string(c.familyOf(k).prefix)]++
				return true
			})
			c.mu.Unlock()
			if _, ok := c.entries.Load("root"); !ok {
				rt.Fatal("the root was dropped")
			}
			if counts["app"] > appBound || counts[""]-1 > defBound {
				rt.Fatalf("families hold %v, bounds app=%d default=%d (+ the root)", counts, appBound, defBound)
			}
			c.mu.Lock()
			for _, f := range append(c.families, c.def) {
				if len(f.absent) > MaxAbsentPerFamily || len(f.absent) != len(f.ring) {
					c.mu.Unlock()
					rt.Fatalf("family %q remembers %d absent (ring %d)", f.prefix, len(f.absent), len(f.ring))
				}
			}
			c.mu.Unlock()
		}
	})
}

// TestPrewarm: prewarmed scopes are installed by New, after the root.
func TestPrewarm(t *testing.T) {
	mem := memory.New()
	publish(t, mem, "root", `{"n":0}`)
	publish(t, mem, "app.a", `{"n":1}`)
	c, _ := newCache(t, mem, newFakeClock(), func(o *Options[value]) {
		o.Prewarm = []varplane.Scope{"app.a", "app.none"}
	})
	if _, ok := c.entries.Load("app.a"); !ok {
		t.Fatal("app.a was not prewarmed")
	}
	if c.absentGeneration("app.none") != 0 || len(c.familyOf("app.none").absent) != 1 {
		t.Fatal("a prewarmed scope without document is not remembered as absent")
	}
	if st := c.Stats(); !st.Ready || st.ColdLoads != 3 {
		t.Fatalf("stats after prewarm = %+v, want ready with 3 loads", st)
	}
}
