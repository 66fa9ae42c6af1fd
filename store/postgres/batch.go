package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Commit batching. Every commit must wait for its WAL flush; on a small
// machine the fixed cost of a transaction (its begin, commit and flush
// wait, the backend's context switches) dominates, so concurrent commits
// are grouped: a caller that finds commits waiting takes the lead, runs up
// to maxBatch of them (its own among them) in one transaction, and answers
// all of them once it commits; at most leaders batches run at once. Each
// call keeps its own semantics inside the batch, because the commit
// functions answer a refusal (conflict, duplicate, ...) without writing
// anything and later calls see the writes of earlier ones (two activations
// of one scope in a batch are compared in order). A call that fails with an
// error the server raised (a racing idempotency key, a deadlock) aborts the
// batch: nothing of it was committed, and every call of it is run again on
// its own. A lone caller runs its own statement straight away, on its own
// goroutine, so one writer pays no batching latency. The publishes of a
// batch go as one varplane_publish_batch statement, which answers each as
// its own varplane_publish call would, for a fraction of the server's
// work per publish.

const (
	// leaders is the number of batches that may run at once; each holds
	// one pool connection while it runs. Two let one batch fill while the
	// other waits for its flush; more make smaller batches, and more
	// transactions for the same commits (on 2 cores, 64 publishers: about
	// 18 calls a batch and 140 µs of server CPU a commit with two, 11 and
	// 160 µs with four, 7 and 185 µs with sixteen).
	leaders = 2
	// maxBatch bounds the calls of one transaction.
	maxBatch = 64
)

// commitCall is one commit function call waiting to be run.
type commitCall struct {
	ctx   context.Context
	scope string // a batch runs its calls in scope order (stable)
	sql   string
	args  []any
	dst   []any
	done  chan error
	// publish marks a varplane_publish call (args are its ten
	// arguments): a run of them in a batch is sent as one
	// varplane_publish_batch statement.
	publish bool
}

// call runs one commit function statement and scans its row, in a batch
// with whatever else is waiting.
func (s *Store) call(ctx context.Context, scope string, sql string, args []any, dst ...any) error {
	return s.enqueue(&commitCall{ctx: ctx, scope: scope, sql: sql, args: args, dst: dst, done: make(chan error, 1)})
}

// enqueue runs c in a batch with whatever else is waiting.
func (s *Store) enqueue(c *commitCall) error {
	ctx := c.ctx
	select {
	case s.calls <- c:
	case <-ctx.Done():
		return notSent{ctx.Err()}
	}
	for {
		select {
		case err := <-c.done:
			return err
		case s.lead <- struct{}{}:
			ran := s.runQueued()
			<-s.lead
			if !ran {
				// The queue was empty: another leader took this call
				// and answers it.
				return <-c.done
			}
		}
	}
}

// runQueued runs the calls waiting (up to maxBatch) and answers them. It
// reports false when there were none.
func (s *Store) runQueued() bool {
	batch := make([]*commitCall, 0, 8)
fill:
	for len(batch) < maxBatch {
		select {
		case c := <-s.calls:
			batch = append(batch, c)
		default:
			break fill
		}
	}
	if len(batch) == 0 {
		return false
	}
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.done <- notSent{err}
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
	case 1:
		live[0].done <- s.single(live[0])
	default:
		s.runBatch(live)
	}
	return true
}

// single runs one call in a transaction of its own, retrying a
// transaction the server rolled back on a serialization failure or a
// deadlock.
func (s *Store) single(c *commitCall) error {
	var err error
	for range 3 {
		conn, aerr := s.pool.Acquire(c.ctx)
		if aerr != nil {
			return notSent{aerr} // no connection: the statement was not sent
		}
		err = conn.QueryRow(c.ctx, c.sql, c.args...).Scan(c.dst...)
		conn.Release()
		if !retryable(err) {
			return err
		}
	}
	return err
}

