package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// TestDocumentStoredOnce: the history list holds the events without their
// documents (the record holds each document once), History reads them back
// whole, and after reclamation the entry stays, without a document.
func TestDocumentStoredOnce(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	s := openStore(t, u, Options{})
	ctx := context.Background()
	c := storetest.CreatedEvent("once.k", storetest.Doc(1))
	if _, err := s.AppendPublish(ctx, c, storetest.ActivatedEvent("once.k", c.Revision, 0), 0); err != nil {
		t.Fatal(err)
	}
	c2 := storetest.CreatedEvent("once.k", storetest.Doc(2))
	if err := s.Append(ctx, c2, 0); err != nil {
		t.Fatal(err)
	}
	raw, err := rawClient(t, u).Do(ctx, s.client.B().Lrange().Key(s.keys.history("once.k")).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil || len(raw) != 3 {
		t.Fatalf("history list %v, %v", raw, err)
	}
	for _, r := range raw {
		if strings.Contains(r, `"document"`) {
			t.Errorf("a history entry holds a document: %s", r)
		}
	}
	hist, err := s.History(ctx, "once.k")
	if err != nil || len(hist) != 3 || string(hist[0].Document) == "" || string(hist[2].Document) == "" {
		t.Fatalf("History = %+v, %v; want the documents attached", hist, err)
	}
	if n, err := s.ReclaimRevisions(ctx, "once.k", []varplane.Revision{c.Revision, c2.Revision}); err != nil || n != 1 {
		t.Fatalf("ReclaimRevisions = %d, %v; want 1 (the head is kept)", n, err)
	}
	hist, err = s.History(ctx, "once.k")
	if err != nil || len(hist) != 3 || hist[2].Revision != c2.Revision || hist[2].Document != nil || hist[0].Document == nil {
		t.Fatalf("History after reclaiming = %+v, %v", hist, err)
	}
}
