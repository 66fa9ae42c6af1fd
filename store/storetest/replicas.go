package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
)

// ChainReplicas races commits of every kind through a and b, two replicas
// of one shared store (two store values on one database or one Redis), on
// one scope and its child: creates and rejections, which no generation
// orders, publishes and subtree deactivations, which race on the
// generation too. Every commit that succeeded takes exactly one link per
// event it appended: each scope's chain comes out gapless and sound, and
// both replicas verify it whole (varplane.VerifyStore), whatever chain
// head each holds.
func ChainReplicas(t *testing.T, a, b varplane.Store) {
	t.Helper()
	ctx := context.Background()
	const root, kid = varplane.Scope("chainrep"), varplane.Scope("chainrep.kid")
	const workers, rounds = 8, 16
	var (
		docs atomic.Int64
		mu   sync.Mutex
		won  = map[varplane.Scope]uint64{}
		wg   sync.WaitGroup
	)
	errs := make(chan error, workers)
	count := func(scope varplane.Scope, n uint64) {
		mu.Lock()
		won[scope] += n
		mu.Unlock()
	}
	// Documents in RFC 8785 form, so that RevisionOf is their revision.
	doc := func() json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, docs.Add(1))) }
	for w := range workers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				var err error
				scope := root
				switch op := (w + i) % 5; op {
				case 0: // create
					err = s.Append(ctx, CreatedEvent(root, doc()), 0)
					if err == nil {
						count(root, 1)
					}
				case 1: // rejection
					ev := &varplane.Event{Kind: varplane.EventRejected, Scope: root, RejectionReason: "race", Actor: "storetest", Timestamp: CreatedEvent(root, nil).Timestamp}
					err = s.Append(ctx, ev, 0)
					if err == nil {
						count(root, 1)
					}
				case 2, 3: // publish of a new document, on the root or the child
					if op == 3 {
						scope = kid
					}
					var st *varplane.ScopeState
					if st, err = s.State(ctx, scope); err != nil {
						break
					}
					c := CreatedEvent(scope, doc())
					_, err = s.AppendPublish(ctx, c, ActivatedEvent(scope, c.Revision, st.Generation), st.Generation)
					if err == nil {
						count(scope, 2)
					}
				case 4: // subtree deactivation
					var st *varplane.ScopeState
					if st, err = s.State(ctx, root); err != nil {
						break
					}
					err = s.AppendSubtreeDeactivation(ctx, DeactivatedEvent(root, st.Generation), st.Generation)
					if err == nil {
						count(root, 1)
					}
				}
				if err != nil && !errors.Is(err, varplane.ErrConflict) {
					errs <- fmt.Errorf("worker %d round %d on %s: %w", w, i, scope, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, s := range []varplane.Store{a, b} {
		rep, err := varplane.VerifyStore(ctx, s)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		for _, scope := range []varplane.Scope{root, kid} {
			if rep.Heads[scope].Seq != won[scope] {
				t.Errorf("replica %d: %s's chain ends at seq %d, and %d links were committed", i, scope, rep.Heads[scope].Seq, won[scope])
			}
		}
		if rep.Unchained != 0 {
			t.Errorf("replica %d: %d events without a link", i, rep.Unchained)
		}
	}
	if won[root] < 10 || won[kid] < 4 {
		t.Errorf("only %d and %d links committed: the race hardly ran", won[root], won[kid])
	}
}
