package postgres

import (
	"testing"
	"time"

	"github.com/varplane/varplane/store/storetest"
)

// Issue 33's reproduction on two replicas of one database, replica B not
// following A (no LISTEN, a five-minute revalidation): a rollback through
// B is resolved against the database as of its expected generation.
func TestRollbackThroughAStaleReplica(t *testing.T) {
	a, b := staleReplicas(t)
	storetest.StaleReplicaRollback(t, a, b)
}

// staleReplicas opens two replicas of one fresh schema, B not following
// A: no LISTEN, a five-minute revalidation.
func staleReplicas(t *testing.T) (a, b *Store) {
	t.Helper()
	u := freshSchema(t, sharedURL(t))
	return openStore(t, u, Options{}), openStore(t, u, Options{noListen: true, RevalidateInterval: 5 * time.Minute})
}
