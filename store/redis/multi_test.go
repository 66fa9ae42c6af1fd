package redis

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/syncbuf"
	"github.com/varplane/varplane/store/storetest"
)

// The multi-replica helpers, shared with the other stores' tests.
var (
	watchChan  = storetest.WatchCommits
	nextCommit = storetest.NextCommit
	create     = storetest.MustCreate
	activate   = storetest.MustActivate
	state      = storetest.MustState
	kinds      = storetest.Kinds
)

// TestTwoInstances: a commit through A is installed in B and fires B's
// Watch, without B reading anything itself; a subtree deactivation reaches B
// as one commit naming every cleared scope.
func TestTwoInstances(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{})
	storetest.TwoReplicas(t, a, b, b.Lag)
	// A's own echo was a no-op: A delivered each commit exactly once.
	if st := a.Stats(); st.WatchCommits != 3 {
		t.Errorf("A delivered %d commits, want 3", st.WatchCommits)
	}
}

// TestRevalidationAloneConverges: an instance that hears no invalidation at
// all still installs a commit within about one revalidation interval, and its
// Watch fires.
func TestRevalidationAloneConverges(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{RevalidateInterval: 200 * time.Millisecond, noSubscribe: true})
	bw := watchChan(t, b)
	rev := create(t, a, "reval.k", 1)
	if got := state(t, b, "reval.k"); got.Generation != 0 || got.Head != nil {
		t.Fatalf("B state = %+v before activation", got)
	}
	activate(t, a, "reval.k", rev, 0)
	state(t, b, "reval.k") // installs the scope (a cold load), no commit
	r2 := create(t, a, "reval.k", 2)
	activate(t, a, "reval.k", r2, 1)
	c := nextCommit(t, bw, 3*time.Second)
	if c.Changes[0].Generation != 2 || c.Changes[0].Head.Revision != r2 {
		t.Fatalf("B got %+v, want generation 2", c.Changes[0])
	}
	if st := b.Stats(); st.ConfirmChanged == 0 || st.RevalidationPasses == 0 {
		t.Errorf("stats = %+v, want a pass that found the change", st)
	}
}

// TestPubSubKilled: B's subscription is killed (CLIENT KILL TYPE pubsub, on a
// private server) and B still converges on a commit made meanwhile.
func TestPubSubKilled(t *testing.T) {
	p := startPrivateRedis(t)
	u := p.url("")
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{RevalidateInterval: 200 * time.Millisecond})
	bw := watchChan(t, b)
	rev := create(t, a, "kill.k", 1)
	activate(t, a, "kill.k", rev, 0)
	nextCommit(t, bw, 5*time.Second)

	raw := rawClient(t, u)
	killed, err := raw.Do(context.Background(), raw.B().ClientKill().TypePubsub().Build()).AsInt64()
	if err != nil || killed < 2 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want both subscribers killed", killed, err)
	}
	r2 := create(t, a, "kill.k", 2)
	activate(t, a, "kill.k", r2, 1)
	c := nextCommit(t, bw, 3*time.Second)
	if c.Changes[0].Generation != 2 {
		t.Fatalf("B got %+v, want generation 2", c.Changes[0])
	}
	eventually(t, 5*time.Second, "B to resubscribe", func() bool { return b.Stats().Subscriptions >= 2 })
	// After resubscribing, messages flow again.
	r3 := create(t, a, "kill.k", 3)
	activate(t, a, "kill.k", r3, 2)
	if c := nextCommit(t, bw, 3*time.Second); c.Changes[0].Generation != 3 {
		t.Fatalf("B got %+v, want generation 3", c.Changes[0])
	}
}

