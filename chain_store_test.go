package varplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
	"github.com/varplane/varplane/store/storetest"
)

// chainedStore is a store whose histories a test breaks by hand, as no
// store would let it: History returns the inner store's history linked
// afresh (from linkFrom on, as a store would have; the events before are
// left unchained, as written before chains existed), then passed
// through edit. State reports the head of the unedited chain, as a store
// keeps it apart from the history, passed through kept; Revision passes
// the inner store's answer through rec.
type chainedStore struct {
	varplane.Store
	linkFrom map[varplane.Scope]int
	edit     func(varplane.Scope, []varplane.Event) []varplane.Event
	kept     func(varplane.Scope, varplane.ChainHead) varplane.ChainHead
	rec      func(*varplane.RevisionRecord, error) (*varplane.RevisionRecord, error)
}

func (c *chainedStore) linked(ctx context.Context, scope varplane.Scope) ([]varplane.Event, varplane.ChainHead, error) {
	h, err := c.Store.History(ctx, scope)
	if err != nil {
		return nil, varplane.ChainHead{}, err
	}
	h = slices.Clone(h)
	var head varplane.ChainHead
	for i := range h {
		ev := &h[i]
		ev.Seq, ev.Hash = 0, ""
		if i < c.linkFrom[scope] || (ev.Kind == varplane.EventDeactivated && strings.HasPrefix(ev.Reason, "cascade:")) {
			continue
		}
		head = head.Next(ev)
	}
	return h, head, nil
}

func (c *chainedStore) History(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	h, _, err := c.linked(ctx, scope)
	if err != nil || c.edit == nil {
		return h, err
	}
	return c.edit(scope, h), nil
}

func (c *chainedStore) State(ctx context.Context, scope varplane.Scope) (*varplane.ScopeState, error) {
	st, err := c.Store.State(ctx, scope)
	if err != nil {
		return nil, err
	}
	_, head, err := c.linked(ctx, scope)
	if err != nil {
		return nil, err
	}
	cp := *st
	cp.Chain = head
	if c.kept != nil {
		cp.Chain = c.kept(scope, head)
	}
	return &cp, nil
}

func (c *chainedStore) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	r, err := c.Store.Revision(ctx, scope, rev)
	if c.rec != nil {
		return c.rec(r, err)
	}
	return r, err
}

