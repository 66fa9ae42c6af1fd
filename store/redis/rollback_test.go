package redis

import (
	"testing"
	"time"

	"github.com/varplane/varplane/store/storetest"
)

// Issue 33's reproduction on two replicas of one Redis, replica B not
// following A (no subscription, a five-minute revalidation): a rollback
// through B is resolved against Redis as of its expected generation.
func TestRollbackThroughAStaleReplica(t *testing.T) {
	a, b := staleReplicas(t)
	storetest.StaleReplicaRollback(t, a, b)
}

// staleReplicas opens two replicas of one fresh prefix, B not following
// A: no subscription, a five-minute revalidation.
func staleReplicas(t *testing.T) (a, b *Store) {
	t.Helper()
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	return openStore(t, u, Options{}), openStore(t, u, Options{noSubscribe: true, RevalidateInterval: 5 * time.Minute})
}
