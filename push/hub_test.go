package push_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
)

func TestFilterMatch(t *testing.T) {
	f := push.Filter{Keys: []varplane.Scope{"a.b"}, Groups: []varplane.Scope{"g"}, Prefixes: []varplane.Scope{"p.q"}}
	tests := []struct {
		scope varplane.Scope
		want  bool
	}{
		{"a.b", true},
		{"a.b.c", false}, // a key matches exactly
		{"a", false},
		{"g", true},
		{"g.x", false}, // a group matches itself only
		{"p.q", true},
		{"p.q.r", true},
		{"p.q.r.s", true},
		{"p.qr", false},
		{"p", false},
	}
	for _, tt := range tests {
		if got := f.Match(tt.scope); got != tt.want {
			t.Errorf("Match(%q) = %v, want %v", tt.scope, got, tt.want)
		}
	}
}

func TestFilterValidate(t *testing.T) {
	tests := []struct {
		name string
		f    push.Filter
		ok   bool
	}{
		{"empty", push.Filter{}, false},
		{"bad key", push.Filter{Keys: []varplane.Scope{"a..b"}}, false},
		{"bad prefix", push.Filter{Prefixes: []varplane.Scope{"a b"}}, false},
		{"ok", push.Filter{Groups: []varplane.Scope{"g"}}, true},
		{"group as a key", push.Filter{Keys: []varplane.Scope{"g"}}, false},
		{"key as a group", push.Filter{Groups: []varplane.Scope{"g.k"}}, false},
		{"single-segment prefix", push.Filter{Prefixes: []varplane.Scope{"g"}}, true},
		{"at the bound", push.Filter{Keys: manyKeys(push.MaxFilterScopes)}, true},
		{"too many", push.Filter{Keys: manyKeys(push.MaxFilterScopes + 1)}, false},
	}
	for _, tt := range tests {
		err := tt.f.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("%s: code = %s, want bad-request", tt.name, varplane.ErrorCode(err))
		}
	}
}

func manyKeys(n int) []varplane.Scope {
	out := make([]varplane.Scope, n)
	for i := range out {
		out[i] = varplane.Scope("k.s" + strconv.Itoa(i))
	}
	return out
}

func TestSnapshotOnSubscribe(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "a.one", `{"v":1}`)
	activate(t, e, "a.one", `{"v":2}`)
	activate(t, e, "p.x", `1`)
	activate(t, e, "p.y.z", `2`)
	activate(t, e, "p.gone", `3`)
	deactivate(t, e, "p.gone")
	activate(t, e, "q.other", `4`)

	tests := []struct {
		name string
		f    push.Filter
		held map[varplane.Scope]varplane.Generation
		want string
	}{
		{"keys with and without head", push.Filter{Keys: []varplane.Scope{"a.one", "a.none"}}, nil, "snapshot:a.one@2 a.none@0!"},
		{"prefix skips headless scopes the client never saw", push.Filter{Prefixes: []varplane.Scope{"p"}}, nil, "snapshot:p.x@1 p.y.z@1"},
		{"held newer or equal is not resent", push.Filter{Keys: []varplane.Scope{"a.one"}}, map[varplane.Scope]varplane.Generation{"a.one": 2}, "snapshot:"},
		{"held older is resent", push.Filter{Keys: []varplane.Scope{"a.one"}}, map[varplane.Scope]varplane.Generation{"a.one": 1}, "snapshot:a.one@2"},
		{"missed no-head is sent", push.Filter{Prefixes: []varplane.Scope{"p.gone"}}, map[varplane.Scope]varplane.Generation{"p.gone": 1}, "snapshot:p.gone@2!"},
		{"held beyond current is never undercut", push.Filter{Keys: []varplane.Scope{"a.one"}}, map[varplane.Scope]varplane.Generation{"a.one": 9}, "snapshot:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := subscribe(t, h, tt.f, tt.held)
			if got := describe(next(t, s)); got != tt.want {
				t.Errorf("snapshot = %q, want %q", got, tt.want)
			}
			mustEmpty(t, s)
		})
	}
}

// A client that says it holds nothing learns nothing of headless prefix scopes.
func TestSnapshotPrefixHeadlessUnseen(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "p.gone", `3`)
	deactivate(t, e, "p.gone")
	s := subscribe(t, h, push.Filter{Prefixes: []varplane.Scope{"p"}}, map[varplane.Scope]varplane.Generation{})
	if got, want := describe(next(t, s)), "snapshot:"; got != want {
		t.Errorf("snapshot = %q, want %q", got, want)
	}
}