// canonicalDoc is a document already in RFC 8785 form, so that its
// storetest.RevisionOf is its revision.
func canonicalDoc(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"enabled":true,"n":%d}`, i))
}

// chainFixture fills a memory store with every kind of event: app has
// created (1), activated (2), rejected (3), published (4, 5) and a subtree
// deactivation (6) that cleared app.kid (created 1, activated 2, then the
// cascade entry); other has created (1) and activated (2).
func chainFixture(t *testing.T) varplane.Store {
	t.Helper()
	ctx := context.Background()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	mustCommit := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	create := func(scope varplane.Scope, i int) varplane.Revision {
		ev := storetest.CreatedEvent(scope, canonicalDoc(i))
		mustCommit(s.Append(ctx, ev, 0))
		return ev.Revision
	}
	r := create("app", 1)
	mustCommit(s.Append(ctx, storetest.ActivatedEvent("app", r, 0), 0))
	mustCommit(s.Append(ctx, &varplane.Event{Kind: varplane.EventRejected, Scope: "app", SchemaID: "test/v1", RejectionReason: "no", Actor: "t",
		Timestamp: storetest.CreatedEvent("app", nil).Timestamp}, 0))
	_, err := s.AppendPublish(ctx, storetest.CreatedEvent("app", canonicalDoc(2)), storetest.ActivatedEvent("app", storetest.RevisionOf(canonicalDoc(2)), 1), 1)
	mustCommit(err)
	k := create("app.kid", 3)
	mustCommit(s.Append(ctx, storetest.ActivatedEvent("app.kid", k, 0), 0))
	mustCommit(s.AppendSubtreeDeactivation(ctx, storetest.DeactivatedEvent("app", 2), 2))
	o := create("other", 4)
	mustCommit(s.Append(ctx, storetest.ActivatedEvent("other", o, 0), 0))
	return s
}

func TestVerifyStoreSound(t *testing.T) {
	s := &chainedStore{Store: chainFixture(t)}
	rep, err := varplane.VerifyStore(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scopes != 3 || rep.Events != 11 || rep.Unchained != 0 || rep.Cascades != 1 || rep.Revisions != 8 || rep.Reclaimed != 0 {
		t.Errorf("report %+v, want 3 scopes, 11 events, 1 cascade, 8 bodies checked (4 in events, 4 records)", rep)
	}
	want := map[varplane.Scope]uint64{"app": 6, "app.kid": 2, "other": 2}
	for sc, n := range want {
		if rep.Heads[sc].Seq != n {
			t.Errorf("head of %s at seq %d, want %d", sc, rep.Heads[sc].Seq, n)
		}
	}
	if len(rep.Heads) != len(want) || rep.Digest != varplane.ChainDigest(rep.Heads) {
		t.Errorf("heads %v digest %s", rep.Heads, rep.Digest)
	}

	// Events written before the store kept chains are counted, not refused.
	legacy := &chainedStore{Store: s.Store, linkFrom: map[varplane.Scope]int{"app": 3, "other": 2}}
	rep, err = varplane.VerifyStore(context.Background(), legacy)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unchained != 5 || rep.Heads["app"].Seq != 3 || rep.Heads["other"].Seq != 0 {
		t.Errorf("legacy report %+v, want 5 unchained events, app at seq 3, other without a chain", rep)
	}
}

// TestVerifyStoreBroken breaks a sound store's histories, heads and records
// by hand, one way at a time: each is caught, and the error names the
// scope, the seq and what is wrong.
func TestVerifyStoreBroken(t *testing.T) {
	type edit = func(varplane.Scope, []varplane.Event) []varplane.Event
	on := func(scope varplane.Scope, f func([]varplane.Event) []varplane.Event) edit {
		return func(sc varplane.Scope, h []varplane.Event) []varplane.Event {
			if sc != scope {
				return h
			}
			return f(h)
		}
	}
	wrongDoc := json.RawMessage(`{"enabled":false,"n":1}`)
	for _, tc := range []struct {
		name    string
		s       chainedStore
		scope   varplane.Scope
		seq     uint64
		problem string
	}{
		{"an event changed", chainedStore{edit: on("app", func(h []varplane.Event) []varplane.Event {
			h[2].RejectionReason = "yes"
			return h
		})}, "app", 3, "hash does not match"},
		{"an event deleted", chainedStore{edit: on("app", func(h []varplane.Event) []varplane.Event {
			return slices.Delete(h, 3, 4)
		})}, "app", 4, "missing: the next event has seq 5"},
		{"two events swapped", chainedStore{edit: on("other", func(h []varplane.Event) []varplane.Event {
			h[0], h[1] = h[1], h[0]
			return h
		})}, "other", 1, "missing: the next event has seq 2"},
		{"an event moved to another scope", chainedStore{edit: on("other", func(h []varplane.Event) []varplane.Event {
			h[1].Scope = "app"
			return h
		})}, "other", 2, "belongs to scope"},
		{"a link stripped", chainedStore{edit: on("app", func(h []varplane.Event) []varplane.Event {
			h[4].Seq, h[4].Hash = 0, ""
			return h
		})}, "app", 5, "carries no link"},
		{"the tail cut", chainedStore{edit: on("app", func(h []varplane.Event) []varplane.Event {
			return h[:len(h)-1]
		})}, "app", 6, "missing: the scope's chain head is at seq 6, its history ends at seq 5"},
		{"the kept head rewritten", chainedStore{kept: func(sc varplane.Scope, h varplane.ChainHead) varplane.ChainHead {
			if sc == "other" {
				h.Hash = strings.Repeat("0", 64)
			}
			return h
		}}, "other", 2, "another hash"},
		{"a document edited", chainedStore{edit: on("app", func(h []varplane.Event) []varplane.Event {
			h[0].Document = wrongDoc
			return h
		})}, "app", 1, "document does not match its revision"},
		{"a stored record edited", chainedStore{rec: func(r *varplane.RevisionRecord, err error) (*varplane.RevisionRecord, error) {
			if r != nil && r.Scope == "other" {
				cp := *r
				cp.Document = wrongDoc
				return &cp, err
			}
			return r, err
		}}, "other", 1, "stored record"},
		{"a stored record lost", chainedStore{rec: func(r *varplane.RevisionRecord, err error) (*varplane.RevisionRecord, error) {
			if r != nil && r.Scope == "app.kid" {
				return nil, varplane.ErrNotFound
			}
			return r, err
		}}, "app.kid", 1, "neither stored nor marked reclaimed"},
		{"a cascade entry forged", chainedStore{edit: on("other", func(h []varplane.Event) []varplane.Event {
			return append(h, varplane.Event{Kind: varplane.EventDeactivated, Scope: "other", Generation: 2,
				PreviousGeneration: varplane.GenerationPtr(1), Reason: varplane.CascadeReason("app"), Timestamp: h[0].Timestamp})
		})}, "other", 0, "no deactivation of its parent lists"},
		{"a cascade entry deleted", chainedStore{edit: on("app.kid", func(h []varplane.Event) []varplane.Event {
			return h[:2]
		})}, "app", 6, `lists "app.kid" at generation 2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.Store = chainFixture(t)
			_, err := varplane.VerifyStore(context.Background(), &s)
			var ce *varplane.ChainError
			if !errors.As(err, &ce) {
				t.Fatalf("VerifyStore = %v, want a *ChainError", err)
			}
			if ce.Scope != tc.scope || ce.Seq != tc.seq || !strings.Contains(ce.Problem, tc.problem) {
				t.Errorf("VerifyStore = %v; want scope %s, seq %d, problem %q", err, tc.scope, tc.seq, tc.problem)
			}
		})
	}
}

// TestVerifyStoreReadFails: a read that fails is reported as that failure,
// never as a sound store.
func TestVerifyStoreReadFails(t *testing.T) {
	s := &chainedStore{Store: chainFixture(t), rec: func(*varplane.RevisionRecord, error) (*varplane.RevisionRecord, error) {
		return nil, varplane.Unavailable(errors.New("down"))
	}}
	_, err := varplane.VerifyStore(context.Background(), s)
	if varplane.ErrorCode(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("VerifyStore = %v, want store-unavailable", err)
	}
}
