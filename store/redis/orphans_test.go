package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
	"github.com/varplane/varplane/retention"
	"github.com/varplane/varplane/store/storetest"
)

// forgeOrphan writes the record of Doc(i) in scope as a script that stopped
// after its first write would leave it: no event, no index entry.
func forgeOrphan(t *testing.T, s *Store, scope varplane.Scope, i int, at time.Time) varplane.Revision {
	t.Helper()
	doc := storetest.Doc(i)
	rec := varplane.RevisionRecord{Scope: scope, Revision: storetest.RevisionOf(doc), Document: doc, Actor: "storetest", CreatedAt: at}
	if err := s.client.Do(context.Background(), s.client.B().Set().Key(s.keys.revision(scope, rec.Revision)).Value(string(eventjson.Record(&rec))).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return rec.Revision
}

// Issue 33 item 1 on Redis: a record no revision-created event names (its
// commit did not complete) is an orphan, reclaimed by a pass once older
// than the orphan age, also in a scope whose only commit never completed;
// a revision created and never activated is not one.
func TestOrphanRecordsReclaimed(t *testing.T) {
	u := sharedURL(t)
	s := openStore(t, withPrefix(t, u, testPrefix(t, u)), Options{})
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	staged := storetest.CreatedEvent("app.k", storetest.Doc(1))
	staged.Timestamp = t0
	if err := s.Append(ctx, staged, 0); err != nil {
		t.Fatal(err)
	}
	orphan := forgeOrphan(t, s, "app.k", 2, t0)
	ghost := forgeOrphan(t, s, "ghost.k", 3, t0)
	recs, err := s.RevisionRecords(ctx)
	if err != nil || len(recs["app.k"]) != 2 || len(recs["ghost.k"]) != 1 || recs["ghost.k"][0] != ghost {
		t.Fatalf("RevisionRecords = %v, %v; want app.k's two and ghost.k's one", recs, err)
	}
	pass := func(at time.Duration) retention.Report {
		t.Helper()
		r, err := retention.New(s, retention.Options{Policy: retention.DefaultPolicy(), Holder: "replica-a", Now: func() time.Time { return t0.Add(at) }})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := pass(59 * time.Minute); rep.Reclaimed != 0 {
		t.Errorf("a pass before the orphan age reclaimed %d", rep.Reclaimed)
	}
	if rep := pass(61 * time.Minute); rep.Reclaimed != 2 {
		t.Errorf("a pass after the orphan age reclaimed %d, want the 2 orphans", rep.Reclaimed)
	}
	for _, c := range []struct {
		scope varplane.Scope
		rev   varplane.Revision
	}{{"app.k", orphan}, {"ghost.k", ghost}} {
		if _, err := s.Revision(ctx, c.scope, c.rev); !errors.Is(err, varplane.ErrReclaimed) {
			t.Errorf("orphan %s of %s: %v, want revision-reclaimed", c.rev, c.scope, err)
		}
	}
	if _, err := s.Revision(ctx, "app.k", staged.Revision); err != nil {
		t.Errorf("the staged revision: %v, want it kept", err)
	}
}

// RevisionRecords lists the records under the store's own prefix only,
// even when the prefix holds characters SCAN's MATCH reads as a pattern.
func TestRevisionRecordsPrefixIsLiteral(t *testing.T) {
	u := sharedURL(t)
	base := testPrefix(t, u)
	mine := openStore(t, withPrefix(t, u, base+"-a*"), Options{})
	other := openStore(t, withPrefix(t, u, base+"-ab"), Options{})
	t.Cleanup(func() { deletePrefix(t, u, base+"-ab") })
	t.Cleanup(func() { deletePrefix(t, u, base+"-a\\*") })
	storetest.MustCreate(t, mine, "a.k", 1)
	storetest.MustCreate(t, other, "a.k", 2)
	recs, err := mine.RevisionRecords(context.Background())
	if err != nil || len(recs) != 1 || len(recs["a.k"]) != 1 || recs["a.k"][0] != storetest.RevisionOf(storetest.Doc(1)) {
		t.Fatalf("RevisionRecords = %v, %v; want the one record of this prefix", recs, err)
	}
}

func TestParseRevisionKey(t *testing.T) {
	k := keys{prefix: "vp"}
	rev := storetest.RevisionOf(storetest.Doc(1))
	for _, scope := range []varplane.Scope{"a", "a.b", "tenant:acme", "x}:rev:y", "グループ.日本"} {
		if sc, r, ok := k.parseRevision(k.revision(scope, rev)); !ok || sc != scope || r != rev {
			t.Errorf("parseRevision(revision(%q)) = %q %s %v", scope, sc, r, ok)
		}
	}
	for _, key := range []string{
		k.history("a.b"), k.head("a.b"), k.reclaimed("a.b", rev), k.idem("a.b", "key"),
		"vp:{YQ}:rev:a.b:sha256:zz", "other:{YQ}:rev:a:" + string(rev), "vp:{Yg}:rev:a:" + string(rev),
	} {
		if sc, r, ok := k.parseRevision(key); ok {
			t.Errorf("parseRevision(%q) = %q %s, want no record", key, sc, r)
		}
	}
}
