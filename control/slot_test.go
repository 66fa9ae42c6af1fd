package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// TestOneStagingSlotPerScope: a scope has one canary window open at a time.
// Opening a second one, by another change of the same scope, is 409
// canary-window-open naming the change that holds the slot, and nothing
// changes (the second change stays checked, nothing more is staged). Other
// scopes are not held; the slot frees when the window's change leaves it;
// a staged entry its change no longer has open (a stale one) does not hold
// it.
func TestOneStagingSlotPerScope(t *testing.T) {
	ctx := context.Background()
	window := map[string]any{"duration": "10m", "minInstances": 0}
	for _, tc := range []struct {
		name string
		// prepare runs after change a of app.x opened its window and
		// before change b opens one; it returns b's scope and, when the
		// refusal names another change than a, that change.
		prepare func(t *testing.T, e *env, a control.Change) (varplane.Scope, string)
		status  int
		code    varplane.Code
	}{
		{"a second window on the scope", func(*testing.T, *env, control.Change) (varplane.Scope, string) { return "app.x", "" }, 409, varplane.CodeCanaryWindowOpen},
		{"a window on another scope", func(*testing.T, *env, control.Change) (varplane.Scope, string) { return "app.y", "" }, 200, ""},
		{"a window on a descendant scope", func(*testing.T, *env, control.Change) (varplane.Scope, string) { return "app.x.sub", "" }, 200, ""},
		{"after the first change withdrew", func(t *testing.T, e *env, a control.Change) (varplane.Scope, string) {
			st, b, _ := e.act("alice", a.ID, "withdraw", nil)
			want(t, "withdraw", st, b, 200, "")
			return "app.x", ""
		}, 200, ""},
		{"a stale entry: the first change's record moved on without its window", func(t *testing.T, e *env, a control.Change) (varplane.Scope, string) {
			// Rebasing closes a's window; the entry is then staged again
			// as a transition whose record write lost would leave it.
			st, b, _ := e.act("alice", a.ID, "rebase", map[string]any{"base": 0})
			want(t, "rebase", st, b, 200, "")
			restage(t, e, a.ID, a.Canary.ID, a)
			return "app.x", ""
		}, 200, ""},
		{"a window being opened: staged, its change's record not yet written", func(t *testing.T, e *env, a control.Change) (varplane.Scope, string) {
			st, b, _ := e.act("alice", a.ID, "withdraw", nil)
			want(t, "withdraw", st, b, 200, "")
			a2 := e.propose("alice", "app.x", 0, `{"v":3}`)
			restage(t, e, a2.ID, fmt.Sprintf("%s-%d", a2.ID, a2.Version+1), a2)
			return "app.x", a2.ID
		}, 409, varplane.CodeCanaryWindowOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{storeInstances: true})
			a := e.propose("alice", "app.x", 0, `{"v":1}`)
			st, b, opened := e.act("alice", a.ID, "canary", window)
			want(t, "first window", st, b, 200, "")
			scope, holder := tc.prepare(t, e, opened)
			if holder == "" {
				holder = a.ID
			}
			bc := e.propose("bob", scope, 0, `{"v":2}`)
			before := staged(t, e)
			st, b, got := e.act("bob", bc.ID, "canary", window)
			want(t, "second window", st, b, tc.status, tc.code)
			if tc.status != 200 {
				var eb struct {
					Scope  string `json:"scope"`
					Change string `json:"change"`
				}
				if err := json.Unmarshal(b, &eb); err != nil || eb.Change != holder || eb.Scope != "app.x" || !contains(b, holder) {
					t.Fatalf("the refusal does not name change %s on app.x: %s", holder, b)
				}
				if after := staged(t, e); after != before {
					t.Fatalf("a refused window changed the staged record: %s, was %s", after, before)
				}
				c, err := e.svc.Get(ctx, bc.ID)
				if err != nil || c.State != control.StateChecked || c.Canary != nil {
					t.Fatalf("the refused change: %+v %v", c, err)
				}
				_, err = e.svc.OpenCanary(ctx, varplane.Identity{ID: "bob"}, bc.ID, time.Minute, 0)
				if !errors.Is(err, control.ErrCanaryWindowOpen) {
					t.Fatalf("OpenCanary in Go: %v, want ErrCanaryWindowOpen", err)
				}
				return
			}
			if got.State != control.StateCanary {
				t.Fatalf("second change: %s", got.State)
			}
			if n := countStaged(t, e, scope); n != 1 {
				t.Fatalf("%d windows staged on %s, want 1", n, scope)
			}
		})
	}
}

// staged returns the staged record's document.
func staged(t *testing.T, e *env) string {
	t.Helper()
	st, err := e.store.State(context.Background(), varplane.StagedScope)
	if err != nil {
		t.Fatal(err)
	}
	if st.Head == nil {
		return ""
	}
	return string(st.Head.Document)
}

func countStaged(t *testing.T, e *env, scope varplane.Scope) int {
	t.Helper()
	var sw varplane.StagedWindows
	if s := staged(t, e); s != "" {
		if err := json.Unmarshal([]byte(s), &sw); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, w := range sw.Windows {
		if w.Scope == scope {
			n++
		}
	}
	return n
}

// restage writes the staged record with one window of change id (c), as
// the control subsystem writes it.
func restage(t *testing.T, e *env, id, window string, c control.Change) {
	t.Helper()
	ctx := context.Background()
	st, err := e.store.State(ctx, varplane.StagedScope)
	if err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`{"windows":[{"window":%q,"change":%q,"scope":%q,"revision":%q,"base":0,"closesAt":"2030-01-01T00:00:00Z"}]}`,
		window, id, c.Scope, c.Revision)
	if _, err := e.engine.Publish(ctx, varplane.PublishRequest{Scope: varplane.StagedScope, Document: json.RawMessage(doc),
		ExpectedGeneration: st.Generation, Actor: "test", Owner: control.OwnerName}); err != nil {
		t.Fatal(err)
	}
	if n := countStaged(t, e, c.Scope); n != 1 {
		t.Fatalf("restaged %d", n)
	}
}
