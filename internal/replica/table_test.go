package replica

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// snap is a test snapshot: a version (-1: the server holds nothing) and a
// state.
type snap struct {
	version int
	state   *varplane.ScopeState
	failed  bool // a failed read (a vanished head): Rules.Failed
}

type testEntry struct{ Entry[snap] }

type regression struct {
	scope    varplane.Scope
	from, to int
}

func newTestTable() (*Table[snap, *testEntry], *[]regression) {
	var regs []regression
	t := NewTable(Rules[snap, *testEntry]{
		New:       func() *testEntry { return &testEntry{} },
		State:     func(s *snap) *varplane.ScopeState { return s.state },
		Same:      func(a, b *snap) bool { return a.version == b.version },
		Older:     func(next, cur *snap) bool { return next.version < cur.version },
		Unwritten: func(s *snap) bool { return s.version < 0 && !s.failed },
		Failed:    func(s *snap) bool { return s.failed },
		Regressed: func(scope varplane.Scope, cur, next *snap) {
			regs = append(regs, regression{scope, cur.version, next.version})
		},
	})
	return t, &regs
}

func at(version int, gen varplane.Generation, rev varplane.Revision) *snap {
	st := &varplane.ScopeState{Scope: "a", Generation: gen}
	if rev != "" {
		st.Head = &varplane.Head{Revision: rev, Generation: gen}
	}
	return &snap{version: version, state: st}
}

// failedAt is the snapshot of a read that found scope a's head gone after
// generation floor was allocated: no version, an error for reads.
func failedAt(floor varplane.Generation) *snap {
	return &snap{version: 0, state: &varplane.ScopeState{Scope: "a", Generation: floor}, failed: true}
}

func TestInstallRules(t *testing.T) {
	type step struct {
		name      string
		snap      *snap
		seq       func(tb *Table[snap, *testEntry]) uint64
		cold      bool
		wantGen   varplane.Generation // change delivered; 0: none
		wantVer   int                 // installed version afterwards; -2: not installed
		wantRegrs int
	}
	readSeq := func(tb *Table[snap, *testEntry]) uint64 { return tb.ReadSeq("a") }
	stale := func(tb *Table[snap, *testEntry]) uint64 { return tb.ReadSeq("a") - 1 }
	own := func(*Table[snap, *testEntry]) uint64 { return OwnSeq }
	cases := []struct {
		name  string
		steps []step
	}{
		{"unwritten scope is not installed", []step{
			{name: "no row", snap: at(-1, 0, ""), seq: readSeq, wantVer: -2},
		}},
		{"cold read installs without a change", []step{
			{name: "cold", snap: at(3, 2, "r2"), seq: readSeq, cold: true, wantVer: 3},
		}},
		{"first commit is delivered", []step{
			{name: "commit", snap: at(1, 1, "r1"), seq: readSeq, wantGen: 1, wantVer: 1},
		}},
		{"a new entry at generation 0 is not delivered", []step{
			{name: "row without a generation", snap: at(1, 0, ""), seq: readSeq, wantVer: 1},
		}},
		{"newer head replaces and is delivered", []step{
			{name: "first", snap: at(1, 1, "r1"), seq: readSeq, wantGen: 1, wantVer: 1},
			{name: "second", snap: at(2, 2, "r2"), seq: readSeq, wantGen: 2, wantVer: 2},
		}},
		{"the same head only confirms", []step{
			{name: "first", snap: at(1, 1, "r1"), seq: readSeq, wantGen: 1, wantVer: 1},
			{name: "again", snap: at(1, 1, "r1"), seq: readSeq, wantVer: 1},
		}},
		{"a new version at the same generation installs without a change", []step{
			{name: "first", snap: at(1, 1, "r1"), seq: readSeq, wantGen: 1, wantVer: 1},
			{name: "rejection recorded", snap: at(2, 1, "r1"), seq: readSeq, wantVer: 2},
		}},
		{"an older head read after a newer install is dropped", []step{
			{name: "first", snap: at(1, 1, "r1"), seq: readSeq, wantGen: 1, wantVer: 1},
			{name: "second", snap: at(2, 2, "r2"), seq: readSeq, wantGen: 2, wantVer: 2},
			{name: "late read of the first", snap: at(1, 1, "r1"), seq: stale, wantVer: 2},
		}},
		{"an older head read against the installed one is a regression, installed", []step{
			{name: "first", snap: at(5, 5, "r5"), seq: readSeq, wantGen: 5, wantVer: 5},
			{name: "restore", snap: at(3, 3, "r3"), seq: readSeq, wantGen: 3, wantVer: 3, wantRegrs: 1},
		}},
		{"a read that raced with a failure does not clear it; the next read does", []step{
			{name: "vanished head, read first", snap: failedAt(2), seq: readSeq, cold: true, wantVer: 0},
			{name: "read begun before the head vanished", snap: at(2, 2, "r2"), seq: stale, wantVer: 0},
			{name: "read begun after: the head is back", snap: at(2, 2, "r2"), seq: readSeq, wantVer: 2},
		}},
		{"an own commit replaces a failure", []step{
			{name: "vanished head", snap: failedAt(2), seq: readSeq, cold: true, wantVer: 0},
			{name: "own commit at the floor", snap: at(3, 3, "r3"), seq: own, wantGen: 3, wantVer: 3},
		}},
		{"an own commit older than the installed head is dropped", []step{
			{name: "other replica's newer", snap: at(4, 4, "r4"), seq: readSeq, wantGen: 4, wantVer: 4},
			{name: "own, older", snap: at(3, 3, "r3"), seq: own, wantVer: 4},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb, regs := newTestTable()
			for _, st := range c.steps {
				ch, got := tb.InstallLocked(Req[snap]{Scope: "a", Snap: st.snap, Seq: st.seq(tb), Cold: st.cold})
				switch {
				case st.wantGen == 0 && ch != nil:
					t.Fatalf("%s: change %+v, want none", st.name, ch)
				case st.wantGen != 0 && (ch == nil || ch.Generation != st.wantGen || ch.Scope != "a"):
					t.Fatalf("%s: change %+v, want generation %d", st.name, ch, st.wantGen)
				case st.wantGen != 0 && (ch.Head == nil) != (st.snap.state.Head == nil):
					t.Fatalf("%s: change head %+v, want %+v", st.name, ch.Head, st.snap.state.Head)
				}
				e := tb.Entry("a")
				if st.wantVer == -2 {
					if e != nil {
						t.Fatalf("%s: installed %+v, want nothing", st.name, e.Snap.Load())
					}
					if got != st.snap {
						t.Fatalf("%s: answer is not the snapshot read", st.name)
					}
					continue
				}
				if e == nil || e.Snap.Load().version != st.wantVer || got.version != st.wantVer {
					t.Fatalf("%s: installed %+v (answer %+v), want version %d", st.name, e, got, st.wantVer)
				}
				if len(*regs) != st.wantRegrs || tb.Regressions() != uint64(st.wantRegrs) {
					t.Fatalf("%s: regressions %v (%d), want %d", st.name, *regs, tb.Regressions(), st.wantRegrs)
				}
			}
		})
	}
}

