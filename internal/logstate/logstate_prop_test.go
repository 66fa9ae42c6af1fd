package logstate_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/logstate"
)

var propScopes = []varplane.Scope{"a", "a.b", "a.b.c", "a.d", "b", "b.a", "ab"}

func doc(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)) }

func revOf(i int) varplane.Revision {
	sum := sha256.Sum256(doc(i))
	return varplane.Revision("sha256:" + hex.EncodeToString(sum[:]))
}

// model is an independent reference of the fold: the rules written as
// plainly as possible.
type model struct {
	revs     map[varplane.Scope]map[varplane.Revision]bool
	gen      map[varplane.Scope]varplane.Generation
	head     map[varplane.Scope]varplane.Revision
	hist     map[varplane.Scope][]string
	rejected map[varplane.Scope]string
	idem     map[string]varplane.Generation
	// headAt[scope][g] is the head revision right after generation g.
	headAt map[varplane.Scope]map[varplane.Generation]varplane.Revision
}

func newModel() *model {
	return &model{
		revs: map[varplane.Scope]map[varplane.Revision]bool{}, gen: map[varplane.Scope]varplane.Generation{},
		head: map[varplane.Scope]varplane.Revision{}, hist: map[varplane.Scope][]string{},
		rejected: map[varplane.Scope]string{}, idem: map[string]varplane.Generation{},
		headAt: map[varplane.Scope]map[varplane.Generation]varplane.Revision{},
	}
}

func (m *model) clone() *model {
	c := newModel()
	for k, v := range m.revs {
		c.revs[k] = map[varplane.Revision]bool{}
		for r := range v {
			c.revs[k][r] = true
		}
	}
	for k, v := range m.gen {
		c.gen[k] = v
	}
	for k, v := range m.head {
		c.head[k] = v
	}
	for k, v := range m.hist {
		c.hist[k] = slices.Clone(v)
	}
	for k, v := range m.rejected {
		c.rejected[k] = v
	}
	for k, v := range m.idem {
		c.idem[k] = v
	}
	return c
}

func (m *model) setGen(s varplane.Scope, g varplane.Generation, head varplane.Revision) {
	m.gen[s], m.head[s] = g, head
	if m.headAt[s] == nil {
		m.headAt[s] = map[varplane.Generation]varplane.Revision{}
	}
	m.headAt[s][g] = head
}

type op struct {
	kind     varplane.EventKind
	scope    varplane.Scope
	doc      int
	expected varplane.Generation
	key      string
}

// step applies o to the model and returns the error class it predicts.
func (m *model) step(o op) string {
	if o.key != "" {
		if _, ok := m.idem[o.key]; ok {
			return "duplicate"
		}
	}
	s := o.scope
	switch o.kind {
	case varplane.EventRevisionCreated:
		if m.revs[s][revOf(o.doc)] {
			return "exists"
		}
		if m.revs[s] == nil {
			m.revs[s] = map[varplane.Revision]bool{}
		}
		m.revs[s][revOf(o.doc)] = true
		m.hist[s] = append(m.hist[s], "created")
	case varplane.EventActivated:
		if m.gen[s] != o.expected {
			return "conflict"
		}
		if !m.revs[s][revOf(o.doc)] {
			return "notfound"
		}
		m.setGen(s, o.expected+1, revOf(o.doc))
		m.hist[s] = append(m.hist[s], fmt.Sprintf("activated@%d", o.expected+1))
	case varplane.EventDeactivated:
		if m.gen[s] != o.expected {
			return "conflict"
		}
		m.setGen(s, o.expected+1, "")
		m.hist[s] = append(m.hist[s], fmt.Sprintf("deactivated@%d", o.expected+1))
		for _, d := range propScopes {
			if d.IsDescendantOf(s) && m.head[d] != "" {
				m.setGen(d, m.gen[d]+1, "")
				m.hist[d] = append(m.hist[d], fmt.Sprintf("deactivated@%d:cascade:%s", m.gen[d], s))
			}
		}
	case varplane.EventRejected:
		m.rejected[s] = fmt.Sprintf("reason-%d", o.doc)
		m.hist[s] = append(m.hist[s], "rejected")
	}
	if o.key != "" {
		m.idem[o.key] = m.gen[s]
	}
	return ""
}

