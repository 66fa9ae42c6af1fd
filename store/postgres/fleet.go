package postgres

import (
	"context"

	"github.com/varplane/varplane"
)

var _ varplane.StatusPager = (*Store)(nil)

// InstanceStatusPage returns the unexpired statuses after after in id
// order (the table's id is COLLATE "C": byte order, read along its primary
// key), at most limit of them, and the cursor of the next page ("" when
// none remain).
func (s *Store) InstanceStatusPage(ctx context.Context, after string, limit int) ([]varplane.StatusValue, string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, "", err
	}
	limit = varplane.StatusPageLimit(limit)
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	// One row more than the page says whether another page follows.
	rows, err := s.pool.Query(ctx, `SELECT id, value FROM instance_status WHERE id > $1 AND expires > now() ORDER BY id LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, "", s.readFailure("instance status page", "", err)
	}
	defer rows.Close()
	var out []varplane.StatusValue
	for rows.Next() {
		var v varplane.StatusValue
		if err := rows.Scan(&v.ID, &v.Value); err != nil {
			return nil, "", s.readFailure("instance status page", "", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.readFailure("instance status page", "", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}