// TestRedisRestart: with the private Redis down, installed heads are served,
// reads of Redis and every mutation fail with store-unavailable, and nothing
// acknowledged is lost across the restart (appendonly, fsync always).
func TestRedisRestart(t *testing.T) {
	p := startPrivateRedis(t)
	u := p.url("")
	logs := &syncbuf.Buffer{}
	opts := Options{CommandTimeout: 500 * time.Millisecond, RevalidateInterval: 100 * time.Millisecond}
	aopts := opts
	aopts.LagWarn, aopts.LagEscalate = 150*time.Millisecond, 10*time.Second
	aopts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	a := openStore(t, u, aopts)
	rev := create(t, a, "rs.k", 1)
	activate(t, a, "rs.k", rev, 0)
	r2 := create(t, a, "rs.k", 2)

	p.stop()
	ctx := context.Background()
	if got := state(t, a, "rs.k"); got.Generation != 1 || got.Head == nil || got.Head.Revision != rev {
		t.Fatalf("installed head not served while Redis is down: %+v", got)
	}
	err := a.Append(ctx, storetest.ActivatedEvent("rs.k", r2, 1), 1)
	if varplane.ErrorCode(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("activate while down = %v, want store-unavailable", err)
	}
	if err := a.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent("rs.k", 1), 1); varplane.ErrorCode(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("deactivate while down = %v, want store-unavailable", err)
	}
	if _, err := a.History(ctx, "rs.k"); varplane.ErrorCode(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("history while down = %v, want store-unavailable", err)
	}
	if _, err := a.State(ctx, "rs.never"); varplane.ErrorCode(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("cold read while down = %v, want store-unavailable (never an empty state)", err)
	}
	time.Sleep(300 * time.Millisecond) // a few failed passes
	if lag := a.Lag()["rs.k"]; lag < 200*time.Millisecond {
		t.Errorf("lag = %v while Redis is down, want it to grow", lag)
	}
	eventually(t, 3*time.Second, "a lag warning", func() bool {
		return strings.Contains(logs.String(), "has not been confirmed by Redis")
	})

	p.start()
	eventually(t, 5*time.Second, "writes to succeed again", func() bool {
		return a.Append(ctx, storetest.ActivatedEvent("rs.k", r2, 1), 1) == nil
	})
	h, err := a.History(ctx, "rs.k")
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(h); got != "revision-created,activated,revision-created,activated" {
		t.Fatalf("history after restart = %s", got)
	}
	eventually(t, 2*time.Second, "lag to shrink", func() bool { return a.Lag()["rs.k"] < 150*time.Millisecond })
	// A second instance opened after the restart reads the same state.
	b := openStore(t, u, opts)
	if got := state(t, b, "rs.k"); got.Generation != 2 || got.Head.Revision != r2 {
		t.Fatalf("after restart B reads %+v", got)
	}
}

