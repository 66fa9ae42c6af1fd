package varplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
	"github.com/varplane/varplane/store/memory"
)

// model is the reference the engine is checked against: per scope, the
// generation, the active revision and the activation history.
type model struct {
	gen         map[varplane.Scope]varplane.Generation
	head        map[varplane.Scope]varplane.Revision // "" = no head
	revs        map[varplane.Scope]map[varplane.Revision]bool
	activations map[varplane.Scope][]activation
}

type activation struct {
	gen varplane.Generation
	rev varplane.Revision
}

var propScopes = []varplane.Scope{"a", "a.b", "a.b.c", "a.d", "e", "e.f"}

func docFor(scope varplane.Scope, n int) json.RawMessage {
	if scope.IsGroup() {
		return json.RawMessage(fmt.Sprintf(`{"%s.v":%d}`, scope, n))
	}
	return json.RawMessage(fmt.Sprintf(`{"v":%d}`, n))
}

func TestEngineMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := memory.New()
		defer s.Close()
		e := varplane.NewEngine(s, varplane.Options{})
		defer e.Close()
		ctx := context.Background()
		m := model{
			gen:         map[varplane.Scope]varplane.Generation{},
			head:        map[varplane.Scope]varplane.Revision{},
			revs:        map[varplane.Scope]map[varplane.Revision]bool{},
			activations: map[varplane.Scope][]activation{},
		}
		var notified int
		e.OnCommit(func(varplane.Commit) { notified++ })
		wantNotified := 0

		expectedFor := func(rt *rapid.T, scope varplane.Scope) (varplane.Generation, bool) {
			if rapid.IntRange(0, 4).Draw(rt, "stale") == 0 {
				g := varplane.Generation(rapid.IntRange(0, 6).Draw(rt, "expected"))
				return g, g == m.gen[scope]
			}
			return m.gen[scope], true
		}
		checkConflict := func(rt *rapid.T, err error, scope varplane.Scope) {
			var verr *varplane.Error
			if !errors.As(err, &verr) || verr.Code != varplane.CodeRevisionConflict || *verr.Current != m.gen[scope] {
				rt.Fatalf("want conflict at %d, got %v", m.gen[scope], err)
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				scope := rapid.SampledFrom(propScopes).Draw(rt, "scope")
				n := rapid.IntRange(0, 3).Draw(rt, "doc")
				res, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: docFor(scope, n)})
				if err != nil {
					rt.Fatal(err)
				}
				if m.revs[scope] == nil {
					m.revs[scope] = map[varplane.Revision]bool{}
				}
				if res.Created == m.revs[scope][res.Revision] {
					rt.Fatalf("created=%v but model knows=%v", res.Created, m.revs[scope][res.Revision])
				}
				m.revs[scope][res.Revision] = true
			},
			"activate": func(rt *rapid.T) {
				scope := rapid.SampledFrom(propScopes).Draw(rt, "scope")
				n := rapid.IntRange(0, 3).Draw(rt, "doc")
				digest, _ := digestOf(docFor(scope, n))
				expected, fresh := expectedFor(rt, scope)
				_, err := e.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: digest, ExpectedGeneration: expected})
				switch {
				case !fresh:
					checkConflict(rt, err, scope)
				case !m.revs[scope][digest]:
					if !errors.Is(err, varplane.ErrNotFound) {
						rt.Fatalf("activate unknown revision: %v", err)
					}
				case err != nil:
					rt.Fatal(err)
				default:
					m.gen[scope]++
					m.head[scope] = digest
					m.activations[scope] = append(m.activations[scope], activation{m.gen[scope], digest})
					wantNotified++
				}
			},
			"deactivate": func(rt *rapid.T) {
				scope := rapid.SampledFrom(propScopes).Draw(rt, "scope")
				expected, fresh := expectedFor(rt, scope)
				_, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: expected})
				if !fresh {
					checkConflict(rt, err, scope)
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				m.gen[scope]++
				m.head[scope] = ""
				for _, d := range propScopes {
					if d.IsDescendantOf(scope) && m.head[d] != "" {
						m.gen[d]++
						m.head[d] = ""
					}
				}
				wantNotified++
			},
			"rollback": func(rt *rapid.T) {
				scope := rapid.SampledFrom(propScopes).Draw(rt, "scope")
				expected, fresh := expectedFor(rt, scope)
				res, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: expected})
				// The model's target: the latest activation, before the
				// current one when a head is active, of another revision.
				var target varplane.Revision
				acts := m.activations[scope]
				for i := len(acts) - 1; i >= 0; i-- {
					if m.head[scope] != "" && acts[i].gen >= m.gen[scope] {
						continue
					}
					if acts[i].rev != m.head[scope] {
						target = acts[i].rev
						break
					}
				}
				// A stale expectedGeneration is a conflict whether or not
				// the history as of that generation has a target.
				switch {
				case !fresh:
					checkConflict(rt, err, scope)
				case target == "":
					if !errors.Is(err, varplane.ErrNotFound) {
						rt.Fatalf("rollback with no target: %v", err)
					}
				case err != nil:
					rt.Fatal(err)
				default:
					if res.Revision != target {
						rt.Fatalf("rolled back to %s, model says %s", res.Revision, target)
					}
					m.gen[scope]++
					m.head[scope] = target
					m.activations[scope] = append(m.activations[scope], activation{m.gen[scope], target})
					wantNotified++
				}
			},
			"": func(rt *rapid.T) {
				for _, scope := range propScopes {
					st, err := e.Status(ctx, scope)
					if err != nil {
						rt.Fatal(err)
					}
					if st.Generation != m.gen[scope] || st.Active != (m.head[scope] != "") || st.Revision != m.head[scope] {
						rt.Fatalf("%s: engine %+v, model gen=%d head=%q", scope, st, m.gen[scope], m.head[scope])
					}
				}
				if notified != wantNotified {
					rt.Fatalf("%d notifications, want %d", notified, wantNotified)
				}
			},
		})
	})
}

func digestOf(doc json.RawMessage) (varplane.Revision, error) {
	d, err := canonical.Digest(doc)
	return varplane.Revision(d), err
}
