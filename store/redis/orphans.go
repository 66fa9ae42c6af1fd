package redis

import (
	"context"
	"strings"

	"github.com/varplane/varplane"
)

// RevisionRecords lists, by scope, every revision whose record Redis holds
// under the store's prefix (reclaimed ones excepted), for retention's
// orphan rule (varplane.RecordLister): a record that no revision-created
// event of its scope names is one whose commit did not complete, a script
// that stopped after writing it. Redis indexes no records, so this is one
// SCAN of every node (1,000 keys a step), once per reclamation pass.
func (s *Store) RevisionRecords(ctx context.Context) (map[varplane.Scope][]varplane.Revision, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	pattern := globEscape(s.keys.prefix) + ":{*}:rev:*"
	seen := map[string]bool{} // a replica lists its primary's keys again
	out := map[varplane.Scope][]varplane.Revision{}
	for _, c := range s.client.Nodes() {
		var cursor uint64
		for {
			cctx, cancel := s.cmdCtx(ctx)
			e, err := c.Do(cctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			cancel()
			if err != nil {
				return nil, s.readFailure("revision records", "", err)
			}
			for _, k := range e.Elements {
				if seen[k] {
					continue
				}
				seen[k] = true
				if scope, rev, ok := s.keys.parseRevision(k); ok {
					out[scope] = append(out[scope], rev)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return out, nil
}

// parseRevision reads the scope and revision out of a revision record's
// key (keys.revision); ok is false for any other key. The tag never holds
// a '}', and a revision has a fixed length, so neither a '}' nor a ':' in
// the scope misleads it.
func (k keys) parseRevision(key string) (varplane.Scope, varplane.Revision, bool) {
	rest, ok := strings.CutPrefix(key, k.prefix+":{")
	if !ok {
		return "", "", false
	}
	end := strings.IndexByte(rest, '}')
	if end < 0 {
		return "", "", false
	}
	if rest, ok = strings.CutPrefix(rest[end+1:], ":rev:"); !ok {
		return "", "", false
	}
	const revLen = len("sha256:") + 64
	if len(rest) < revLen+2 || rest[len(rest)-revLen-1] != ':' {
		return "", "", false
	}
	rev, err := varplane.ParseRevision(rest[len(rest)-revLen:])
	if err != nil {
		return "", "", false
	}
	scope := varplane.Scope(rest[:len(rest)-revLen-1])
	if k.revision(scope, rev) != key {
		return "", "", false // a tag that is not the scope's own
	}
	return scope, rev, true
}

// globEscape escapes the characters SCAN's MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
