package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// ReclaimRevisions reclaims the bodies of revs of scope in one transaction
// and returns how many it reclaimed (varplane.Reclaimer). Each revision's
// row stays, marked reclaimed_at and without its record, so that a read of
// it answers revision-reclaimed; its revision-created event stays in the
// log without its document. It never reclaims the head's revision nor one
// the scope does not store or has reclaimed already, and it skips a
// revision that a commit in flight holds (an activation or publish of it):
// the next pass takes it if it is still not the head. A failure reclaims
// nothing (the transaction rolls back), so no to-delete list is kept.
//
// Migration 0006 says why these locks cannot let an activation of a
// revision and its reclamation both succeed, nor deadlock.
func (s *Store) ReclaimRevisions(ctx context.Context, scope varplane.Scope, revs []varplane.Revision) (int, error) {
	if err := s.checkWritable(); err != nil {
		return 0, err
	}
	if err := checkScope(scope); err != nil {
		return 0, err
	}
	if len(revs) == 0 {
		return 0, nil
	}
	want := make([]string, len(revs))
	for i, r := range revs {
		want[i] = string(r)
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	n := 0
	err := pgx.BeginFunc(cctx, s.pool, func(tx pgx.Tx) error {
		var err error
		n, err = s.reclaimIn(cctx, tx, scope, want)
		return err
	})
	if err != nil {
		var ve *varplane.Error
		if errors.As(err, &ve) {
			return 0, err
		}
		return 0, varplane.Unavailable(fmt.Errorf("postgres store: reclaim revisions of %q: %w", scope, err))
	}
	return n, nil
}

// reclaimIn runs one reclamation in tx and returns how many revisions it
// marked reclaimed.
func (s *Store) reclaimIn(ctx context.Context, tx pgx.Tx, scope varplane.Scope, want []string) (int, error) {
	// Locked first, in revision order; a row another transaction holds is
	// skipped rather than waited for.
	rows, err := tx.Query(ctx, `SELECT revision FROM revisions
WHERE scope = $1 AND revision = ANY ($2) AND reclaimed_at IS NULL ORDER BY revision FOR UPDATE SKIP LOCKED`, string(scope), want)
	if err != nil {
		return 0, err
	}
	locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(locked) == 0 {
		return 0, err
	}
	// The head is read after the rows are held: an activation of one of
	// them that committed before is seen here, and one that had not taken
	// its row by then waits for this transaction and then finds the
	// revision reclaimed.
	var head *string
	err = tx.QueryRow(ctx, "SELECT revision FROM heads WHERE scope = $1", string(scope)).Scan(&head)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	if head != nil {
		locked = slices.DeleteFunc(locked, func(r string) bool { return r == *head })
	}
	if len(locked) == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, "UPDATE revisions SET record = NULL, reclaimed_at = now() WHERE scope = $1 AND revision = ANY ($2)",
		string(scope), locked); err != nil {
		return 0, err
	}
	// The revision-created events lose their documents, cut out of the
	// stored bytes (withoutDocument). They are found by the text of their
	// revision member (migration 0008): body->>'revision' refuses a body
	// whose document holds \u0000.
	rows, err = tx.Query(ctx, `SELECT seq, body FROM events
WHERE scope = $1 AND kind = 'revision-created' AND varplane_event_revision(body) = ANY ($2) ORDER BY seq`, string(scope), locked)
	if err != nil {
		return 0, err
	}
	type edit struct {
		seq  int64
		body []byte
	}
	var edits []edit
	for rows.Next() {
		var (
			seq  int64
			body []byte
		)
		if err := rows.Scan(&seq, &body); err != nil {
			return 0, err
		}
		bare, ok, err := withoutDocument(body)
		if err != nil {
			rows.Close()
			return 0, s.decodeFailure(fmt.Sprintf("history entry %d", seq), scope, err)
		}
		if ok {
			edits = append(edits, edit{seq, bare})
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(edits) > 0 {
		b := &pgx.Batch{}
		for _, e := range edits {
			b.Queue("UPDATE events SET body = $2 WHERE seq = $1", e.seq, e.body)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return 0, err
		}
	}
	return len(locked), nil
}

// withoutDocument returns the event JSON body without its document member
// (ok false when it has none). The member is cut out of body, so every
// other byte stays as stored, members this binary does not know included;
// when the cut does not decode to the same event, the event is encoded
// anew without its document instead. The events trigger checks the result
// either way (migration 0006).
func withoutDocument(body []byte) (bare []byte, ok bool, err error) {
	var ev varplane.Event
	docAt, docLen, err := eventjson.DecodeEventLazy(body, &ev, nil)
	if err != nil {
		return nil, false, err
	}
	if docLen == 0 {
		return nil, false, nil
	}
	if cut := cutMember(body, docAt, docAt+docLen); cut != nil {
		var got varplane.Event
		if _, n, err := eventjson.DecodeEventLazy(cut, &got, nil); err == nil && n == 0 && reflect.DeepEqual(got, ev) {
			return cut, true, nil
		}
	}
	return eventjson.Event(&ev), true, nil
}

// cutMember returns a copy of the JSON object b without the member whose
// value spans b[from:to], or nil when the bytes around it are not a plain
// `"key":value` member.
func cutMember(b []byte, from, to int) []byte {
	i := skipSpaceBack(b, from-1)
	if i < 0 || b[i] != ':' {
		return nil
	}
	i = skipSpaceBack(b, i-1)
	if i < 1 || b[i] != '"' {
		return nil
	}
	k := bytes.LastIndexByte(b[:i], '"')
	if k < 0 || bytes.IndexByte(b[k:i], '\\') >= 0 {
		return nil
	}
	j := skipSpaceBack(b, k-1)
	switch {
	case j >= 0 && b[j] == ',': // not the first member: cut from its comma
		return append(append([]byte(nil), b[:j]...), b[to:]...)
	case j >= 0 && b[j] == '{': // the first member: cut up to the next one
		e := skipSpace(b, to)
		if e < len(b) && b[e] == ',' {
			return append(append([]byte(nil), b[:k]...), b[skipSpace(b, e+1):]...)
		}
		if e < len(b) && b[e] == '}' {
			return append(append([]byte(nil), b[:k]...), b[e:]...)
		}
	}
	return nil
}

func skipSpaceBack(b []byte, i int) int {
	for i >= 0 && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i--
	}
	return i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
