package redis

import (
	"context"
	"testing"
	"time"

	"github.com/varplane/varplane/store/storetest"
)

// TestStatusHeldAnHour: the key of a status is written with a PTTL of
// about an hour (StatusTTL; it was two minutes), which is what lets
// deletion protection name an instance gone for half an hour. The value
// comes back as written, an old writtenAt and all (its reader judges the
// age); an expired key is left out though its instance is still listed.
func TestStatusHeldAnHour(t *testing.T) {
	u := sharedURL(t)
	s := openStore(t, withPrefix(t, u, testPrefix(t, u)), Options{ReadOnly: true})
	ctx := context.Background()
	now := time.Now()
	old := storetest.StatusWrittenAt("pod-30", now.Add(-30*time.Minute))
	for id, v := range map[string][]byte{"pod-30": old, "pod-gone": []byte(`{}`)} {
		if err := s.ListInstance(ctx, id, now); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteStatus(ctx, id, v); err != nil {
			t.Fatal(err)
		}
	}
	raw := rawClient(t, u)
	ttl, err := raw.Do(ctx, raw.B().Pttl().Key(s.keys.statusKey("pod-30")).Build()).AsInt64()
	if d := time.Duration(ttl) * time.Millisecond; err != nil || d < time.Hour-time.Minute || d > time.Hour {
		t.Fatalf("PTTL of a status just written = %v, %v; want about an hour", d, err)
	}
	// pod-gone's key expires (as it would 61 minutes after its last write).
	if err := raw.Do(ctx, raw.B().Del().Key(s.keys.statusKey("pod-gone")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	storetest.WantHeldStatuses(t, s, map[string][]byte{"pod-30": old})
}
