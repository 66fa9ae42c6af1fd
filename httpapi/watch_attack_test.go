package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/push"
	"github.com/varplane/varplane/push/pushtest"
	"github.com/varplane/varplane/store/memory"
)

// storeDigest renders everything the store holds that a request could
// change: each scope's generation and head revision.
func storeDigest(t testing.TB, e *varplane.Engine) string {
	t.Helper()
	return pushtest.StoreDigest(t, e)
}

// badWatchQueries are raw query strings every watch entrance must refuse
// with 400 bad-request.
var badWatchQueries = []string{
	"",
	"since=a.x@1",
	"key=a..b",
	"key=a",     // a group named as a key
	"group=a.x", // a key named as a group
	"prefix=.a", // not a scope
	"key=%zz",   // malformed escape
	"key=a.x&since=a.x",
	"key=a.x&since=a.x@-1",
	"key=a.x&since=a.x@01",
	"key=a.x&since=@1",
	"key=a.x&since=a.x@18446744073709551616",
	strings.Repeat("key=a.x&", wire.MaxBatchScopes+1),
	strings.Repeat("prefix=a&", wire.MaxBatchScopes) + "key=a.b",
}

// The watch query has one set of rules, wire.Targets' and the resume
// positions': every bad query is 400 bad-request with a message, and none
// subscribes.
func TestSSEBadQueries(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, e, h, sseOptions{Logger: quiet})
	for _, q := range badWatchQueries {
		name := q
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		t.Run(name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/watch?" + q)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if e := wire.ResponseError(resp); resp.StatusCode != http.StatusBadRequest || e.Code != varplane.CodeBadRequest || e.Message == "" {
				t.Errorf("%d %v, want 400 bad-request", resp.StatusCode, e)
			}
		})
	}
	if n := h.Stats().Subscribers; n != 0 {
		t.Errorf("%d subscribers after refused requests", n)
	}
}

// A watch is parsed and authorized once: the authorizer is asked once per
// target, and the stream carries exactly those targets.
func TestSSEAuthorizesOncePerTarget(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "a.x", `1`)
	activate(t, e, "b.y", `2`)
	var calls atomic.Int64
	count := varplane.AuthorizerFunc(func(context.Context, varplane.Access) (varplane.Identity, error) {
		calls.Add(1)
		return varplane.Anonymous, nil
	})
	srv := newSSEServer(t, e, h, sseOptions{Authorizer: count})
	s := openSSE(t, srv, url.Values{"key": {"b.y"}, "prefix": {"a"}}, nil)
	got := []string{s.next().ID, s.next().ID}
	slices.Sort(got)
	if want := []string{"a.x@1", "b.y@1"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the authorizer was asked %d times for 2 targets, want 2", n)
	}
}

// A flood of watch requests with huge query strings: each is refused (400
// under the header limit, 431 past it), none subscribes, nothing stored
// changes, and the server keeps serving.
func TestSSEHugeQueryFlood(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "a.x", `{"v":1}`)
	before := storeDigest(t, e)
	srv := httptest.NewUnstartedServer(sseHandler(t, e, h, sseOptions{Logger: quiet}))
	srv.Config.MaxHeaderBytes = wire.ServerMaxHeaderBytes
	srv.Config.ReadHeaderTimeout = wire.ServerReadHeaderTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	queries := []string{
		strings.Repeat("key=a.x&", 4000),                  // 32 KB, past the scope bound
		"key=" + strings.Repeat("a", 60<<10),              // one huge scope
		strings.Repeat("since=a.x@1&", 5000) + "key=a..b", // 60 KB of resume state, then a bad scope
		strings.Repeat("x=", 40<<10) + "&key=",            // unrelated parameters, then an empty key
		"key=" + strings.Repeat("a.", 40<<10),             // past MaxHeaderBytes: 431
	}
	hc := srv.Client()
	for round := range 20 {
		for i, q := range queries {
			resp, err := hc.Get(srv.URL + "/watch?" + q)
			if err != nil {
				t.Fatalf("round %d query %d: %v", round, i, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("round %d query %d: status %d, want 400 or 431", round, i, resp.StatusCode)
			}
		}
	}
	if n := h.Stats().Subscribers; n != 0 {
		t.Errorf("%d subscribers after the flood", n)
	}
	if after := storeDigest(t, e); after != before {
		t.Errorf("the store changed:\n%s\nwant\n%s", after, before)
	}
	s := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil)
	if ev := s.next(); ev.ID != "a.x@1" {
		t.Errorf("after the flood: %v", ev)
	}
}

