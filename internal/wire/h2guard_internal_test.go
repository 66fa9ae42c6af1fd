package wire

import (
	"encoding/binary"
	"slices"
	"testing"
)

type seenHeader struct {
	typ, flags byte
	stream     uint32
}

// The frame walker finds the same frame headers however the byte stream is
// cut into reads or writes, and says "at a boundary" exactly between
// frames.
func FuzzFrameWalker(f *testing.F) {
	f.Add([]byte{0, 6, 1, 1, 3, 0, 200, 0, 7}, []byte{1, 5, 9})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, spec, cuts []byte) {
		// spec: 3 bytes a frame (payload length, type, flags) and a
		// stream id from the frame's index.
		var stream []byte
		var want []seenHeader
		var ends []int // offsets where a frame ends
		for i := 0; i+3 <= len(spec) && len(want) < 64; i += 3 {
			n := int(spec[i])
			h := seenHeader{typ: spec[i+1], flags: spec[i+2], stream: uint32(len(want))*2 + 1}
			hdr := []byte{byte(n >> 16), byte(n >> 8), byte(n), h.typ, h.flags}
			hdr = binary.BigEndian.AppendUint32(hdr, h.stream|1<<31) // the reserved bit is ignored
			stream = append(append(stream, hdr...), make([]byte, n)...)
			want = append(want, h)
			ends = append(ends, len(stream))
		}
		var w frameWalker
		var got []seenHeader
		at := 0
		for _, c := range append(cuts, 255) {
			n := min(int(c)%17, len(stream)-at)
			if c == 255 {
				n = len(stream) - at
			}
			w.walk(stream[at:at+n], func(typ, flags byte, id uint32) { got = append(got, seenHeader{typ, flags, id}) })
			at += n
			if b := w.atBoundary(); b != (at == 0 || slices.Contains(ends, at)) {
				t.Fatalf("atBoundary = %v at offset %d (frames end at %v)", b, at, ends)
			}
		}
		if at != len(stream) {
			t.Fatalf("walked %d of %d bytes", at, len(stream))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("headers %v, want %v", got, want)
		}
	})
}

// goAway encodes what RFC 9113 §6.8 says.
func TestGoAwayFrame(t *testing.T) {
	f := goAway(1<<31-1, errCodeEnhanceYourCalm, []byte("too_many_pings"))
	if n := int(f[0])<<16 | int(f[1])<<8 | int(f[2]); n != len(f)-9 || n != 8+len("too_many_pings") {
		t.Fatalf("length %d of a %d-byte frame", n, len(f))
	}
	if f[3] != frameGoAway || f[4] != 0 || binary.BigEndian.Uint32(f[5:9]) != 0 {
		t.Fatalf("header % x", f[:9])
	}
	if last, code := binary.BigEndian.Uint32(f[9:13]), binary.BigEndian.Uint32(f[13:17]); last != 1<<31-1 || code != errCodeEnhanceYourCalm || string(f[17:]) != "too_many_pings" {
		t.Fatalf("payload last %d code %d debug %q", last, code, f[17:])
	}
}