func (o op) event() *varplane.Event {
	ev := &varplane.Event{Kind: o.kind, Scope: o.scope, IdempotencyKey: o.key, Actor: "prop", Timestamp: time.Unix(1700000000, int64(o.doc)).UTC()}
	switch o.kind {
	case varplane.EventRevisionCreated:
		ev.Revision, ev.Document = revOf(o.doc), doc(o.doc)
	case varplane.EventActivated:
		ev.Revision = revOf(o.doc)
	case varplane.EventRejected:
		ev.RejectionReason = fmt.Sprintf("reason-%d", o.doc)
	}
	return ev
}

func classify(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, varplane.ErrDuplicateIdempotencyKey):
		return "duplicate"
	case errors.Is(err, varplane.ErrRevisionExists):
		return "exists"
	case errors.Is(err, varplane.ErrConflict):
		return "conflict"
	case errors.Is(err, varplane.ErrNotFound):
		return "notfound"
	}
	return "other: " + err.Error()
}

func histSummary(h []varplane.Event) []string {
	out := make([]string, 0, len(h))
	for _, ev := range h {
		switch ev.Kind {
		case varplane.EventRevisionCreated:
			out = append(out, "created")
		case varplane.EventRejected:
			out = append(out, "rejected")
		case varplane.EventActivated:
			out = append(out, fmt.Sprintf("activated@%d", ev.Generation))
		case varplane.EventDeactivated:
			s := fmt.Sprintf("deactivated@%d", ev.Generation)
			if strings.HasPrefix(ev.Reason, "cascade:") {
				s += ":" + ev.Reason
			}
			out = append(out, s)
		}
	}
	return out
}

// compare checks every read of st against m.
func compare(t *rapid.T, st *logstate.State, m *model, keys []string) {
	for _, s := range propScopes {
		ss := st.State(s)
		if ss.Generation != m.gen[s] {
			t.Fatalf("%s: generation %d, model %d", s, ss.Generation, m.gen[s])
		}
		var got varplane.Revision
		if ss.Head != nil {
			got = ss.Head.Revision
			if ss.Head.Generation != ss.Generation {
				t.Fatalf("%s: head generation %d in state %d", s, ss.Head.Generation, ss.Generation)
			}
		}
		if got != m.head[s] {
			t.Fatalf("%s: head %q, model %q", s, got, m.head[s])
		}
		var rej string
		if ss.LastRejected != nil {
			rej = ss.LastRejected.RejectionReason
		}
		if rej != m.rejected[s] {
			t.Fatalf("%s: last rejected %q, model %q", s, rej, m.rejected[s])
		}
		if h := histSummary(st.History(s)); !slices.Equal(h, m.hist[s]) {
			t.Fatalf("%s: history %v, model %v", s, h, m.hist[s])
		}
		// Every committed event is linked (cascade entries apart), the
		// chain is sound, and the state reports its head.
		v, err := varplane.VerifyChain(s, st.History(s))
		if err != nil || v.Unchained != 0 || v.Head != ss.Chain {
			t.Fatalf("%s: chain %+v (state %+v): %v", s, v, ss.Chain, err)
		}
		for r := range m.revs[s] {
			if _, ok := st.Revision(s, r); !ok {
				t.Fatalf("%s: revision %s missing", s, r)
			}
		}
	}
	var want []varplane.Scope
	for _, s := range propScopes {
		if len(m.hist[s]) > 0 {
			want = append(want, s)
		}
	}
	slices.Sort(want)
	if got := st.Scopes(); !slices.Equal(got, want) {
		t.Fatalf("scopes %v, model %v", got, want)
	}
	for _, k := range keys {
		rec, ok := st.Idempotency(k)
		g, want := m.idem[k]
		if ok != want || (ok && rec.Generation != g) {
			t.Fatalf("idempotency %s: %v %+v, model %v %d", k, ok, rec, want, g)
		}
	}
}

