package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// TestOneSnapshotPerRequest holds promise (3), one snapshot per request
// (Engine.Heads), under publishes of a key and then its group running
// meanwhile: every flag of one OFREP bulk call that names one scope is of
// one revision (its values agree), a batch read that names a scope twice
// answers it twice the same, and both read the key and the group as they
// stood together at one moment (the group's value is the key's, or the one
// before it), never an older head of one beside a newer head of the other.
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
	// Between the key and the group, the request reads many other scopes
	// (none has a head), so that publishes land while it reads.
	var pad, padQuery strings.Builder
	for i := range 240 {
		fmt.Fprintf(&pad, `,"pad.p%d"`, i)
		fmt.Fprintf(&padQuery, "&key=pad.p%d", i)
	}
	for range 300 {
		rec := p.do("POST", "/vars/ofrep/v1/evaluate/flags", `{"context":{"flags":["app.k#/x"`+pad.String()+`,"app#/app.g/x","app.k#/y","app.k"]}}`, "Content-Type", "application/json")
		var bulk struct {
			Flags []struct {
				Value    json.RawMessage `json:"value"`
				Metadata struct {
					Revision string `json:"revision"`
				} `json:"metadata"`
			} `json:"flags"`
		}
		mustJSON(t, rec.Body.Bytes(), &bulk)
		if rec.Code != 200 || len(bulk.Flags) != 244 {
			t.Fatalf("bulk: %d %s", rec.Code, rec.Body)
		}
		x, g, y, k := bulk.Flags[0], bulk.Flags[241], bulk.Flags[242], bulk.Flags[243]
		oneMoment(t, "bulk", x.Value, g.Value, rec.Body.String())
		var doc struct{ X, Y json.Number }
		_ = json.Unmarshal(k.Value, &doc)
		if string(x.Value) != string(y.Value) || x.Metadata.Revision != y.Metadata.Revision || x.Metadata.Revision != k.Metadata.Revision ||
			string(x.Value) != doc.X.String() {
			t.Fatalf("one bulk call read app.k at two revisions: %s", rec.Body)
		}

		rec = p.do("GET", "/vars/batch?key=app.k"+padQuery.String()+"&group=app&key=app.k", "")
		var batch struct {
			Items []json.RawMessage `json:"items"`
		}
		mustJSON(t, rec.Body.Bytes(), &batch)
		batch.Items = append(batch.Items[:1], batch.Items[241:]...)
		if rec.Code != 200 || len(batch.Items) != 3 || string(batch.Items[0]) != string(batch.Items[2]) {
			t.Fatalf("one batch read app.k twice differently: %d %s", rec.Code, rec.Body)
		}
		var key, group struct {
			Values map[string]struct{ X json.RawMessage } `json:"values"`
		}
		mustJSON(t, batch.Items[0], &key)
		mustJSON(t, batch.Items[1], &group)
		oneMoment(t, "batch", key.Values["app.k"].X, group.Values["app.g"].X, rec.Body.String())
	}
}

// oneMoment fails unless key and group, the values of app.k and of the
// group app read by one request, stood together at one moment while the
// key and then the group are published with the same value in turn: the
// group's is the key's, or one less.
func oneMoment(t *testing.T, what string, key, group json.RawMessage, body string) {
	t.Helper()
	var k, g int
	if json.Unmarshal(key, &k) != nil || json.Unmarshal(group, &g) != nil || (k != g && k != g+1) {
		t.Fatalf("one %s read app.k at %s beside app at %s, which never stood together: %s", what, key, group, body)
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
