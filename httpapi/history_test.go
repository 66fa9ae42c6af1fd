package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/jsontext"
	"github.com/varplane/varplane/store/memory"
)

// bodyCountingStore is a memory store whose EventHistory carries no
// documents (as the file, Redis and PostgreSQL stores' need not), whose
// History is refused (the history route must not read every body at
// once), and whose Revision counts its reads and answers ErrReclaimed for
// one revision, as after retention.
type bodyCountingStore struct {
	*memory.Store
	reclaimed varplane.Revision
	reads     atomic.Int64
	failAfter int64 // Revision fails with a store error after this many reads (0: never)
}

func (s *bodyCountingStore) History(context.Context, varplane.Scope) ([]varplane.Event, error) {
	return nil, errors.New("History read every body of the scope")
}

func (s *bodyCountingStore) EventHistory(ctx context.Context, scope varplane.Scope) ([]varplane.Event, error) {
	h, err := s.Store.History(ctx, scope)
	for i := range h {
		h[i].Document = nil
	}
	return h, err
}

func (s *bodyCountingStore) Revision(ctx context.Context, scope varplane.Scope, rev varplane.Revision) (*varplane.RevisionRecord, error) {
	n := s.reads.Add(1)
	if s.failAfter > 0 && n > s.failAfter {
		return nil, varplane.Unavailable(errors.New("store went away"))
	}
	if rev == s.reclaimed {
		return nil, varplane.ErrReclaimed
	}
	return s.Store.Revision(ctx, scope, rev)
}

// TestHistoryStreamsOneBodyAtATime: GET {base}/admin/history answers the
// bytes the whole-history encoding did (every kind of event, a reclaimed
// body left out, characters JSON escapes), reading each body once and
// never the whole history at once; an unknown scope is an empty list; a
// store error before the first event is an error answer, one after it
// cuts the answer short instead of leaving a hole.
func TestHistoryStreamsOneBodyAtATime(t *testing.T) {
	mem := memory.New()
	st := &bodyCountingStore{Store: mem}
	p := newPlaneOn(t, st, httpapi.Options{})
	const scope = "h.s"
	var revs []string
	for i, doc := range []string{`{"v":1}`, `{"v":"<&\u2028>"}`, `{"v":3}`} {
		rec := p.do("POST", "/vars/admin/publish", `{"scope":"`+scope+`","document":`+doc+`,"expectedGeneration":`+string(rune('0'+i))+`}`)
		if rec.Code != 200 {
			t.Fatalf("publish %d: %d %s", i, rec.Code, rec.Body)
		}
		var res struct{ Revision string }
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, res.Revision)
	}
	if rec := p.do("POST", "/vars/admin/deactivate", `{"scope":"`+scope+`","expectedGeneration":3}`); rec.Code != 200 {
		t.Fatalf("deactivate: %d %s", rec.Code, rec.Body)
	}
	st.reclaimed = varplane.Revision(revs[1])

	want, err := mem.History(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if want[i].Revision == st.reclaimed {
			want[i].Document = nil
		}
	}
	wantBody, err := jsontext.Marshal(httpapi.HistoryResponse{Scope: scope, Events: want})
	if err != nil {
		t.Fatal(err)
	}
	st.reads.Store(0)
	rec := p.do("GET", "/vars/admin/history?scope="+scope, "")
	if rec.Code != 200 || rec.Body.String() != string(wantBody)+"\n" {
		t.Fatalf("history = %d\n%s\nwant\n%s", rec.Code, rec.Body, wantBody)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if n := st.reads.Load(); n != 3 {
		t.Errorf("%d body reads for 3 revisions", n)
	}

	if rec := p.do("GET", "/vars/admin/history?scope=h.never", ""); rec.Code != 200 || rec.Body.String() != `{"scope":"h.never","events":[]}`+"\n" {
		t.Errorf("history of an unknown scope = %d %s", rec.Code, rec.Body)
	}

	st.reads.Store(0)
	st.failAfter = 1 // the second body read fails: after the first event was sent
	aborted := func() (v any) {
		defer func() { v = recover() }()
		rec = p.do("GET", "/vars/admin/history?scope="+scope, "")
		return nil
	}()
	if aborted != http.ErrAbortHandler {
		t.Errorf("a history cut by a store error was not aborted (%v): %d %s", aborted, rec.Code, rec.Body)
	}
	// Before the first event: an error answer with its code.
	st.reads.Store(1)
	rec = p.do("GET", "/vars/admin/history?scope="+scope, "")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"code":"store-unavailable"`) {
		t.Errorf("a store error before the first event = %d %s, want 503 store-unavailable", rec.Code, rec.Body)
	}
}
