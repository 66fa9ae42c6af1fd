package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/store/memory"
)

// pipePair returns a coalescingConn over one end of a TCP loopback pair and
// the other end.
func pipePair(t *testing.T) (*coalescingConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := coalescingListener{ln}.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	cc := c.(*coalescingConn)
	t.Cleanup(func() { cc.Close() })
	return cc, peer
}

func TestCoalescingConnKeepsOrderAndFlushesOnClose(t *testing.T) {
	c, peer := pipePair(t)
	var want bytes.Buffer
	for i := 0; i < 1000; i++ {
		p := bytes.Repeat([]byte{byte(i)}, 1+i%300)
		want.Write(p)
		if n, err := c.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write %d = %d, %v", i, n, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, errConnClosed) {
		t.Fatalf("Write after Close: %v, want errConnClosed", err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(peer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("peer read %d bytes, want %d in order", len(got), want.Len())
	}
}

func TestCoalescingConnBoundsPendingAndReportsWriteErrors(t *testing.T) {
	c, peer := pipePair(t)
	// The peer never reads: the kernel buffers fill, then the pending
	// buffer, then Write must wait instead of growing without bound.
	_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	chunk := make([]byte, 64<<10)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = c.Write(chunk)
		c.mu.Lock()
		if n := len(c.pending); n > maxCoalesced+len(chunk) {
			c.mu.Unlock()
			t.Fatalf("pending grew to %d bytes, bound %d", n, maxCoalesced+len(chunk))
		}
		c.mu.Unlock()
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write to a peer that does not read: %v, want the deadline's timeout", err)
	}
	if _, err2 := c.Write([]byte("x")); err2 == nil {
		t.Fatal("Write after a failed write succeeded")
	}
	_ = peer
}

func TestStreamBatchSharesOneEncoding(t *testing.T) {
	// A commit's update carries the shared cache only when it comes from the
	// hub; build one through a real hub round instead of faking it.
	e := varplane.NewEngine(newMemStore(t), varplane.Options{})
	t.Cleanup(func() { e.Close() })
	h := push.New(e, push.Options{})
	t.Cleanup(h.Close)
	sub, err := h.Subscribe(t.Context(), push.Filter{Keys: []varplane.Scope{"a.b"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	if _, err := sub.Next(t.Context()); err != nil { // the snapshot
		t.Fatal(err)
	}
	activateDoc(t, e, "a.b", `{"n":1}`)
	b, err := sub.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	m1, m2 := streamBatch(b), streamBatch(b)
	if m1 != m2 {
		t.Fatal("two streams got different messages for one commit's update")
	}
	got, err := wireCodec{}.MarshalAppend([]byte("prefix"), m1)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(m1)
	if !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatal("shared encoding differs from proto.Marshal")
	}
	// A message the codec has not seen is marshaled normally.
	other := Batch(push.Batch{Snapshot: true, Updates: b.Updates})
	got, err = wireCodec{}.Marshal(other)
	want, _ = proto.Marshal(other)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Marshal of an unshared batch = %x, %v; want %x", got, err, want)
	}
	var back v1.SnapshotBatch
	if err := (wireCodec{}).Unmarshal(want, &back); err != nil || !back.GetSnapshot() || len(back.GetHeads()) != 1 {
		t.Fatalf("Unmarshal = %v, %v", &back, err)
	}
	if _, err := (wireCodec{}).Marshal("not a message"); err == nil {
		t.Fatal("Marshal of a non-message succeeded")
	}
}

func newMemStore(t *testing.T) varplane.Store {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func activateDoc(t *testing.T, e *varplane.Engine, scope varplane.Scope, doc string) {
	t.Helper()
	ctx := context.Background()
	rev, err := e.CreateRevision(ctx, varplane.CreateRevisionRequest{Scope: scope, Document: json.RawMessage(doc)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev.Revision}); err != nil {
		t.Fatal(err)
	}
}
