package redis

import (
	"context"
	"fmt"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// The pages a rollback's search reads from the end of a history list: the
// first is small (a rollback's target is usually among the last few
// events), each next one twice the last, up to the largest.
const (
	rollbackFirstPage = 32
	rollbackLastPage  = 1024
)

// RollbackTarget answers varplane.Store.RollbackTarget from the history
// list in Redis (never from the installed heads, which may be behind
// expected), read backwards in bounded pages until the search has its
// answer. The pages are addressed from the list's start, which no commit
// moves (entries are only appended), so a commit racing the search adds
// entries after them and shifts nothing.
func (s *Store) RollbackTarget(ctx context.Context, scope varplane.Scope, expected varplane.Generation, to *varplane.Generation) (varplane.Revision, error) {
	if err := s.checkOpen(); err != nil {
		return "", err
	}
	if err := checkScope(scope); err != nil {
		return "", err
	}
	key := s.keys.history(scope)
	cctx, cancel := s.cmdCtx(ctx)
	n, err := s.client.Do(cctx, s.client.B().Llen().Key(key).Build()).AsInt64()
	cancel()
	if err != nil {
		return "", s.readFailure("history", scope, err)
	}
	search := varplane.NewRollbackSearch(expected, to)
	for end, page := n, int64(rollbackFirstPage); end > 0; end, page = end-page, min(2*page, rollbackLastPage) {
		start := max(0, end-page)
		cctx, cancel := s.cmdCtx(ctx)
		raw, err := s.client.Do(cctx, s.client.B().Lrange().Key(key).Start(start).Stop(end-1).Build()).AsStrSlice()
		cancel()
		if err != nil {
			return "", s.readFailure("history", scope, err)
		}
		for i := len(raw) - 1; i >= 0; i-- {
			var ev varplane.Event
			if err := eventjson.DecodeEvent([]byte(raw[i]), &ev); err != nil {
				return "", s.decodeFailure(fmt.Sprintf("history entry %d", start+int64(i)), scope, err)
			}
			if search.Step(&ev) {
				return search.Result(scope)
			}
		}
	}
	return search.Result(scope)
}