// A client that subscribes and never reads: commits go on at full pace
// (none waits for it), another subscriber receives every one, and the stuck
// one is dropped by its write timeout.
func TestSSEStuckClientDoesNotBlockCommits(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, e, h, sseOptions{WriteTimeout: 200 * time.Millisecond, Logger: quiet})
	stuck := dialRawSSE(t, srv, url.Values{"key": {"big.x"}}) // never read again
	live := openSSE(t, srv, url.Values{"key": {"big.x"}}, nil)
	waitSubscribers(t, h, 2)
	before := h.Stats().Subscribers
	done := make(chan error, 1)
	const commits = 60 // 15 MiB: far more than the stuck socket buffers
	go func() {
		for i := range commits {
			if _, err := tryActivate(e, "big.x", bigDoc(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// Every commit completes while the stuck client holds its stream: a
	// hang here (not a slow run) is the failure.
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("commits are blocked behind a client that does not read")
	}
	for ev := live.next(); ev.ID != fmt.Sprintf("big.x@%d", commits); ev = live.next() {
	}
	waitFor(t, "the stuck client to be dropped", func() bool { return h.Stats().Subscribers == before-1 })
	_ = stuck.conn.Close()
}

// FuzzSSEQuery drives the real handler with any query string and
// Last-Event-ID: it answers 200 (a stream) or 400 with a bad-request body,
// never anything else, leaves no subscription behind and changes nothing
// stored.
func FuzzSSEQuery(f *testing.F) {
	for _, q := range badWatchQueries {
		f.Add(q, "")
	}
	for _, seed := range [][2]string{
		{"key=a.x", ""},
		{"key=a.x&group=a&prefix=a", "a.x@1"},
		{"prefix=a&since=a.x%401", ""},
		{"key=a.x&since=a.x@0&since=a.x@7", "a.x@3"},
		{"key=a.%E2%82%AC", "a.x@x"},
		{"key=a.x&key=a.x&key=a.x", "@@@"},
		{"group=a&since=a@18446744073709551615", ""},
		{"key=a.x;b.y", ""},
		{"&&=&key=&=a", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	st := newEngine(f)
	for sc, doc := range map[varplane.Scope]string{"a.x": `{"v":1}`, "a": `{"a.y":1}`} {
		if _, err := tryActivate(st, sc, doc); err != nil {
			f.Fatal(err)
		}
	}
	h := push.New(st, push.Options{})
	f.Cleanup(h.Close)
	handler := httpapi.NewHandler(st, httpapi.Options{Base: "/", Hub: h, Authorizer: varplane.AllowAll, Logger: quiet, Stream: httpapi.StreamOptions{Heartbeat: time.Hour}})
	f.Cleanup(handler.Close)
	before := storeDigest(f, st)
	f.Fuzz(func(t *testing.T, rawQuery, lastEventID string) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a valid request streams until its context ends: end it at once
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/watch", nil)
		r.URL.RawQuery = rawQuery
		if lastEventID != "" && !strings.ContainsAny(lastEventID, "\r\n\x00") {
			r.Header.Set("Last-Event-ID", lastEventID)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			if ct := w.Header().Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("200 with Content-Type %q", ct)
			}
		case http.StatusBadRequest:
			e := wire.ParseError(w.Code, w.Body.Bytes())
			if e.Code != varplane.CodeBadRequest || e.Message == "" || strings.Contains(e.Message, "internal") {
				t.Fatalf("400 body %q", w.Body.String())
			}
		default:
			t.Fatalf("query %q: status %d %s", rawQuery, w.Code, w.Body.String())
		}
		if n := h.Stats().Subscribers; n != 0 {
			t.Fatalf("%d subscribers left after the request", n)
		}
		if after := storeDigest(t, st); after != before {
			t.Fatalf("the store changed")
		}
	})
}

// A revoked token's open watch stream ends with a close event whose
// reason is "revoked" at the hub's next recheck; another token's stream
// goes on receiving commits.
func TestSSERevokedTokenStreamEnds(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{RecheckInterval: 50 * time.Millisecond})
	activate(t, e, "a.x", `{"v":1}`)
	auth := pushtest.NewTokens("alice", "bob")
	srv := newSSEServer(t, e, h, sseOptions{Authorizer: auth, Logger: quiet})
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	alice := openSSE(t, srv, url.Values{"key": {"a.x"}}, bearer("alice"))
	bob := openSSE(t, srv, url.Values{"key": {"a.x"}}, bearer("bob"))
	alice.next()
	bob.next()
	auth.Revoke("alice")
	rest := alice.ended()
	if len(rest) == 0 || rest[len(rest)-1].Event != "close" || !strings.Contains(rest[len(rest)-1].Data, `"revoked"`) {
		t.Fatalf("the revoked stream ended with %v, want a close event, reason revoked", rest)
	}
	activate(t, e, "a.x", `{"v":2}`)
	if ev := bob.next(); ev.ID != "a.x@2" {
		t.Errorf("the other stream: %v", ev)
	}
	waitSubscribers(t, h, 1) // the hub removes the ended one just after ending it
	if st := h.Stats(); st.Revoked != 1 {
		t.Errorf("Revoked %d, want 1", st.Revoked)
	}
}

// Watch streams past the per-address cap are answered 503
// too-many-subscribers with the cap's name, and nothing stored changes.
func TestSSEPerAddrCap(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribersPerAddr: 2})
	activate(t, e, "a.x", `{"v":1}`)
	before := storeDigest(t, e)
	srv := newSSEServer(t, e, h, sseOptions{Logger: quiet})
	for range 2 {
		openSSE(t, srv, url.Values{"key": {"a.x"}}, nil).next()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/watch?key=a.x", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatal("a third stream of one address was served")
	}
	if e := wire.ResponseError(resp); resp.StatusCode != http.StatusServiceUnavailable || e.Code != varplane.CodeTooManyRequests || e.Limit != push.LimitSubscribersPerAddr {
		t.Fatalf("third stream of one address: %d %+v, want 503 too-many-subscribers %s", resp.StatusCode, e, push.LimitSubscribersPerAddr)
	}
	if after := storeDigest(t, e); after != before {
		t.Errorf("the store changed")
	}
}