func TestCommitsReachMatchingSubscribers(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "g.k1", `1`)
	activate(t, e, "g.k2", `2`)
	activate(t, e, "g", `{"g.x":1}`)

	group := subscribe(t, h, push.Filter{Groups: []varplane.Scope{"g"}}, nil)
	key := subscribe(t, h, push.Filter{Keys: []varplane.Scope{"g.k1"}}, nil)
	prefix := subscribe(t, h, push.Filter{Prefixes: []varplane.Scope{"g"}}, nil)
	other := subscribe(t, h, push.Filter{Keys: []varplane.Scope{"z.z"}}, nil)
	for _, s := range []*push.Subscription{group, key, prefix, other} {
		next(t, s) // snapshots
	}

	activate(t, e, "g.k1", `10`)
	if got, want := describe(next(t, key)), "g.k1@2"; got != want {
		t.Errorf("key batch = %q, want %q", got, want)
	}
	if got, want := describe(next(t, prefix)), "g.k1@2"; got != want {
		t.Errorf("prefix batch = %q, want %q", got, want)
	}
	mustEmpty(t, group)

	deactivate(t, e, "g")
	if got, want := describe(next(t, prefix)), "g@2! g.k1@3! g.k2@2!"; got != want {
		t.Errorf("prefix deactivation batch = %q, want %q", got, want)
	}
	if got, want := describe(next(t, group)), "g@2!"; got != want {
		t.Errorf("group deactivation batch = %q, want %q", got, want)
	}
	if got, want := describe(next(t, key)), "g.k1@3!"; got != want {
		t.Errorf("key deactivation batch = %q, want %q", got, want)
	}
	mustEmpty(t, other)
}

func TestCoalescesToNewestPerScope(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	s := subscribe(t, h, push.Filter{Prefixes: []varplane.Scope{"a"}}, nil)
	next(t, s)
	activate(t, e, "a.x", `1`)
	activate(t, e, "a.y", `1`)
	activate(t, e, "a.x", `2`)
	activate(t, e, "a.x", `3`)
	b := next(t, s)
	if got, want := describe(b), "a.x@3 a.y@1"; got != want {
		t.Errorf("batch = %q, want %q", got, want)
	}
	if got, want := string(b.Updates[0].Head.Document), `3`; got != want {
		t.Errorf("a.x document = %s, want %s", got, want)
	}
	if got, want := h.Stats().Coalesced, uint64(2); got != want {
		t.Errorf("Coalesced = %d, want %d", got, want)
	}
}

func TestResyncWhenQueueOverflows(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxPending: 2})
	s := subscribe(t, h, push.Filter{Prefixes: []varplane.Scope{"a"}}, nil)
	next(t, s)
	activate(t, e, "a.x", `1`)
	activate(t, e, "a.y", `1`)
	activate(t, e, "a.z", `1`) // third distinct scope: past MaxPending
	st := h.Stats()
	if st.Resyncs != 1 || st.Dropped != 3 {
		t.Errorf("Resyncs, Dropped = %d, %d; want 1, 3", st.Resyncs, st.Dropped)
	}
	activate(t, e, "a.x", `2`) // arrives after the resync: in the queue again
	b := next(t, s)
	if got, want := describe(b), "snapshot:a.x@2 a.y@1 a.z@1"; got != want {
		t.Errorf("resync batch = %q, want %q", got, want)
	}
	// a.x@2 is both in the snapshot and queued: it is not delivered twice.
	mustEmpty(t, s)
}

func TestStalledSubscriberIsDisconnected(t *testing.T) {
	e := newEngine(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	h := newHub(t, e, push.Options{StallTimeout: time.Minute, Now: clock})
	stalled := subscribe(t, h, push.Filter{Keys: []varplane.Scope{"a.x"}}, nil)
	healthy := subscribe(t, h, push.Filter{Keys: []varplane.Scope{"a.x"}}, nil)
	next(t, stalled)
	next(t, healthy)

	activate(t, e, "a.x", `1`)
	if got, want := describe(next(t, healthy)), "a.x@1"; got != want {
		t.Errorf("healthy = %q, want %q", got, want)
	}
	now.Add(int64(2 * time.Minute))
	activate(t, e, "a.x", `2`) // stalled still holds a.x@1 from two minutes ago
	select {
	case <-stalled.Done():
	default:
		t.Fatal("stalled subscriber is still connected")
	}
	if !errors.Is(stalled.Err(), push.ErrSlowSubscriber) {
		t.Errorf("Err = %v, want ErrSlowSubscriber", stalled.Err())
	}
	if got, want := push.Reason(stalled.Err()), "slow-subscriber"; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
	if got, want := describe(next(t, healthy)), "a.x@2"; got != want {
		t.Errorf("healthy = %q, want %q", got, want)
	}
	st := h.Stats()
	if st.Subscribers != 1 || st.Disconnects != 1 || st.Dropped != 1 {
		t.Errorf("Subscribers, Disconnects, Dropped = %d, %d, %d; want 1, 1, 1", st.Subscribers, st.Disconnects, st.Dropped)
	}
}

func TestSubscriberCap(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribers: 2})
	f := push.Filter{Keys: []varplane.Scope{"a.x"}}
	subscribe(t, h, f, nil)
	second := subscribe(t, h, f, nil)
	_, err := h.Subscribe(context.Background(), f, nil)
	if !errors.Is(err, push.ErrTooManySubscribers) {
		t.Fatalf("third Subscribe = %v, want ErrTooManySubscribers", err)
	}
	if got, want := varplane.ErrorCode(err), varplane.Code("too-many-subscribers"); got != want {
		t.Errorf("code = %q, want %q", got, want)
	}
	if got, want := wire.Status(varplane.ErrorCode(err)), 503; got != want {
		t.Errorf("status = %d, want %d", got, want)
	}
	second.Close()
	if got, want := h.Stats().Subscribers, int64(1); got != want {
		t.Errorf("Subscribers = %d, want %d", got, want)
	}
	subscribe(t, h, f, nil) // a freed slot is usable again
}