// runBatch runs calls in one transaction and answers each.
func (s *Store) runBatch(calls []*commitCall) {
	slices.SortStableFunc(calls, func(a, b *commitCall) int { return strings.Compare(a.scope, b.scope) })
	// The batch is bounded by the earliest deadline of its calls, but not
	// cancelled with any one of them: a caller that goes away must not
	// fail the commits of the others.
	deadline := time.Now().Add(s.opts.CommandTimeout)
	for _, c := range calls {
		if d, ok := c.ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	s.stats.batches.Add(1)
	s.stats.batchedCalls.Add(uint64(len(calls)))
	err, serverRefused := s.tryBatch(ctx, calls)
	switch {
	case err == nil:
		for _, c := range calls {
			c.done <- nil
		}
	case serverRefused:
		// Nothing was committed: each call runs again on its own and
		// gets its own answer (such as a duplicate idempotency key).
		s.stats.batchRetries.Add(1)
		for _, c := range calls {
			c.done <- s.single(c)
		}
	default:
		for _, c := range calls {
			c.done <- err
		}
	}
}

// tryBatch runs calls in one transaction, in one round trip: the
// statements are pipelined (pgx.Batch) and the server runs everything
// before the pipeline's Sync as one implicit transaction, committed at the
// Sync, so the batch needs no BEGIN and no COMMIT of its own. A statement
// that fails makes the server skip the rest and roll the whole transaction
// back. serverRefused reports an error the server raised for a statement or
// the commit, after which nothing of the batch is committed.
func (s *Store) tryBatch(ctx context.Context, calls []*commitCall) (err error, serverRefused bool) {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(calls))}
	// Each run of consecutive publishes (calls are in scope order, so the
	// publishes of a batch usually form one run) becomes one statement,
	// answering one row per call in order; every other call is its own.
	var runs [][]*commitCall
	for i := 0; i < len(calls); {
		j := i + 1
		if calls[i].publish {
			for j < len(calls) && calls[j].publish {
				j++
			}
		}
		run := calls[i:j]
		if len(run) > 1 {
			b.Queue(publishBatchSQL, publishArrays(run)...)
		} else {
			b.Queue(run[0].sql, run[0].args...)
		}
		runs = append(runs, run)
		i = j
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return notSent{err}, false // no connection: nothing was sent
	}
	defer conn.Release()
	br := conn.SendBatch(ctx, b)
	var first error
	for _, run := range runs {
		var err error
		if len(run) == 1 {
			err = br.QueryRow().Scan(run[0].dst...)
		} else {
			err = scanRun(br, run)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	// Close reads up to the Sync's answer: the commit. A commit the server
	// refused is rolled back; any other failure of it is ambiguous and
	// reported as it is.
	if cerr := br.Close(); cerr != nil && first == nil {
		first = cerr
	}
	if first != nil {
		return first, isServerError(first)
	}
	return nil, false
}

// publishColumns are the columns of varplane_publish's answer, and of
// each row of varplane_publish_batch's.
const publishColumns = "status, cur_generation, new_version, last_rejected, rev_record, created, link_seq, link_hash, created_hash"

// publishBatchSQL runs a run of publishes in one statement.
const publishBatchSQL = "SELECT " + publishColumns + " FROM varplane_publish_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"

// publishArrays turns the arguments of a run of varplane_publish calls
// into the thirteen arrays of varplane_publish_batch: element i of each is
// an argument of call i.
func publishArrays(run []*commitCall) []any {
	var (
		scopes, revs, hashes       []string
		created, activated, keyedA []string
		expected, gens             []int64
		records, cc, ca, cka       [][]byte
		keys                       []*string
	)
	for _, c := range run {
		a := c.args
		scopes = append(scopes, a[0].(string))
		expected = append(expected, a[1].(int64))
		gens = append(gens, a[2].(int64))
		revs = append(revs, a[3].(string))
		records = append(records, a[4].([]byte))
		created = append(created, a[5].(string))
		activated = append(activated, a[6].(string))
		keyedA = append(keyedA, a[7].(string))
		var key *string // nullable(""): no key
		if k, ok := a[8].(string); ok {
			key = &k
		}
		keys = append(keys, key)
		hashes = append(hashes, a[9].(string))
		cc = append(cc, a[10].([]byte))
		ca = append(ca, a[11].([]byte))
		cka = append(cka, a[12].([]byte))
	}
	return []any{scopes, expected, gens, revs, records, created, activated, keyedA, keys, hashes, cc, ca, cka}
}

// scanRun scans the rows of a varplane_publish_batch statement, one per
// call of run, in order.
func scanRun(br pgx.BatchResults, run []*commitCall) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if n == len(run) {
			return errors.New("postgres store: varplane_publish_batch answered more rows than publishes")
		}
		if err := rows.Scan(run[n].dst...); err != nil {
			return err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != len(run) {
		return errors.New("postgres store: varplane_publish_batch answered fewer rows than publishes")
	}
	return nil
}

// isServerError reports an error the server raised (as opposed to a
// failure to reach it, or a context that ended).
func isServerError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}
