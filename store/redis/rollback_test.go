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
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{noSubscribe: true, RevalidateInterval: 5 * time.Minute})
	storetest.StaleReplicaRollback(t, a, b)
}
