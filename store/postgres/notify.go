package postgres

import (
	"time"
)

// notify queues an invalidation for the notifier. It never blocks a
// commit: when the queue is full the payload is dropped (and counted), and
// the other replicas' revalidation passes catch the commit.
func (s *Store) notify(payload string) {
	if s.notes == nil {
		return
	}
	select {
	case s.notes <- payload:
	default:
		s.stats.notifyDropped.Add(1)
	}
}

// notifyBatch bounds the payloads one varplane_notify call sends.
const notifyBatch = 256

// notifyLoop sends queued invalidations in batches, each one call of
// varplane_notify (one transaction, committed asynchronously), in queue
// order. A batch that fails is dropped, not retried: the commits it
// announced are durable, and every replica's next revalidation pass
// installs them.
func (s *Store) notifyLoop() {
	defer s.wg.Done()
	batch := make([]string, 0, notifyBatch)
	for {
		select {
		case <-s.ctx.Done():
			return
		case p := <-s.notes:
			batch = append(batch[:0], p)
		}
	fill:
		for len(batch) < notifyBatch {
			select {
			case p := <-s.notes:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		ctx, cancel := s.cmdCtx(s.ctx)
		_, err := s.pool.Exec(ctx, "SELECT varplane_notify($1, $2)", s.channel, batch)
		cancel()
		if err != nil {
			s.stats.notifyErrors.Add(uint64(len(batch)))
			if s.ctx.Err() == nil {
				s.log.Warn("postgres store: invalidations not sent; other replicas install these commits at their next revalidation pass",
					"count", len(batch), "err", err)
				select { // do not spin against a database that is down
				case <-time.After(50 * time.Millisecond):
				case <-s.ctx.Done():
					return
				}
			}
			continue
		}
		s.stats.notified.Add(uint64(len(batch)))
	}
}