func TestReplaceLocked(t *testing.T) {
	tb, _ := newTestTable()
	if tb.ReplaceLocked("a", 0, at(9, 9, "")) {
		t.Fatal("replaced a scope that is not installed")
	}
	tb.InstallLocked(Req[snap]{Scope: "a", Snap: at(1, 1, "r1")})
	seq := tb.ReadSeq("a")
	if tb.ReplaceLocked("a", seq-1, at(7, 1, "")) {
		t.Fatal("replaced with a stale install count")
	}
	if !tb.ReplaceLocked("a", seq, at(7, 1, "")) || tb.Entry("a").Snap.Load().version != 7 || tb.ReadSeq("a") != seq+1 {
		t.Fatalf("replace: %+v seq %d", tb.Entry("a").Snap.Load(), tb.ReadSeq("a"))
	}
}

func TestScopesLagDelete(t *testing.T) {
	tb, _ := newTestTable()
	for _, sc := range []varplane.Scope{"c", "a", "b.x", "b"} {
		tb.InstallLocked(Req[snap]{Scope: sc, Snap: at(1, 1, "r")})
	}
	got := tb.Scopes()
	want := []varplane.Scope{"a", "b", "b.x", "c"}
	if len(got) != len(want) {
		t.Fatalf("scopes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("scopes %v, want %v", got, want)
		}
	}
	old := time.Now().Add(-time.Hour).UnixNano()
	tb.Entry("b").Confirmed.Store(old)
	if n, lag := tb.Summary(); n != 4 || lag < 59*time.Minute {
		t.Fatalf("summary %d %v, want 4 and about an hour", n, lag)
	}
	if l := tb.Lag(); len(l) != 4 || l["b"] < 59*time.Minute || l["a"] > time.Minute {
		t.Fatalf("lag %v", l)
	}
	tb.ConfirmIf("b", func(*snap) bool { return true })
	if l := tb.Lag()["b"]; l > time.Minute {
		t.Fatalf("lag after ConfirmIf %v", l)
	}
	tb.Delete("b")
	if tb.Entry("b") != nil || tb.ReadSeq("b") != 0 || len(tb.Scopes()) != 3 {
		t.Fatal("b still installed after Delete")
	}
}

