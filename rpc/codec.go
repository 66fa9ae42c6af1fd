package rpc

import (
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// Encoding a commit once for every stream.
//
// Almost every batch a stream sends after its snapshot is one update of one
// commit, the same message for every subscriber of that scope. streamBatch
// builds that message once per commit (push.Update.Shared) together with
// its protobuf encoding, and wireCodec, which replaces Connect's "proto"
// codec on this handler, appends the stored encoding instead of marshaling
// the message again for each of the thousand streams.

// sharedBatch is a message sent unchanged to many streams, with its
// encoding. Neither may be mutated once built.
type sharedBatch struct {
	msg  *v1.SnapshotBatch
	wire []byte
	grpc []byte // wire behind the 5-byte gRPC message prefix, for the fan-out server

	zOnce sync.Once
	z     []byte // the gzip-compressed gRPC message, built on first use
}

// gzipped returns the compressed gRPC message, compressed once per commit
// for every stream that accepts gzip.
func (sb *sharedBatch) gzipped() []byte {
	sb.zOnce.Do(func() { sb.z = gzipMessage(sb.wire) })
	return sb.z
}

// recentShared remembers the last shared batches so the codec can find the
// encoding of a message by its pointer. A batch that has left the ring
// (a subscriber far behind) is simply marshaled again.
var (
	recentShared [32]atomic.Pointer[sharedBatch]
	recentNext   atomic.Uint32
)

func sharedOf(m *v1.SnapshotBatch) *sharedBatch {
	for i := range recentShared {
		if sb := recentShared[i].Load(); sb != nil && sb.msg == m {
			return sb
		}
	}
	return nil
}

// streamBatch returns the message for b: shared by every stream when b is a
// single update of a commit, built for this stream otherwise.
func streamBatch(b push.Batch) *v1.SnapshotBatch {
	if b.Snapshot || len(b.Updates) != 1 {
		return Batch(b)
	}
	return b.Updates[0].Shared(push.SlotRPCBatch, func(u *push.Update) any {
		msg := Batch(push.Batch{Updates: []push.Update{*u}})
		wire, err := proto.Marshal(msg)
		if err != nil {
			return msg // the codec marshals (and reports) it per stream
		}
		recentShared[recentNext.Add(1)%uint32(len(recentShared))].Store(&sharedBatch{msg: msg, wire: wire, grpc: grpcMessage(wire)})
		return msg
	}).(*v1.SnapshotBatch)
}

// wireCodec is the protobuf binary codec, with the shortcut for shared
// batches.
type wireCodec struct{}

func (wireCodec) Name() string   { return "proto" }
func (wireCodec) IsBinary() bool { return true }

func (c wireCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

func (wireCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	if sb, ok := m.(*v1.SnapshotBatch); ok {
		if shared := sharedOf(sb); shared != nil {
			return append(dst, shared.wire...), nil
		}
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("rpc: %T is not a protobuf message", m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (wireCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("rpc: %T is not a protobuf message", m)
	}
	return proto.Unmarshal(data, pm)
}
