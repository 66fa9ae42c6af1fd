package file

import (
	"bytes"
	"testing"
)

// FuzzParseWALRecord: the record parser never panics nor reads past its
// input, accepts only what checks, and reads back what fillWALRecord
// writes.
func FuzzParseWALRecord(f *testing.F) {
	rec := append(make([]byte, walRecHdr), "{\"kind\":\"rejected\"}\n"...)
	fillWALRecord(rec, 7, 3, 1234)
	f.Add(rec)
	f.Add(rec[:walRecHdr+3])
	f.Add(make([]byte, walRecHdr))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := parseWALRecord(b)
		if err != nil {
			return
		}
		if n <= walRecHdr || n > len(b) || len(r.payload) != n-walRecHdr || r.logOff < 0 {
			t.Fatalf("accepted a record of %d bytes with a payload of %d in %d", n, len(r.payload), len(b))
		}
		again := append(make([]byte, walRecHdr), r.payload...)
		fillWALRecord(again, r.epoch, r.seq, r.logOff)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("the record does not read back as written:\n%x\n%x", again, b[:n])
		}
	})
}

// TestScanWALStopsAtEarlierLap: records after the current lap's last one
// that an earlier lap or epoch left are not read.
func TestScanWALStopsAtEarlierLap(t *testing.T) {
	mk := func(epoch, seq uint64, off int64, p string) []byte {
		r := append(make([]byte, walRecHdr), p...)
		fillWALRecord(r, epoch, seq, off)
		return r
	}
	head := walHeader(9)
	for _, tc := range []struct {
		name string
		recs [][]byte
		want int
	}{
		{"one lap", [][]byte{mk(9, 1, 0, "ab"), mk(9, 2, 2, "cd")}, 2},
		{"earlier lap after", [][]byte{mk(9, 5, 10, "ab"), mk(9, 3, 12, "cd")}, 1},
		{"earlier epoch after", [][]byte{mk(9, 1, 0, "ab"), mk(8, 2, 2, "cd")}, 1},
		{"gap in the log", [][]byte{mk(9, 1, 0, "ab"), mk(9, 2, 3, "cd")}, 1},
		{"earlier epoch first", [][]byte{mk(8, 1, 0, "ab")}, 0},
	} {
		ring := bytes.Clone(head)
		for _, r := range tc.recs {
			ring = append(ring, r...)
		}
		ring = append(ring, make([]byte, 64)...)
		if got := len(scanWAL(ring, 9)); got != tc.want {
			t.Errorf("%s: %d records, want %d", tc.name, got, tc.want)
		}
	}
}
