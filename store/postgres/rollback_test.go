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
	u := freshSchema(t, sharedURL(t))
	a := openStore(t, u, Options{})
	b := openStore(t, u, Options{noListen: true, RevalidateInterval: 5 * time.Minute})
	storetest.StaleReplicaRollback(t, a, b)
}
