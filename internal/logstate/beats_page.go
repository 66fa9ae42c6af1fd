package logstate

import (
	"context"
	"slices"

	"github.com/varplane/varplane"
)

var _ varplane.StatusPager = (*Beats)(nil)

// InstanceStatusPage returns the unexpired statuses after after in id
// order, at most limit of them, and the cursor of the next page ("" when
// none remain). It sorts the ids it holds (at most MaxBeatStatuses) and
// copies only the page's values.
func (b *Beats) InstanceStatusPage(ctx context.Context, after string, limit int) ([]varplane.StatusValue, string, error) {
	if err := b.usable(ctx); err != nil {
		return nil, "", err
	}
	limit = varplane.StatusPageLimit(limit)
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.statuses))
	for id, e := range b.statuses {
		if id > after && e.Value.(*statusBeat).held(now) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	out := make([]varplane.StatusValue, len(ids))
	for i, id := range ids {
		out[i] = varplane.StatusValue{ID: id, Value: slices.Clone(b.statuses[id].Value.(*statusBeat).value)}
	}
	return out, next, nil
}