// TestCorruptValueFailsClosed: a value written with plain SET fails the read
// (an error, never a zero state), stays in Redis, and an installed head whose
// value becomes unreadable fails closed at the next pass.
func TestCorruptValueFailsClosed(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{RevalidateInterval: 100 * time.Millisecond})
	raw := rawClient(t, u)
	ctx := context.Background()

	rev := create(t, a, "bad.rec", 1)
	activate(t, a, "bad.rec", rev, 0)
	create(t, a, "bad.head", 2)
	activate(t, a, "bad.head", create(t, a, "bad.head", 2), 0)

	recKey := a.keys.revision("bad.rec", rev)
	headKey := a.keys.head("bad.head")
	for _, k := range []string{recKey, headKey} {
		if err := raw.Do(ctx, raw.B().Set().Key(k).Value("not json {").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	cold := openStore(t, u, Options{})
	for _, sc := range []varplane.Scope{"bad.rec", "bad.head"} {
		st, err := cold.State(ctx, sc)
		if err == nil {
			t.Fatalf("State(%s) of a corrupt value = %+v, want an error", sc, st)
		}
		if varplane.ErrorCode(err) != varplane.CodeDocumentFailed {
			t.Errorf("State(%s) = %v, want document-failed (503), not unavailable or internal", sc, err)
		}
	}
	if _, err := cold.Revision(ctx, "bad.rec", rev); varplane.ErrorCode(err) != varplane.CodeDocumentFailed {
		t.Errorf("Revision of a corrupt record = %v, want a decode error", err)
	}
	// The installed head of bad.head fails closed once a pass reads it.
	eventually(t, 3*time.Second, "installed corrupt head to fail closed", func() bool {
		_, err := a.State(ctx, "bad.head")
		return err != nil
	})
	for _, k := range []string{recKey, headKey} {
		v, err := raw.Do(ctx, raw.B().Get().Key(k).Build()).ToString()
		if err != nil || v != "not json {" {
			t.Errorf("corrupt value at %s = %q, %v; want it left in place", k, v, err)
		}
	}
	if st := cold.Stats(); st.DecodeErrors == 0 {
		t.Error("no decode error counted")
	}

	// A record whose document is nested past the reader's depth bound (no
	// accepted document is) fails the same way, without exhausting the stack.
	deepRev := create(t, a, "bad.deep", 3)
	n := varplane.MaxDepthCeiling + varplane.EnvelopeDepth + 1
	deep := `{"scope":"bad.deep","revision":"` + string(deepRev) + `","document":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `,"createdAt":"2026-12-02T00:00:00Z"}`
	deepKey := a.keys.revision("bad.deep", deepRev)
	if err := raw.Do(ctx, raw.B().Set().Key(deepKey).Value(deep).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(t, u, Options{}).Revision(ctx, "bad.deep", deepRev); varplane.ErrorCode(err) != varplane.CodeDocumentFailed {
		t.Errorf("Revision of a record nested past the bound = %v, want a decode error", err)
	}
	if v, err := raw.Do(ctx, raw.B().Get().Key(deepKey).Build()).ToString(); err != nil || v != deep {
		t.Errorf("the deep record was not left in place (%v)", err)
	}
}

// TestEvictionPolicy: a private Redis with allkeys-lru fails Open under
// both checks (warn never accepts allkeys-*); volatile-lru fails "fail" and
// opens under "warn" reported as not OK; a CONFIG SET at run time turns the
// indicator (an alert) off and on while reads go on.
func TestEvictionPolicy(t *testing.T) {
	p := startPrivateRedis(t, "--maxmemory-policy", "allkeys-lru")
	for _, mode := range []string{EvictionCheckFail, EvictionCheckWarn} {
		_, err := Open(context.Background(), p.url(""), Options{EvictionCheck: mode})
		if err == nil || varplane.ErrorCode(err) != varplane.CodeStoreUnavailable || !strings.Contains(err.Error(), "allkeys-lru") {
			t.Fatalf("Open(%s) under allkeys-lru = %v, want a store-unavailable error naming the policy", mode, err)
		}
	}
	v := startPrivateRedis(t, "--maxmemory-policy", "volatile-lru")
	if _, err := Open(context.Background(), v.url(""), Options{}); err == nil || !strings.Contains(err.Error(), "volatile-lru") {
		t.Fatalf("Open(fail) under volatile-lru = %v, want an error naming the policy", err)
	}
	s := openStore(t, v.url(""), Options{EvictionCheck: EvictionCheckWarn})
	if ok, detail := s.EvictionPolicyOK(); ok || !strings.Contains(detail, "volatile-lru") {
		t.Fatalf("EvictionPolicyOK = %v, %q; want false naming volatile-lru", ok, detail)
	}
	q := startPrivateRedis(t)
	ok := openStore(t, q.url(""), Options{RevalidateInterval: 20 * time.Millisecond})
	if ok, detail := ok.EvictionPolicyOK(); !ok || detail != "noeviction" {
		t.Fatalf("EvictionPolicyOK = %v, %q on a noeviction server", ok, detail)
	}
	rev := create(t, ok, "ev.x", 1)
	activate(t, ok, "ev.x", rev, 0)
	raw := rawClient(t, q.url(""))
	ctx := context.Background()
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", "allkeys-lru").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "the indicator to report allkeys-lru", func() bool {
		o, d := ok.EvictionPolicyOK()
		return !o && strings.Contains(d, "allkeys-lru")
	})
	if st := state(t, ok, "ev.x"); st.Generation != 1 {
		t.Fatalf("read while a node may evict = %+v, want it served", st)
	}
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", "noeviction").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "the indicator to recover", func() bool {
		o, _ := ok.EvictionPolicyOK()
		return o
	})
}

// TestOptionsValidated covers the bounds of the options and the URL.
func TestOptionsValidated(t *testing.T) {
	tests := []struct {
		name string
		url  string
		opts Options
	}{
		{"interval too small", "redis://127.0.0.1:1/0", Options{RevalidateInterval: time.Millisecond}},
		{"negative concurrency", "redis://127.0.0.1:1/0", Options{RevalidateConcurrency: -1}},
		{"eviction mode", "redis://127.0.0.1:1/0", Options{EvictionCheck: "maybe"}},
		{"prefix with a brace", "redis://127.0.0.1:1/0?prefix=a{b}", Options{}},
		{"bad scheme", "http://127.0.0.1:1/0", Options{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(context.Background(), tc.url, tc.opts)
			if varplane.ErrorCode(err) != varplane.CodeBadRequest {
				t.Fatalf("Open = %v, want bad-request", err)
			}
		})
	}
	for in, want := range map[string]string{"vp:": "vp", "vp": "vp", "a:b:": "a:b"} {
		p, _, _, err := parseURL("redis://127.0.0.1:1/0?prefix=" + in)
		if err != nil || p != want {
			t.Errorf("prefix %q = %q, %v; want %q (a trailing ':' removed)", in, p, err, want)
		}
	}
	if _, _, _, err := parseURL("redis://127.0.0.1:1/0?prefix=:"); err == nil {
		t.Error("prefix \":\" is accepted; it is empty once its ':' is removed")
	}
	o, warns, err := Options{RevalidateInterval: time.Hour}.normalise()
	if err != nil || o.RevalidateInterval != MaxRevalidateInterval || len(warns) != 1 {
		t.Fatalf("1h interval: %v %v %v, want clamped to 5m with a warning", o.RevalidateInterval, warns, err)
	}
	if _, err := Open(context.Background(), "redis://u:secret-pw@127.0.0.1:1/0", Options{CommandTimeout: 200 * time.Millisecond}); err == nil || strings.Contains(err.Error(), "secret-pw") {
		t.Fatalf("Open of an unreachable server = %v, want an error without the password", err)
	}
}

// TestRegressionInstalled: when Redis answers an older head than the one
// installed (a failover that lost a commit, simulated by restoring the old
// head fields and generation floor: a replica holds the slot as it was), the
// pass installs what Redis holds and counts a regression.
func TestRegressionInstalled(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{RevalidateInterval: 100 * time.Millisecond})
	raw := rawClient(t, u)
	ctx := context.Background()
	r1 := create(t, a, "reg.k", 1)
	activate(t, a, "reg.k", r1, 0)
	old, err := raw.Do(ctx, raw.B().Hgetall().Key(a.keys.head("reg.k")).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	r2 := create(t, a, "reg.k", 2)
	activate(t, a, "reg.k", r2, 1)
	// A failover brings back the head and its floor together: the floor is
	// lowered first, so that no revalidation pass sees the old head below
	// the newer floor (a vanished head, which is another test).
	if err := raw.Do(ctx, raw.B().Set().Key(a.keys.floor("reg.k")).Value(old["g"]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	cmd := raw.B().Hset().Key(a.keys.head("reg.k")).FieldValue()
	for k, v := range old {
		cmd = cmd.FieldValue(k, v)
	}
	if err := raw.Do(ctx, cmd.Build()).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "the regressed head to be installed", func() bool {
		st := state(t, a, "reg.k")
		return st.Generation == 1 && st.Head != nil && st.Head.Revision == r1
	})
	if got := a.Stats().Regressions; got != 1 {
		t.Errorf("regressions = %d, want 1", got)
	}
}

// TestStaleReplicaDelivers: a head that one of B's own writes (a create, a
// rejection) reads back, committed meanwhile through A, is delivered to
// B's Watch, B not following A (storetest.StaleReplicaDelivers).
func TestStaleReplicaDelivers(t *testing.T) {
	a, b := staleReplicas(t)
	storetest.StaleReplicaDelivers(t, a, b)
}
