package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/store/memory"
)

// One delivery pass answers the share_responses watches that get the same
// commit with one response naming them all, each watch exactly once; a
// watch created without the field (an older client) is answered alone, as
// are snapshots and a watch whose batch differs.
func TestWatchSharedResponsesGroupByBatch(t *testing.T) {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	hub := push.New(e, push.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { hub.Close(); e.Close(); _ = st.Close() })
	ActivateForTest(t, e, "app.a", `{"a":1}`)
	ActivateForTest(t, e, "app.b", `{"b":1}`)

	w := &watcher{hub: hub, max: 100, count: new(atomic.Int64), watches: map[int64]*watch{}, wake: make(chan struct{}, 1)}
	var sent []*v1.WatchResponse
	send := func(m *v1.WatchResponse) error {
		// What goes on the wire: the codec's encoding, decoded by a
		// stock decoder.
		b, err := marshalAppend(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		out := new(v1.WatchResponse)
		if err := proto.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, out)
		return nil
	}
	ctx := context.Background()
	for _, c := range []*v1.WatchCreateRequest{
		{WatchId: 1, Keys: []string{"app.a"}, ShareResponses: true},
		{WatchId: 2, Keys: []string{"app.a"}, ShareResponses: true},
		{WatchId: 3, Prefixes: []string{"app"}, ShareResponses: true},
		{WatchId: 4, Keys: []string{"app.a"}},                       // an older client's
		{WatchId: 5, Keys: []string{"app.b"}, ShareResponses: true}, // another batch
	} {
		if err := w.handle(ctx, &v1.WatchRequest{Request: &v1.WatchRequest_Create{Create: c}}, send); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.deliver(ctx, send); err != nil { // the snapshots
		t.Fatal(err)
	}
	for _, m := range sent {
		if len(m.GetWatchIds()) != 0 {
			t.Fatalf("created or snapshot response shared: %v", m)
		}
	}
	if len(sent) != 10 {
		t.Fatalf("%d responses for 5 creates, want 5 created and 5 snapshots", len(sent))
	}

	for round := range 3 {
		sent = sent[:0]
		ga := ActivateForTest(t, e, "app.a", fmt.Sprintf(`{"a":%d}`, round+2))
		if err := w.deliver(ctx, send); err != nil {
			t.Fatal(err)
		}
		got := map[int64]int{}
		for _, m := range sent {
			h := m.GetBatch().GetHeads()
			if len(h) != 1 || h[0].GetScope() != "app.a" || h[0].GetGeneration() != uint64(ga) {
				t.Fatalf("round %d: response %v, want app.a@%d", round, m, ga)
			}
			ids := m.GetWatchIds()
			if len(ids) == 0 {
				ids = []int64{m.GetWatchId()}
			} else if m.GetWatchId() != 0 {
				t.Fatalf("round %d: shared response with watch_id %d", round, m.GetWatchId())
			}
			for _, id := range ids {
				got[id]++
			}
		}
		if want := map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}; !maps.Equal(got, want) {
			t.Fatalf("round %d: deliveries by watch %v, want %v", round, got, want)
		}
		if len(sent) != 2 {
			t.Fatalf("round %d: %d responses, want 2 (1, 2 and 3 shared; 4 alone): %v", round, len(sent), sent)
		}
		for _, m := range sent {
			if ids := slices.Sorted(slices.Values(m.GetWatchIds())); len(ids) > 0 && !slices.Equal(ids, []int64{1, 2, 3}) {
				t.Fatalf("round %d: shared ids %v, want [1 2 3]", round, ids)
			}
		}
	}

	// Another scope: the prefix watch and app.b's key watch get the same
	// update, so one response names both.
	sent = sent[:0]
	ActivateForTest(t, e, "app.b", `{"b":2}`)
	if err := w.deliver(ctx, send); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 {
		t.Fatalf("app.b: %d responses, want 1: %v", len(sent), sent)
	}
	if ids := slices.Sorted(slices.Values(sent[0].GetWatchIds())); !slices.Equal(ids, []int64{3, 5}) {
		t.Fatalf("app.b reached %v, want [3 5]", ids)
	}
}