func TestLogLags(t *testing.T) {
	tb, _ := newTestTable()
	for _, sc := range []varplane.Scope{"fresh", "warn", "bad"} {
		tb.InstallLocked(Req[snap]{Scope: sc, Snap: at(1, 1, "r")})
	}
	now := time.Now()
	tb.Entry("warn").Confirmed.Store(now.Add(-2 * time.Minute).UnixNano())
	tb.Entry("bad").Confirmed.Store(now.Add(-10 * time.Minute).UnixNano())
	logged := map[varplane.Scope]bool{}
	logf := func(scope varplane.Scope, s *snap, lag time.Duration, escalated bool) {
		if s == nil || lag <= 0 {
			t.Errorf("%s: snapshot %v lag %v", scope, s, lag)
		}
		logged[scope] = escalated
	}
	tb.LogLags(time.Minute, 5*time.Minute, logf)
	if len(logged) != 2 || logged["warn"] || !logged["bad"] {
		t.Fatalf("first pass logged %v, want warn (not escalated) and bad (escalated)", logged)
	}
	clear(logged)
	tb.LogLags(time.Minute, 5*time.Minute, logf)
	if len(logged) != 0 {
		t.Fatalf("second pass within a minute logged %v", logged)
	}
}

func TestCommitKind(t *testing.T) {
	if k := CommitKind([]varplane.ScopeChange{{Head: &varplane.Head{}}, {}}); k != varplane.EventActivated {
		t.Errorf("head set: %s", k)
	}
	if k := CommitKind([]varplane.ScopeChange{{}, {Head: &varplane.Head{}}}); k != varplane.EventDeactivated {
		t.Errorf("first without head: %s", k)
	}
}

// TestInstallConcurrent: installs under one lock from many goroutines and
// lock-free reads never see a version go back when every read is newer.
func TestInstallConcurrent(t *testing.T) {
	tb, regs := newTestTable()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := 1; v <= 200; v++ {
				if v%8 != w {
					continue
				}
				mu.Lock()
				tb.InstallLocked(Req[snap]{Scope: "a", Snap: at(v, varplane.Generation(v), "r"), Seq: OwnSeq})
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := 0
		for range 2000 {
			if e := tb.Entry("a"); e != nil {
				v := e.Snap.Load().version
				if v < last {
					t.Errorf("read version %d after %d", v, last)
					return
				}
				last = v
			}
		}
	}()
	wg.Wait()
	if len(*regs) != 0 {
		t.Fatalf("regressions %v with own-commit installs", *regs)
	}
	if v := tb.Entry("a").Snap.Load().version; v != 200 {
		t.Fatalf("installed version %d, want 200", v)
	}
}

