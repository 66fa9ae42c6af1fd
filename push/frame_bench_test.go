package push

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// benchHead returns the head of a scope holding a small document, as the
// engine stores it.
func benchHead(b *testing.B) *varplane.Head {
	b.Helper()
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	b.Cleanup(func() { e.Close(); _ = st.Close() })
	ctx := context.Background()
	doc := json.RawMessage(`{"feature":{"enabled":true,"rollout":0.25,"name":"checkout <v2>"},"limits":[1,2,3]}`)
	rev, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: "bench.x", Document: doc})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.Activate(ctx, varplane.ActivateRequest{Scope: "bench.x", Revision: rev.Revision, ExpectedGeneration: 0}); err != nil {
		b.Fatal(err)
	}
	s, err := st.State(ctx, "bench.x")
	if err != nil || s.Head == nil {
		b.Fatalf("state: %v", err)
	}
	return s.Head
}

// BenchmarkSSEFrame measures building one event frame (what each commit
// costs once, shared by every subscriber) for a head and for no head.
func BenchmarkSSEFrame(b *testing.B) {
	head := benchHead(b)
	b.Run("head", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			u := Update{Scope: "bench.x", Generation: 42, Head: head}
			_ = u.SSEFrame()
		}
	})
	b.Run("no-head", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			u := Update{Scope: "bench.x", Generation: 42}
			_ = u.SSEFrame()
		}
	})
	b.Run("shared", func(b *testing.B) {
		// The per-subscriber cost once the frame is built: a cache hit.
		u := Update{Scope: "bench.x", Generation: 42, Head: head, enc: &encoded{}}
		_ = u.SSEFrame()
		b.ReportAllocs()
		for b.Loop() {
			_ = u.SSEFrame()
		}
	})
}
