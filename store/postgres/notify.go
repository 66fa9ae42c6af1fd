package postgres

import (
	"strings"
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
		_, err := s.pool.Exec(ctx, "SELECT varplane_notify($1, $2)", s.channel, mergePayloads(batch))
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

// eachSuffix marks a payload that merges the invalidations of independent
// commits: "<kind> each\n<version> <generation> <scope>\n…" announces one
// commit of kind per line, where "<kind>\n…" with several lines is one
// commit changing them all (a subtree deactivation). A receiver reads all
// the lines' heads in one query and delivers each as its own commit.
const eachSuffix = " each"

// mergePayloads merges runs of consecutive one-line payloads of one kind
// into "<kind> each" payloads of at most maxPayload bytes, keeping their
// order: the other replicas then take one notification, and one read of
// the heads, for a run of commits instead of one each. A payload holds a
// scope once: two commits of one scope stay in two notifications, handled
// in order as before (a replica that read only the second could not
// deliver the first of a scope it had not installed). Other payloads (a
// subtree deactivation's, a "*") go as they are.
func mergePayloads(batch []string) []string {
	out := make([]string, 0, len(batch))
	var (
		cur    strings.Builder
		kind   string // of cur; "" when cur is empty
		n      int    // lines in cur
		scopes = map[string]bool{}
	)
	flush := func() {
		if n == 1 { // a lone commit goes in its plain form
			out = append(out, kind+"\n"+strings.TrimPrefix(cur.String(), kind+eachSuffix+"\n"))
		} else if n > 1 {
			out = append(out, cur.String())
		}
		cur.Reset()
		kind, n = "", 0
		clear(scopes)
	}
	for _, p := range batch {
		k, line, ok := strings.Cut(p, "\n")
		if !ok || line == "*" || strings.Contains(line, "\n") {
			flush()
			out = append(out, p)
			continue
		}
		// "<version> <generation> <scope>"
		_, scope, _ := strings.Cut(line, " ")
		_, scope, _ = strings.Cut(scope, " ")
		if k != kind || cur.Len()+1+len(line) > maxPayload || scopes[scope] {
			flush()
		}
		scopes[scope] = true
		if n == 0 {
			kind = k
			cur.WriteString(k + eachSuffix)
		}
		cur.WriteString("\n" + line)
		n++
	}
	flush()
	return out
}
