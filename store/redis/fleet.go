package redis

import (
	"context"
	"slices"

	"github.com/varplane/varplane"
)

var _ varplane.StatusPager = (*Store)(nil)

// InstanceStatusPage reads the instance list's ids (names only), sorts
// them, and GETs the statuses of at most limit ids after after: the page
// holds those that have not expired, and next is the last id it examined
// while more remain ("" otherwise). A page may so hold fewer than limit
// statuses while next is set.
func (s *Store) InstanceStatusPage(ctx context.Context, after string, limit int) ([]varplane.StatusValue, string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, "", err
	}
	limit = varplane.StatusPageLimit(limit)
	cctx, cancel := s.cmdCtx(ctx)
	ids, err := s.client.Do(cctx, s.client.B().Hkeys().Key(s.keys.instanceList()).Build()).AsStrSlice()
	cancel()
	if err != nil {
		return nil, "", s.readFailure("instance list", "", err)
	}
	ids = slices.DeleteFunc(ids, func(id string) bool { return id <= after })
	slices.Sort(ids)
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	cctx, cancel = s.cmdCtx(ctx)
	defer cancel()
	vals, err := s.getEach(cctx, ids, s.keys.statusKey, "instance status")
	if err != nil {
		return nil, "", err
	}
	out := make([]varplane.StatusValue, 0, len(vals))
	for _, id := range ids {
		if v, ok := vals[id]; ok {
			out = append(out, varplane.StatusValue{ID: id, Value: v})
		}
	}
	return out, next, nil
}
