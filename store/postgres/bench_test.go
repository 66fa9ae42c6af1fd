package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/procstat"
	"github.com/varplane/varplane/store/storetest"
)

func benchHarness(b *testing.B) storetest.Harness {
	u := sharedURL(b)
	return storetest.Harness{Open: func(tb testing.TB) varplane.Store {
		return openStore(tb, freshSchema(tb, u), Options{})
	}}
}

// BenchmarkCommit measures activations (one transaction each) against the
// shared server at parallelism 1 and 64.
func BenchmarkCommit(b *testing.B) {
	for _, par := range []int{1, 64} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			storetest.BenchmarkActivate(b, benchHarness(b), par)
		})
	}
}

// BenchmarkCreateActivate measures a revision-created plus its activation.
func BenchmarkCreateActivate(b *testing.B) { storetest.BenchmarkCreateActivate(b, benchHarness(b)) }

// BenchmarkHeadRead measures State of an installed head (memory only).
func BenchmarkHeadRead(b *testing.B) { storetest.BenchmarkHeadRead(b, benchHarness(b)) }

// BenchmarkCommitToWatch measures the time from the start of an activation
// through store A to its delivery to a Watch listener of store B on the
// same database, and reports p50 and p99.
func BenchmarkCommitToWatch(b *testing.B) {
	u := freshSchema(b, sharedURL(b))
	a := openStore(b, u, Options{})
	bs := openStore(b, u, Options{})
	storetest.CommitToWatch(b, a, bs)
}

// BenchmarkPublish measures publishes of new documents (one varplane_publish
// call each) at parallelism 1 and 64, alone and with a second replica on
// the database, and reports the calls per batch
// transaction and the CPU the PostgreSQL cluster (the postmaster and its
// children, other sessions of the shared server included) spent per commit.
func BenchmarkPublish(b *testing.B) {
	for _, c := range []struct{ par, replicas int }{{1, 1}, {64, 1}, {1, 2}, {64, 2}} {
		b.Run(fmt.Sprintf("parallel=%d/replicas=%d", c.par, c.replicas), func(b *testing.B) {
			par := c.par
			u := freshSchema(b, sharedURL(b))
			s := openStore(b, u, Options{})
			if c.replicas == 2 {
				// a second replica on the database, as in a deployment: it
				// reads the head of every commit it is notified of
				openStore(b, u, Options{})
			}
			conn := rawConn(b, u)
			var backend int
			if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
				b.Fatal(err)
			}
			pm := procstat.Parent(backend)
			st0, c0 := s.Stats(), procstat.TreeCPU(pm)
			storetest.PublishLoad(b, s, par)
			st1, c1 := s.Stats(), procstat.TreeCPU(pm)
			if n := st1.Batches - st0.Batches; n > 0 {
				b.ReportMetric(float64(st1.BatchedCalls-st0.BatchedCalls)/float64(n), "calls/batch")
			}
			// notifications the writer's own listener received per commit:
			// below 1 when an invalidation carries several commits
			b.ReportMetric(float64(st1.Notifications-st0.Notifications)/float64(b.N), "notes/op")
			if c0 >= 0 && c1 >= 0 {
				b.ReportMetric((c1-c0)/float64(b.N)*1e6, "pg-cpu-µs/op")
			}
		})
	}
}