// The values service's stream of created events is a stream like the
// others: counted by the hub's caps (503 too-many-subscribers past one),
// and ended with a close event (revoked) once its token is refused.
func TestValuesWatchCountedAndRevoked(t *testing.T) {
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(func() { e.Close(); _ = st.Close() })
	svc, err := config.NewService(e, valuesDeployment(t))
	if err != nil {
		t.Fatal(err)
	}
	hub := newHub(t, e, push.Options{MaxSubscribersPerToken: 1, RecheckInterval: 50 * time.Millisecond})
	auth := pushtest.NewTokens("alice", "bob")
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: auth, Logger: quiet, Values: svc, Hub: hub, DisableOps: true})
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	open := func(token string) *http.Response {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/configuration/values:watch", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	alice := open("alice")
	if alice.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", alice.StatusCode)
	}
	second := open("alice")
	if second.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second stream of one token: %d, want 503", second.StatusCode)
	}
	if e := wire.ResponseError(second); e.Limit != push.LimitSubscribersPerToken {
		t.Fatalf("second stream of one token: %d, want 503 %s", second.StatusCode, push.LimitSubscribersPerToken)
	}
	if bob := open("bob"); bob.StatusCode != http.StatusOK {
		t.Fatalf("another token: %d", bob.StatusCode)
	}
	auth.Revoke("alice")
	body, _ := io.ReadAll(alice.Body)
	if !strings.Contains(string(body), "event: close") || !strings.Contains(string(body), `"reason":"revoked"`) {
		t.Fatalf("the revoked stream ended with:\n%s", body)
	}
}
