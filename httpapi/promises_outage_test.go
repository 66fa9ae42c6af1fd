package httpapi_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/store/redis"
	"github.com/varplane/varplane/store/redis/redistest"
	"github.com/varplane/varplane/store/storetest"
)

// pausingStore is a Redis store that pauses its server (SIGSTOP) around
// one of its commits: before the commit numbered before (from 1), or right
// after the one numbered after returned. Zero disarms either; commits
// counts every commit call.
type pausingStore struct {
	*redis.Store
	srv           *redistest.Server
	before, after atomic.Int32
	commits       atomic.Int32
	paused        atomic.Bool
}

func (s *pausingStore) commit(fn func() error) error {
	n := s.commits.Add(1)
	if s.before.Load() == n {
		s.pause()
	}
	err := fn()
	if s.after.Load() == n && err == nil {
		s.pause()
	}
	return err
}

func (s *pausingStore) pause() {
	s.srv.Pause()
	s.paused.Store(true)
}

func (s *pausingStore) resume() {
	if s.paused.Swap(false) {
		s.srv.Resume()
	}
}

func (s *pausingStore) Unwrap() varplane.Store { return s.Store }

func (s *pausingStore) Append(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	return s.commit(func() error { return s.Store.Append(ctx, ev, expected) })
}

func (s *pausingStore) AppendSubtreeDeactivation(ctx context.Context, ev *varplane.Event, expected varplane.Generation) error {
	return s.commit(func() error { return s.Store.AppendSubtreeDeactivation(ctx, ev, expected) })
}

func (s *pausingStore) AppendPublish(ctx context.Context, created, activated *varplane.Event, expected varplane.Generation) (bool, error) {
	var ok bool
	err := s.commit(func() (err error) { ok, err = s.Store.AppendPublish(ctx, created, activated, expected); return err })
	return ok, err
}

// TestPausedStoreWrites holds promise (4), a 503 changed nothing, on a
// private Redis paused (SIGSTOP) during a publish, a reviewed change's
// publish, a schema bind and a token create, through the handler with
// every feature on: paused before the request, right before each commit
// the write makes, and right after each. The answer is 503
// store-unavailable, after which (the server continued) the store holds no
// trace of the write, or 504 outcome-unknown (whose explanation by the CLI
// is TestOutcomeUnknownExplained's); never a 503 after which the write is
// found done.
func TestPausedStoreWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis server")
	}
	if raceEnabled {
		// A minute of pauses of a private Redis, one write at a time: the
		// run without the detector checks every answer, and the detector
		// would only make CI's race step a minute longer.
		t.Skip("runs without the race detector (CI's go test ./... runs it)")
	}
	ops := []pausedOp{
		{name: "publish", setup: func(*promisePlane) (string, string, string) {
			return "POST", "/vars/admin/publish", `{"scope":"app.a","document":{"x":1},"expectedGeneration":0}`
		}},
		{name: "reviewed change publish", setup: func(p *promisePlane) (string, string, string) {
			p.must("PUT", "/vars/control/policies/app", `{"approvals":1}`)
			c := p.must("POST", "/vars/control/changes", `{"scope":"app.a","base":0,"document":{"x":1}}`)
			if st, _, raw := p.send(writerToken, "POST", fmt.Sprintf("/vars/control/changes/%s:approve", c["id"]), `{}`); st != 200 {
				t.Fatalf("approve: %d %s", st, raw)
			}
			return "POST", fmt.Sprintf("/vars/control/changes/%s:publish", c["id"]), ""
		}, finish: func(t *testing.T, v storeView) {
			if st := v.States["app.a"]; st.Head == nil || string(st.Head.Document) != `{"x":1}` {
				t.Errorf("the publish repeated: app.a holds %+v, want the change's document", st.Head)
			}
		}},
		{name: "schema bind", setup: func(*promisePlane) (string, string, string) {
			return "PUT", "/vars/admin/schemas/bindings/other", `{"schemaId":"strict"}`
		}},
		{name: "token create", setup: func(*promisePlane) (string, string, string) {
			return "POST", "/vars/access/tokens", `{"id":"ci","kinds":["read"],"prefixes":["app."]}`
		}},
		// Further writes of more than one commit, or of services of their own.
		{name: "canary window open", setup: func(p *promisePlane) (string, string, string) {
			c := p.must("POST", "/vars/control/changes", `{"scope":"app.w","base":0,"document":{"x":1}}`)
			return "POST", fmt.Sprintf("/vars/control/changes/%s:canary", c["id"]), `{"duration":"10m","minInstances":1}`
		}, finish: func(t *testing.T, v storeView) {
			for s, st := range v.States {
				if strings.HasPrefix(string(s), "varplane-control.change.") && st.Head != nil && strings.Contains(string(st.Head.Document), `"state":"canary"`) {
					return
				}
			}
			t.Error("the canary window opened again: no change records it")
		}},
		{name: "policy put", setup: func(*promisePlane) (string, string, string) {
			return "PUT", "/vars/control/policies/app", `{"approvals":1}`
		}},
		{name: "configuration create", setup: func(*promisePlane) (string, string, string) {
			return "POST", "/configuration/values/alpha.bare/", `{"configuration":{"n":1}}`
		}},
	}
	// Then every other write of the route table (TestWritePromises's
	// cases), but the instances' statuses and reports, which no history
	// keeps.
	for key, cases := range promiseWrites {
		method, _, _ := strings.Cut(key, " ")
		for _, c := range cases {
			if c.telemetry {
				continue
			}
			setup := c.setup
			ops = append(ops, pausedOp{name: key + "/" + c.name, setup: func(p *promisePlane) (string, string, string) {
				target, body := setup(p)
				return method, target, body
			}})
		}
	}
	// Each pause stops a whole Redis server and most cases wait for the
	// store's timeout, so the cases are split over two private servers
	// run side by side.
	const servers = 2
	for g := range servers {
		var mine []pausedOp
		for i := g; i < len(ops); i += servers {
			mine = append(mine, ops[i])
		}
		t.Run(fmt.Sprintf("redis%d", g), func(t *testing.T) {
			t.Parallel()
			pausedWrites(t, redistest.StartServer(t), mine)
		})
	}
}

