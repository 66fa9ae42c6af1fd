package httpapi_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/rollout"
	"github.com/varplane/varplane/store/memory"
)

// revisionHook is a memory store that runs hook once, at the first
// Revision read after it is set: a commit landing while a request is
// between two of its flags.
type revisionHook struct {
	*memory.Store
	mu   sync.Mutex
	hook func()
}

func (s *revisionHook) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	s.mu.Lock()
	f := s.hook
	s.hook = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return s.Store.Revision(ctx, scope, rev)
}

// A bulk evaluation picks every flag from one reading of the rollouts in
// progress, read with the flags' heads: a rollout ended while the request
// is between two flags of one scope does not serve the first from the
// rollout's revision and the second from the head.
func TestOFREPBulkOneRolloutReading(t *testing.T) {
	ctx := context.Background()
	st := &revisionHook{Store: memory.New()}
	t.Cleanup(func() { _ = st.Close() })
	p := newPlaneOn(t, st, httpapi.Options{})
	p.h.Close()
	picker := varplane.NewRolloutPicker(p.engine, nil)
	h := httpapi.NewHandler(p.engine, httpapi.Options{Authorizer: varplane.AllowAll, Logger: quiet, Rollouts: picker})
	t.Cleanup(h.Close)
	p.h = h

	p.publish("app.f", `{"v":1,"w":1}`)
	next := p.create("app.f", `{"v":2,"w":2}`)
	stage := func(expected varplane.Generation, rs ...varplane.StagedRollout) {
		doc, _ := json.Marshal(varplane.StagedRollouts{Rollouts: rs})
		if _, err := p.engine.Publish(ctx, varplane.PublishRequest{Scope: varplane.RolloutScope, Document: doc, ExpectedGeneration: expected}); err != nil {
			t.Fatal(err)
		}
	}
	stage(0, varplane.StagedRollout{ID: "ro1", Scope: "app.f", Revision: next, Base: 1, State: varplane.RolloutRunning, Steps: 1, Share: rollout.Full})
	// The picker reads the rollout's revision for the first flag: the
	// rollout ends then.
	st.hook = func() { stage(1) }

	rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"user-1","flags":["app.f#/v","app.f#/w"]}}`,
		"Content-Type", "application/json")
	var out struct{ Flags []ofrepResult }
	mustJSON(t, rec.Body.Bytes(), &out)
	if rec.Code != 200 || len(out.Flags) != 2 {
		t.Fatalf("bulk: %d %s", rec.Code, rec.Body)
	}
	a, b := out.Flags[0], out.Flags[1]
	if a.Variant != b.Variant || string(a.Value) != string(b.Value) || a.Reason != b.Reason {
		t.Fatalf("two flags of one scope from two readings: %+v and %+v", a, b)
	}
	if a.Reason != "SPLIT" || string(a.Value) != "2" {
		t.Fatalf("the request's reading had the rollout selecting every key: %+v", a)
	}
	// The next request reads the rollouts anew: the rollout has ended.
	if res, code := p.ofrep("app.f%23/v", `{"context":{"targetingKey":"user-1"}}`); code != 200 || res.Reason != "STATIC" || string(res.Value) != "1" {
		t.Fatalf("after the rollout ended: %d %+v", code, res)
	}
}
