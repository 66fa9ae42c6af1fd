package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// TestOneSnapshotPerRequest holds promise (3) where Engine.Heads makes it,
// under publishes running meanwhile: every flag of one OFREP bulk call
// that names one scope is of one revision (its values agree), and a batch
// read that names a scope twice answers it twice the same.
func TestOneSnapshotPerRequest(t *testing.T) {
	p := newPlane(t, httpapi.Options{})
	p.do("POST", "/vars/admin/publish", `{"scope":"app.k","document":{"x":0,"y":0},"expectedGeneration":0}`)
	p.do("POST", "/vars/admin/publish", `{"scope":"app","document":{"app.g":{"x":0}},"expectedGeneration":0}`)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			// The group and its key alternately.
			if _, err := p.engine.Publish(context.Background(), varplane.PublishRequest{Scope: "app.k",
				Document: json.RawMessage(fmt.Sprintf(`{"x":%d,"y":%d}`, n, n)), ExpectedGeneration: varplane.Generation(n)}); err != nil {
				t.Error(err)
				return
			}
			if _, err := p.engine.Publish(context.Background(), varplane.PublishRequest{Scope: "app",
				Document: json.RawMessage(fmt.Sprintf(`{"app.g":{"x":%d}}`, n)), ExpectedGeneration: varplane.Generation(n)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for range 300 {
		rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{"flags":["app.k#/x","app#/app.g/x","app.k#/y","app.k"]}}`, "Content-Type", "application/json")
		var bulk struct {
			Flags []struct {
				Value    json.RawMessage `json:"value"`
				Metadata struct {
					Revision string `json:"revision"`
				} `json:"metadata"`
			} `json:"flags"`
		}
		mustJSON(t, rec.Body.Bytes(), &bulk)
		if rec.Code != 200 || len(bulk.Flags) != 4 {
			t.Fatalf("bulk: %d %s", rec.Code, rec.Body)
		}
		x, y, k := bulk.Flags[0], bulk.Flags[2], bulk.Flags[3]
		var doc struct{ X, Y json.Number }
		_ = json.Unmarshal(k.Value, &doc)
		if string(x.Value) != string(y.Value) || x.Metadata.Revision != y.Metadata.Revision || x.Metadata.Revision != k.Metadata.Revision ||
			string(x.Value) != doc.X.String() {
			t.Fatalf("one bulk call read app.k at two revisions: %s", rec.Body)
		}

		rec = p.do("GET", "/vars/batch?key=app.k&group=app&key=app.k", "")
		var batch struct {
			Items []json.RawMessage `json:"items"`
		}
		mustJSON(t, rec.Body.Bytes(), &batch)
		if rec.Code != 200 || len(batch.Items) != 3 || string(batch.Items[0]) != string(batch.Items[2]) {
			t.Fatalf("one batch read app.k twice differently: %d %s", rec.Code, rec.Body)
		}
	}
}

// republishingStore is a memory store that, once armed, reactivates a
// scope (through the engine) just before the history of that scope is read.
type republishingStore struct {
	*memory.Store
	scope varplane.Scope
	fire  func()
	armed atomic.Bool
}

func (s *republishingStore) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if scope == s.scope && s.armed.Swap(false) {
		s.fire()
	}
	return s.Store.History(ctx, scope)
}

func (s *republishingStore) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	if scope == s.scope && s.armed.Swap(false) {
		s.fire()
	}
	return s.Store.EventHistory(ctx, scope)
}

// TestScopeListItemOneView: an item of the scope listing (the console's
// scopes page) is one view of its scope: a deactivated scope published
// again while the listing reads its history is listed as it was when its
// state was read (inactive, its last change the deactivation), never
// inactive at one generation with a later activation as its last change.
func TestScopeListItemOneView(t *testing.T) {
	st := &republishingStore{Store: memory.New(), scope: "app.k"}
	t.Cleanup(func() { _ = st.Close() })
	p := newPlaneOn(t, st, httpapi.Options{})
	p.do("POST", "/vars/admin/publish", `{"scope":"app.k","document":{"x":1},"expectedGeneration":0}`)
	p.do("POST", "/vars/admin/deactivate", `{"scope":"app.k","expectedGeneration":1}`)
	st.fire = func() {
		if _, err := p.engine.Publish(context.Background(), varplane.PublishRequest{Scope: "app.k", Document: json.RawMessage(`{"x":2}`), ExpectedGeneration: 2}); err != nil {
			t.Error(err)
		}
	}
	st.armed.Store(true)
	rec := p.do("GET", "/vars/admin/scopes", "")
	var page varplane.ScopePage
	mustJSON(t, rec.Body.Bytes(), &page)
	if rec.Code != 200 || len(page.Items) != 1 {
		t.Fatalf("scopes: %d %s", rec.Code, rec.Body)
	}
	it := page.Items[0]
	if st.armed.Load() {
		t.Fatal("the listing never read the history")
	}
	if it.Active || it.Generation != 2 || it.LastChange == nil || it.LastChange.Kind != varplane.EventDeactivated || it.LastChange.Generation != 2 {
		t.Fatalf("item %+v (last change %+v), want inactive at generation 2, last changed by its deactivation", it, it.LastChange)
	}
}
