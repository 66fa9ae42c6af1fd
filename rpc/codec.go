package rpc

import (
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/varplane/varplane/push"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
)

// Encoding a commit once for every stream.
//
// Almost every batch a stream sends after its snapshot is one update of one
// commit, the same message for every subscriber of that scope. streamBatch
// builds that message once per commit (push.Update.Shared) together with
// its protobuf encoding, and the codecs of this package (wireCodec for
// Connect, grpcCodec for grpc-go; both replace the stock "proto" codec of
// their server) append the stored encoding instead of marshaling the
// message again for each of the thousand streams. A Watch response that
// carries a shared batch is its watch id (or the watch_ids of every watch
// of the stream that gets it, see watcher.deliver) and the stored encoding
// as field 6, written without marshaling the batch either.

// sharedBatch is a message sent unchanged to many streams, with its
// encoding. Neither may be mutated once built.
type sharedBatch struct {
	msg  *v1.SnapshotBatch
	wire []byte
}

// recentShared remembers the last shared batches so the codec can find the
// encoding of a message by its pointer. A batch that has left the ring
// (a subscriber far behind) is simply marshaled again.
var (
	recentShared [32]atomic.Pointer[sharedBatch]
	recentNext   atomic.Uint32
)

func sharedOf(m *v1.SnapshotBatch) *sharedBatch {
	if m == nil {
		return nil
	}
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
		recentShared[recentNext.Add(1)%uint32(len(recentShared))].Store(&sharedBatch{msg: msg, wire: wire})
		return msg
	}).(*v1.SnapshotBatch)
}

// watchBatchField is the field number of WatchResponse.batch.
const watchBatchField = 6

// marshalAppend appends m's protobuf encoding to dst, taking the stored
// encoding of a shared batch, alone or inside a WatchResponse.
func marshalAppend(dst []byte, m any) ([]byte, error) {
	switch t := m.(type) {
	case *v1.SnapshotBatch:
		if shared := sharedOf(t); shared != nil {
			return append(dst, shared.wire...), nil
		}
	case *v1.WatchResponse:
		if shared := sharedOf(t.GetBatch()); shared != nil {
			rest := &v1.WatchResponse{WatchId: t.GetWatchId(), Created: t.GetCreated(), Canceled: t.GetCanceled(),
				CancelCode: t.GetCancelCode(), CancelReason: t.GetCancelReason(), Progress: t.GetProgress(), WatchIds: t.GetWatchIds()}
			dst, err := proto.MarshalOptions{}.MarshalAppend(dst, rest)
			if err != nil {
				return nil, err
			}
			dst = protowire.AppendTag(dst, watchBatchField, protowire.BytesType)
			return protowire.AppendBytes(dst, shared.wire), nil
		}
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("rpc: %T is not a protobuf message", m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("rpc: %T is not a protobuf message", m)
	}
	return proto.Unmarshal(data, pm)
}

// wireCodec is connect's protobuf binary codec, with the shortcut for
// shared batches.
type wireCodec struct{}

func (wireCodec) Name() string   { return "proto" }
func (wireCodec) IsBinary() bool { return true }

func (wireCodec) Marshal(m any) ([]byte, error) { return marshalAppend(nil, m) }

func (wireCodec) MarshalAppend(dst []byte, m any) ([]byte, error) { return marshalAppend(dst, m) }

func (wireCodec) Unmarshal(data []byte, m any) error { return unmarshal(data, m) }

// grpcCodec is grpc-go's protobuf codec (encoding.CodecV2), with the
// shortcut for shared batches. A shared encoding is handed to grpc-go as a
// buffer that is never freed into a pool: grpc-go only reads it.
type grpcCodec struct{}

func (grpcCodec) Name() string { return "proto" }

func (grpcCodec) Marshal(m any) (mem.BufferSlice, error) {
	if sb, ok := m.(*v1.SnapshotBatch); ok {
		if shared := sharedOf(sb); shared != nil {
			return mem.BufferSlice{mem.SliceBuffer(shared.wire)}, nil
		}
	}
	b, err := marshalAppend(nil, m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (grpcCodec) Unmarshal(data mem.BufferSlice, m any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return unmarshal(buf.ReadOnlyData(), m)
}