// pausedOp is one write TestPausedStoreWrites pauses Redis around.
type pausedOp struct {
	name  string
	setup func(p *promisePlane) (method, target, body string)
	// finish, when set, is what a repeat of the write after an
	// outcome-unknown answer must find in the store.
	finish func(t *testing.T, v storeView)
}

// pausedWrites runs TestPausedStoreWrites's cases of ops on srv, one at a
// time.
func pausedWrites(t *testing.T, srv *redistest.Server, ops []pausedOp) {
	ctx := context.Background()
	run := 0
	// plane starts a handler over a fresh prefix of srv, set up for op.
	plane := func(setup func(*promisePlane) (string, string, string)) (p *promisePlane, st *pausingStore, px *storetest.Proxy, view func(settle bool) storeView, again func() *promisePlane, method, target, body string) {
		run++
		prefix := fmt.Sprintf("vp-promises-%d", run)
		u := srv.URL(prefix)
		// The server's store goes through a proxy, which can pause Redis
		// as the commit script is sent.
		px = storetest.StartProxy(t, srv.Addr)
		// The server's store gives up on a paused Redis within 300 ms;
		// the viewer, which reads once Redis is back, waits longer, so
		// that a loaded machine does not fail the test's own reads.
		timeout := 300 * time.Millisecond
		open := func() *redis.Store {
			s, err := redis.Open(ctx, u, redis.Options{CommandTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		direct := u
		u = "redis://" + px.Addr() + "/0?prefix=" + prefix
		st = &pausingStore{Store: open(), srv: srv}
		u = direct
		t.Cleanup(st.resume)
		p = newPromisePlaneOn(t, st)
		p.must("PUT", "/vars/admin/schemas/bindings/app", `{"schemaId":"strict"}`)
		method, target, body = setup(p)
		// What the server holds, read by a store of its own; with settle,
		// once the writes of the paused connection have landed: two reads
		// in a row agree. Before the request nothing is in flight, and
		// one read is enough.
		timeout = 10 * time.Second
		viewer := open()
		view = func(settle bool) storeView {
			v := viewOf(t, viewer)
			if !settle {
				return v
			}
			for range 50 {
				time.Sleep(100 * time.Millisecond)
				w := viewOf(t, viewer)
				if reflect.DeepEqual(v, w) {
					return w
				}
				v = w
			}
			t.Fatal("the store never settled")
			return v
		}
		// Another server over the same store, straight to Redis (the
		// proxy keeps dropping the answers of a connection it paused).
		again = func() *promisePlane { return newPromisePlaneOn(t, open()) }
		return p, st, px, view, again, method, target, body
	}
	for _, op := range ops {
		// A first run counts the write's commits.
		p, st, _, _, _, method, target, body := plane(op.setup)
		base := st.commits.Load()
		if code, _, raw := p.send(writerToken, method, target, body); code/100 != 2 {
			t.Fatalf("%s: %d %s", op.name, code, raw)
		}
		commits := st.commits.Load() - base
		type when struct {
			name          string
			before, after int32
			sent          bool
		}
		whens := []when{{name: "before the request"}, {name: "as the first commit script is sent", sent: true}}
		for n := int32(1); n <= commits; n++ {
			whens = append(whens, when{name: fmt.Sprintf("before commit %d", n), before: n}, when{name: fmt.Sprintf("after commit %d", n), after: n})
		}
		for _, w := range whens {
			t.Run(op.name+"/paused "+w.name, func(t *testing.T) {
				p, st, px, view, again, method, target, body := plane(op.setup)
				before := view(false)
				base := st.commits.Load()
				if w.before > 0 {
					st.before.Store(base + w.before)
				}
				if w.after > 0 {
					st.after.Store(base + w.after)
				}
				switch {
				case w.sent:
					px.Arm([]byte("$7\r\nEVALSHA\r\n"), st.pause)
				case w.before == 0 && w.after == 0:
					st.pause()
				}
				code, _, raw := p.send(writerToken, method, target, body)
				paused := st.paused.Load()
				st.resume()
				after := view(true)
				e := wire.ParseError(code, []byte(raw))
				t.Logf("answered %d %s", code, raw)
				switch {
				case code/100 == 2:
					if reflect.DeepEqual(before, after) {
						t.Errorf("answered %d, but nothing was written", code)
					}
				case code == 503 && e.Code == varplane.CodeStoreUnavailable:
					unchanged(t, fmt.Sprintf("a write answered 503 store-unavailable (paused: %v)", paused), before, after, "")
				case code == 504 && e.Code == varplane.CodeOutcomeUnknown:
					t.Logf("answered 504 outcome-unknown; written: %v", len(written(before, after)) > 0)
					if op.finish != nil {
						if code, _, raw := again().send(writerToken, method, target, body); code != 200 {
							t.Fatalf("the write repeated after outcome-unknown: %d %s, want 200", code, raw)
						}
						op.finish(t, view(true))
					}
				default:
					t.Errorf("answered %d %s, want 503 store-unavailable or 504 outcome-unknown", code, raw)
				}
			})
		}
	}
}