// TestAbsentBounded: snapshots of scopes the server holds nothing for are
// installed up to MaxAbsent, counted out again when a head replaces them
// or they are deleted, and past the bound are answered without installing.
func TestAbsentBounded(t *testing.T) {
	tb, _ := newTestTable()
	tb.rules.MaxAbsent = 2
	none := func() *snap { return at(-1, 0, "") }
	for _, sc := range []varplane.Scope{"a", "b", "c"} {
		if ch, _ := tb.InstallLocked(Req[snap]{Scope: sc, Snap: none(), Cold: true}); ch != nil {
			t.Fatalf("%s: absent install delivered %+v", sc, ch)
		}
	}
	if tb.Entry("a") == nil || tb.Entry("b") == nil || tb.Entry("c") != nil || tb.Absent() != 2 {
		t.Fatalf("installed a %v b %v c %v, absent %d; want a and b, 2", tb.Entry("a"), tb.Entry("b"), tb.Entry("c"), tb.Absent())
	}
	// The first commit of an absent scope replaces it and is delivered.
	ch, _ := tb.InstallLocked(Req[snap]{Scope: "a", Snap: at(1, 1, "r1"), Seq: tb.ReadSeq("a")})
	if ch == nil || ch.Generation != 1 || tb.Absent() != 1 {
		t.Fatalf("first commit of an absent scope: change %+v, absent %d", ch, tb.Absent())
	}
	if tb.InstallLocked(Req[snap]{Scope: "c", Snap: none(), Cold: true}); tb.Entry("c") == nil || tb.Absent() != 2 {
		t.Fatalf("room made by a commit not used: absent %d", tb.Absent())
	}
	tb.Delete("b")
	if tb.Absent() != 1 {
		t.Fatalf("absent after Delete %d, want 1", tb.Absent())
	}
	tb.Delete("a") // a head: the count does not move
	if tb.Absent() != 1 {
		t.Fatalf("absent after deleting a head %d, want 1", tb.Absent())
	}
	// A head that loses its row (a restore) counts as absent, past the bound
	// too: the server's state wins.
	tb.rules.MaxAbsent = 1
	tb.InstallLocked(Req[snap]{Scope: "d", Snap: at(3, 3, "r3")})
	tb.InstallLocked(Req[snap]{Scope: "d", Snap: none(), Seq: tb.ReadSeq("d")})
	if e := tb.Entry("d"); e == nil || e.Snap.Load().version != -1 || tb.Absent() != 2 {
		t.Fatalf("head that lost its row: %+v, absent %d", e, tb.Absent())
	}
	if !tb.ReplaceLocked("d", tb.ReadSeq("d"), at(4, 4, "r4")) || tb.Absent() != 1 {
		t.Fatalf("ReplaceLocked of an absent entry: absent %d, want 1", tb.Absent())
	}
}

func TestConfirmIf(t *testing.T) {
	tb, _ := newTestTable()
	if tb.ConfirmIf("a", func(*snap) bool { return true }) {
		t.Fatal("confirmed a scope that is not installed")
	}
	tb.InstallLocked(Req[snap]{Scope: "a", Snap: at(2, 2, "r2")})
	old := time.Now().Add(-time.Hour).UnixNano()
	tb.Entry("a").Confirmed.Store(old)
	if tb.ConfirmIf("a", func(s *snap) bool { return s.version >= 3 }) || tb.Entry("a").Confirmed.Load() != old {
		t.Fatal("confirmed a head the predicate refuses")
	}
	if !tb.ConfirmIf("a", func(s *snap) bool { return s.version >= 2 }) || tb.Entry("a").Confirmed.Load() == old {
		t.Fatal("did not confirm a head the predicate holds")
	}
	if e := NewEntry[snap](); e == nil || e.Snap.Load() != nil || e.Base() != e {
		t.Fatal("NewEntry is not an empty entry")
	}
}

// TestHoldFollows: without Hold a table follows every scope; once a cache
// holds it, only the scopes installed and those the cache wants.
func TestHoldFollows(t *testing.T) {
	tb, _ := newTestTable()
	for _, sc := range []varplane.Scope{"a", "b", "c"} {
		if !tb.Follows(sc) {
			t.Fatalf("an unheld table does not follow %s", sc)
		}
	}
	tb.InstallLocked(Req[snap]{Scope: "a", Snap: at(1, 1, "r1")})
	tb.Hold(func(sc varplane.Scope) bool { return sc == "b" })
	for _, c := range []struct {
		scope varplane.Scope
		want  bool
	}{{"a", true}, {"b", true}, {"c", false}} {
		if got := tb.Follows(c.scope); got != c.want {
			t.Errorf("Follows(%s) = %v, want %v", c.scope, got, c.want)
		}
	}
	tb.Delete("a")
	if tb.Follows("a") {
		t.Errorf("Follows(a) after it was dropped = true")
	}
}

// TestHoldOnce: a held table refuses a second Hold (varplane.ErrHeld) and
// keeps the first's choice; release gives it back, and it follows every
// scope until it is held again; a second release is harmless.
func TestHoldOnce(t *testing.T) {
	tb, _ := newTestTable()
	release, err := tb.Hold(func(sc varplane.Scope) bool { return sc == "a" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Hold(func(varplane.Scope) bool { return true }); !errors.Is(err, varplane.ErrHeld) {
		t.Fatalf("a second Hold: %v, want ErrHeld", err)
	}
	if !tb.Follows("a") || tb.Follows("b") {
		t.Fatal("the refused Hold changed what the table follows")
	}
	release()
	release()
	if !tb.Follows("b") {
		t.Fatal("a released table does not follow every scope")
	}
	if _, err := tb.Hold(func(sc varplane.Scope) bool { return sc == "b" }); err != nil || tb.Follows("a") {
		t.Fatalf("Hold after release: %v, follows a %v", err, tb.Follows("a"))
	}
}