func genOp(t *rapid.T, m *model) op {
	o := op{
		kind:  rapid.SampledFrom([]varplane.EventKind{varplane.EventRevisionCreated, varplane.EventActivated, varplane.EventActivated, varplane.EventDeactivated, varplane.EventRejected}).Draw(t, "kind"),
		scope: rapid.SampledFrom(propScopes).Draw(t, "scope"),
		doc:   rapid.IntRange(0, 3).Draw(t, "doc"),
	}
	if rapid.IntRange(0, 9).Draw(t, "right") < 8 {
		o.expected = m.gen[o.scope]
	} else {
		o.expected = varplane.Generation(rapid.IntRange(0, 5).Draw(t, "expected"))
	}
	if rapid.IntRange(0, 4).Draw(t, "haskey") == 0 {
		o.key = fmt.Sprintf("k%d", rapid.IntRange(0, 5).Draw(t, "key"))
	}
	return o
}

// TestFoldMatchesModel runs random operation sequences, committed in random
// batches, against the reference model; then checks that the fold of every
// committed log prefix equals the model at that point, and that StateAt
// agrees with the heads the model saw at each generation.
func TestFoldMatchesModel(t *testing.T) {
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	rapid.Check(t, func(t *rapid.T) {
		st := logstate.New()
		m := newModel()
		type point struct {
			n int
			m *model
		}
		var (
			log    []varplane.Event
			points = []point{{0, newModel()}}
			tx     = st.Begin()
			staged []varplane.Event
		)
		n := rapid.IntRange(1, 60).Draw(t, "ops")
		for range n {
			o := genOp(t, m)
			want := m.step(o)
			var stored *varplane.Event
			var err error
			if o.kind == varplane.EventDeactivated {
				stored, err = tx.AppendSubtree(o.event(), o.expected)
			} else {
				stored, err = tx.Append(o.event(), o.expected)
			}
			if got := classify(err); got != want {
				t.Fatalf("%+v: got %q, model %q", o, got, want)
			}
			if err == nil {
				staged = append(staged, *stored)
			}
			if rapid.IntRange(0, 5).Draw(t, "commit") == 0 {
				tx.Commit()
				log = append(log, staged...)
				staged = staged[:0]
				compare(t, st, m, keys)
				points = append(points, point{len(log), m.clone()})
			}
		}
		tx.Commit()
		log = append(log, staged...)
		compare(t, st, m, keys)
		points = append(points, point{len(log), m.clone()})

		// The fold of a prefix, bulk-loaded or applied event by event,
		// equals the model at that point.
		p := rapid.SampledFrom(points).Draw(t, "prefix")
		bulk := logstate.New()
		btx := bulk.Bulk()
		for i := range log[:p.n] {
			if err := btx.Apply(&log[i]); err != nil {
				t.Fatalf("bulk replay of event %d: %v", i, err)
			}
		}
		btx.Commit()
		compare(t, bulk, p.m, keys)
		one := logstate.New()
		for i := range log[:p.n] {
			if _, err := one.Apply(&log[i]); err != nil {
				t.Fatalf("replay of event %d: %v", i, err)
			}
		}
		compare(t, one, p.m, keys)

		for _, s := range propScopes {
			for g := varplane.Generation(1); g <= m.gen[s]; g++ {
				ss, err := st.StateAt(context.Background(), s, g)
				if err != nil {
					t.Fatalf("StateAt(%s, %d): %v", s, g, err)
				}
				var got varplane.Revision
				if ss.Head != nil {
					got = ss.Head.Revision
				}
				if ss.Generation != g || got != m.headAt[s][g] {
					t.Fatalf("StateAt(%s, %d) = gen %d head %q, model %q", s, g, ss.Generation, got, m.headAt[s][g])
				}
			}
			if _, err := st.StateAt(context.Background(), s, m.gen[s]+1); !errors.Is(err, varplane.ErrNotFound) {
				t.Fatalf("StateAt(%s, %d) beyond the end: %v", s, m.gen[s]+1, err)
			}
		}
	})
}
