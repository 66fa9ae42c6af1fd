package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/redis/redistest"
	"github.com/varplane/varplane/store/storetest"
)

// clusterPrefix is a fresh prefix on the private cluster (which is removed
// with its processes, so nothing is cleaned up key by key).
func clusterPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "vpc-" + hex.EncodeToString(b)
}

// TestClusterConformance runs the store conformance suite unchanged on a
// real three-master Redis Cluster, with the chain's and the two-replica
// race, and checks that scripts touching a
// subtree, the generation floor and the status heartbeat work across slots.
func TestClusterConformance(t *testing.T) {
	c := redistest.StartCluster(t)
	h := storetest.Harness{
		Open: func(tb testing.TB) varplane.Store {
			return openStore(tb, c.URL(clusterPrefix()), Options{})
		},
		Reopen: func(tb testing.TB, s varplane.Store) varplane.Store {
			prefix := s.(*Store).keys.prefix
			_ = s.Close()
			return openStore(tb, c.URL(prefix), Options{})
		},
	}
	storetest.Run(t, h)
	t.Run("ChainTwoReplicas", func(t *testing.T) {
		prefix := clusterPrefix()
		storetest.ChainReplicas(t, openStore(t, c.URL(prefix), Options{}), openStore(t, c.URL(prefix), Options{}))
	})

	t.Run("VanishedHead", func(t *testing.T) {
		s := openStore(t, c.URL(clusterPrefix()), Options{})
		if got := len(s.client.Nodes()); got < 3 {
			t.Fatalf("the client sees %d nodes, want the 3 masters", got)
		}
		ctx := context.Background()
		for _, sc := range []varplane.Scope{"a.x", "b.y", "c.z", "d.w"} {
			rev := create(t, s, sc, 1)
			activate(t, s, sc, rev, 0)
			if err := s.client.Do(ctx, s.client.B().Del().Key(s.keys.head(sc)).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			st, err := openStore(t, c.URL(s.keys.prefix), Options{}).State(ctx, sc)
			wantFailed(t, "State after DEL on the cluster", st, err)
			wantFailed(t, "activate at generation 1 again", nil, s.Append(ctx, storetest.ActivatedEvent(sc, rev, 0), 0))
		}
	})

	t.Run("StatusHeartbeat", func(t *testing.T) {
		s := openStore(t, c.URL(clusterPrefix()), Options{ReadOnly: true})
		ctx := context.Background()
		now := time.Now()
		for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
			if err := s.WriteStatus(ctx, id, []byte(`{"instance":"`+id+`"}`)); err != nil {
				t.Fatal(err)
			}
			if err := s.ListInstance(ctx, id, now); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.ListInstance(ctx, "pod-old", now.Add(-4*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.ListInstance(ctx, "pod-a", now); err != nil { // drops pod-old
			t.Fatal(err)
		}
		got, err := s.InstanceStatuses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || string(got["pod-b"]) != `{"instance":"pod-b"}` {
			t.Fatalf("statuses = %q", got)
		}
		ttl, err := s.client.Do(ctx, s.client.B().Pttl().Key(s.keys.statusKey("pod-a")).Build()).AsInt64()
		if err != nil || ttl <= 0 || ttl > StatusTTL.Milliseconds() {
			t.Fatalf("status TTL = %d ms, %v; want within %v", ttl, err, StatusTTL)
		}
		n, err := s.client.Do(ctx, s.client.B().Hexists().Key(s.keys.instanceList()).Field("pod-old").Build()).AsBool()
		if err != nil || n {
			t.Fatalf("an entry older than 3h is still listed (%v, %v)", n, err)
		}
	})
}
