package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/varplane/varplane/store/storetest"
)

// TestStatusHeldAnHour: a status row expires StatusTTL (an hour) after its
// last write by the database's clock, not the two minutes it once did, so
// that deletion protection still names an instance that stopped half an
// hour ago; the store answers it whatever its writtenAt says (the reader
// judges the age), and a row whose expiry passed (written 61 minutes ago)
// is neither answered nor kept by the next write.
func TestStatusHeldAnHour(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	s := openStore(t, u, Options{})
	ctx := context.Background()
	old := storetest.StatusWrittenAt("pod-30", time.Now().Add(-30*time.Minute))
	for id, v := range map[string][]byte{"pod-30": old, "pod-61": []byte(`{}`)} {
		if err := s.WriteStatus(ctx, id, v); err != nil {
			t.Fatal(err)
		}
	}
	raw := rawConn(t, u)
	var left float64
	if err := raw.QueryRow(ctx, `SELECT extract(epoch FROM expires - now()) FROM instance_status WHERE id = 'pod-30'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(left * float64(time.Second)); d < time.Hour-time.Minute || d > time.Hour {
		t.Fatalf("a status just written expires in %v; want about an hour", d)
	}
	// Age the rows by the database's clock: pod-30 as written 30 minutes
	// ago, pod-61 61 minutes ago.
	if _, err := raw.Exec(ctx, `UPDATE instance_status SET expires = now() + $2::bigint * interval '1 millisecond' WHERE id = $1`,
		"pod-30", (StatusTTL - 30*time.Minute).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, `UPDATE instance_status SET expires = now() + $2::bigint * interval '1 millisecond' WHERE id = $1`,
		"pod-61", (StatusTTL - 61*time.Minute).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	storetest.WantHeldStatuses(t, s, map[string][]byte{"pod-30": old})
	if err := s.WriteStatus(ctx, "pod-new", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM instance_status WHERE id = 'pod-61'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("an expired row after a write: %d rows, %v; want it deleted", n, err)
	}
}