func TestCloseEndsSubscriptions(t *testing.T) {
	e := newEngine(t)
	h := push.New(e, push.Options{})
	s, err := h.Subscribe(context.Background(), push.Filter{Keys: []varplane.Scope{"a.x"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	<-s.Done()
	if !errors.Is(s.Err(), push.ErrHubClosed) {
		t.Errorf("Err = %v, want ErrHubClosed", s.Err())
	}
	if _, err := h.Subscribe(context.Background(), push.Filter{Keys: []varplane.Scope{"a.x"}}, nil); !errors.Is(err, push.ErrHubClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrHubClosed", err)
	}
	activate(t, e, "a.x", `1`) // no listener left: must not panic
}

// Concurrent commits and subscriptions: every subscriber sees each scope's
// generations strictly increasing and ends at the final one.
func TestConcurrentNeverOlderAndConverges(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxPending: 4})
	scopes := []varplane.Scope{"c.a", "c.b", "c.c", "c.d", "c.e", "c.f"}
	const rounds = 30
	var wg sync.WaitGroup
	results := make(chan error, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := h.Subscribe(ctx, push.Filter{Prefixes: []varplane.Scope{"c"}}, nil)
			if err != nil {
				results <- err
				return
			}
			defer s.Close()
			seen := map[varplane.Scope]varplane.Generation{}
			for {
				b, err := s.Next(ctx)
				if err != nil {
					results <- err
					return
				}
				for _, u := range b.Updates {
					if u.Generation <= seen[u.Scope] {
						results <- errors.New("generation went backwards or repeated for " + string(u.Scope))
						return
					}
					seen[u.Scope] = u.Generation
				}
				done := true
				for _, sc := range scopes {
					if seen[sc] != rounds {
						done = false
					}
				}
				if done {
					results <- nil
					return
				}
			}
		}()
	}
	var cw sync.WaitGroup
	for _, sc := range scopes {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for r := 0; r < rounds; r++ {
				if _, err := tryActivate(e, sc, `1`); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	cw.Wait()
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Error(err)
		}
	}
}

// A consumer that waits on Ready alone must hear about the end of its
// subscription and about its own Wake calls.
func TestReadyFiresOnWakeAndOnEnd(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	s := subscribe(t, h, push.Filter{Keys: []varplane.Scope{"a.x"}}, nil)
	next(t, s) // the snapshot; it consumed the snapshot's signal
	select {
	case <-s.Ready():
		if _, ok, _ := s.TryNext(context.Background()); ok {
			t.Fatal("a batch is pending with no commit")
		}
	default:
	}
	s.Wake()
	select {
	case <-s.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Ready did not fire after Wake")
	}
	s.Close()
	select {
	case <-s.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Ready did not fire when the subscription ended")
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Ready fired for the end before Done was closed")
	}
}

func TestNotifyReplacesReady(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	var calls atomic.Int32
	s, err := h.SubscribeWith(context.Background(), push.Filter{Keys: []varplane.Scope{"app.flag"}}, nil,
		push.SubscribeOptions{Notify: func() { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if calls.Load() == 0 {
		t.Fatal("the first snapshot did not notify")
	}
	if b, ok, err := s.TryNext(context.Background()); err != nil || !ok || !b.Snapshot {
		t.Fatalf("first batch: %+v %v %v", b, ok, err)
	}
	before := calls.Load()
	g := activate(t, e, "app.flag", `{"on":true}`)
	if calls.Load() == before {
		t.Fatal("a commit did not notify")
	}
	b, ok, err := s.TryNext(context.Background())
	if err != nil || !ok || len(b.Updates) != 1 || b.Updates[0].Generation != g {
		t.Fatalf("after commit: %+v %v %v", b, ok, err)
	}
	activate(t, e, "app.other", `{}`) // not selected: no notification
	before = calls.Load()
	activate(t, e, "app.other", `{"x":1}`)
	if calls.Load() != before {
		t.Fatal("a commit the filter does not select notified")
	}
	s.Wake()
	if calls.Load() != before+1 {
		t.Fatal("Wake did not notify")
	}
	select {
	case <-s.Ready():
		t.Fatal("Ready received although Notify replaces it")
	default:
	}
	h.Close()
	if calls.Load() != before+2 {
		t.Fatalf("the end of the subscription notified %d times, want once", calls.Load()-before-1)
	}
	if _, _, err := s.TryNext(context.Background()); !errors.Is(err, push.ErrHubClosed) {
		t.Fatalf("TryNext after close: %v", err)
	}
}
