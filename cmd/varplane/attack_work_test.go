package main

// The attack cases of issue 34 item 1 (work proportional to the answer),
// beside attack_test.go's: the paged history and the changes list of a
// scope of many large revisions, and the diff of large documents, each
// checked for its answer, for nothing stored changing, and for the
// server's peak resident memory.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane/store/redis/redistest"
)

// hit is one request of a storm and the answer it must get.
type hit struct {
	method, path string
	body         any
	status       int
	code         string // the error code, or a text the answer holds
}

// storm sends every hit n times at once (as token) and fails the test for
// each answer that is not the one expected. It may run off the test's
// goroutine's reach: errors are gathered, not fatal.
func storm(t *testing.T, base, token string, n int, hits []hit) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n*len(hits))
	for i := 0; i < n; i++ {
		for _, h := range hits {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, body, err := sendAs(h.method, base+h.path, h.body, token, 2*time.Minute)
				switch {
				case err != nil:
					errs <- fmt.Errorf("%s %s: %w", h.method, h.path, err)
				case status != h.status || !bytes.Contains(body, []byte(h.code)):
					errs <- fmt.Errorf("%s %s: %d %.300s; want %d with %q", h.method, h.path, status, body, h.status, h.code)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// sendAs sends one request as token and returns the status and the body.
func sendAs(method, target string, body any, token string, timeout time.Duration) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// mustSend is call as token that fails the test unless the status is
// want.
func mustSend(t *testing.T, method, target string, body any, token string, want int) []byte {
	t.Helper()
	var hdr []string
	if token != "" {
		hdr = []string{"Authorization", "Bearer " + token}
	}
	a := call(t, method, target, body, hdr...)
	if a.status != want {
		t.Fatalf("%s %s: %d %.300s; want %d", method, target, a.status, a.body, want)
	}
	return a.body
}

// publishDoc creates and activates doc on scope as token, at expected.
func publishDoc(t *testing.T, base, token, scope string, doc any, expected int) {
	t.Helper()
	var created struct {
		Revision string `json:"revision"`
	}
	b := mustSend(t, "POST", base+"/admin/revisions", map[string]any{"scope": scope, "document": doc}, token, http.StatusCreated)
	if err := json.Unmarshal(b, &created); err != nil {
		t.Fatal(err)
	}
	mustSend(t, "POST", base+"/admin/activate", map[string]any{"scope": scope, "revision": created.Revision, "expectedGeneration": expected}, token, http.StatusOK)
}

// TestAttackPagedHistoryOfLargeRevisions: on a shared store (Redis, where
// a body is a record the server reads over the network), a scope of 48
// revisions of 1 MiB, six at once asking for one revision each, the
// revision n, propagation and diff routes, a read-only token listing
// changes it is shown none of, and six whole histories of the var API at
// once: the answers are right, nothing stored
// changed, and the server's memory stays flat (each of these once read
// every body of the scope, and the changes list every candidate).
func TestAttackPagedHistoryOfLargeRevisions(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops-token id=ops\nreader-token id=reader kinds=read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--store", redistest.PrefixURL(t, "attack-history"), "--tokens", tokens)
	const scope, revisions = "big.doc", 48
	part := strings.Repeat("x", 255_000) // a string is 256 KiB at most
	blob := []string{part, part, part, part}
	for i := 0; i < revisions; i++ {
		publishDoc(t, s.Base, "ops-token", scope, map[string]any{"i": i, "blob": blob}, i)
	}
	for i := 0; i < 4; i++ {
		mustSend(t, "POST", s.Base+"/control/changes", map[string]any{"scope": scope, "base": revisions, "document": map[string]any{"change": i, "blob": blob}}, "ops-token", http.StatusCreated)
	}
	snapshot := func() []byte {
		return append(mustSend(t, "GET", s.Base+"/control/documents/"+scope+"/revisions?limit=200", nil, "ops-token", 200),
			mustSend(t, "GET", s.Base+"/control/changes?state=open", nil, "ops-token", 200)...)
	}
	before := snapshot()

	storm(t, s.Base+"/control", "ops-token", 6, []hit{
		{"GET", "/documents/" + scope + "/revisions?limit=1", nil, 200, fmt.Sprintf(`"generation":%d`, revisions)},
		{"GET", "/documents/" + scope + "/revisions/3", nil, 200, `"i":2`},
		{"GET", "/documents/" + scope + "/revisions/3/propagation", nil, 200, `"generation":3`},
		{"GET", "/documents/" + scope + "/diff?from=3&to=5", nil, 200, `"path":"/i","value":4`},
	})
	storm(t, s.Base+"/control", "reader-token", 4, []hit{
		{"GET", "/changes", nil, 200, `{"changes":[]}`},
	})
	// The var API's whole history, bodies included: 48 MiB each, streamed
	// one body at a time (it was read whole, then encoded whole).
	storm(t, s.Base, "ops-token", 6, []hit{
		{"GET", "/admin/history?scope=" + scope, nil, 200, `"i":47`},
	})

	if after := snapshot(); !bytes.Equal(after, before) {
		t.Fatalf("the history or the changes changed:\n%.300s\n%.300s", before, after)
	}
	s.checkRSS(t)
}

// allChangedDoc returns two documents of n settings, in groups of 1,000
// (the member limit is 10,000), whose every value differs.
func allChangedDoc(n int) (a, b map[string]any) {
	a, b = map[string]any{}, map[string]any{}
	for i := 0; i < n; i++ {
		g := fmt.Sprintf("group_%03d", i/1000)
		if a[g] == nil {
			a[g], b[g] = map[string]any{}, map[string]any{}
		}
		k := fmt.Sprintf("setting_%06d", i)
		a[g].(map[string]any)[k] = map[string]any{"value": i, "label": fmt.Sprintf("value number %d", i)}
		b[g].(map[string]any)[k] = map[string]any{"value": i + 1, "label": fmt.Sprintf("value number %d", i)}
	}
	return a, b
}

// TestAttackDiffOfLargeDocuments: the diff of two 1 MiB documents whose
// every value changed, six at once in both forms, clients that leave
// before the answer, and a document whose long, deep member names make
// its patch many times its size: the first are answered whole, the last
// is limit-exceeded, nothing stored changed, and the server's memory stays
// bounded (the diff once decoded the old document again for every value).
func TestAttackDiffOfLargeDocuments(t *testing.T) {
	log := filepath.Join(t.TempDir(), "var-log.jsonl")
	s := startServer(t, "--store", "file:"+log)
	const settings = 17_000
	a, b := allChangedDoc(settings)
	publishDoc(t, s.Base, "", "all.changed", a, 0)
	publishDoc(t, s.Base, "", "all.changed", b, 1)
	name := strings.Repeat("k", 14<<10)
	deep := func(v int) any {
		var d any = 0
		for i := 59; i >= 0; i-- {
			d = map[string]any{"v": v, fmt.Sprintf("%s%02d", name, i): d}
		}
		return d
	}
	publishDoc(t, s.Base, "", "long.paths", deep(1), 0)
	publishDoc(t, s.Base, "", "long.paths", deep(2), 1)
	before, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}

	storm(t, s.Base+"/control/documents", "", 3, []hit{
		{"GET", "/all.changed/diff?from=1&to=2", nil, 200, `{"op":"replace","path":"/group_016/setting_016999/value","value":17000}`},
		{"GET", "/all.changed/diff?from=1&to=2&format=text", nil, 200, "~ /group_016/setting_016999/value: 16999 -> 17000\n"},
		{"GET", "/long.paths/diff?from=1&to=2", nil, 400, `"limit":"diff-bytes"`},
	})
	// Clients that leave at once: the server stops their diffs.
	for i := 0; i < 6; i++ {
		_, _, _ = sendAs("GET", s.Base+"/control/documents/all.changed/diff?from=1&to=2", nil, "", time.Millisecond)
	}
	if _, body, err := sendAs("GET", s.Base+"/control/documents/all.changed/diff?from=1&to=2", nil, "", time.Minute); err != nil || strings.Count(string(body), `"op":"replace"`) != settings {
		t.Fatalf("after the clients left, the diff has %d replaces (%v), want %d", strings.Count(string(body), `"op":"replace"`), err, settings)
	}

	after, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Fatalf("the diffs wrote to the log:\n%.300s", after[len(before):])
	}
	s.checkRSS(t)
}

// TestAttackBatchOfLargeDocuments: six batch reads at once, each of 48
// scopes of 1 MiB, answer every document whole and the server's memory
// stays bounded (each answer was once built in one buffer: 48 MiB a
// request).
func TestAttackBatchOfLargeDocuments(t *testing.T) {
	log := filepath.Join(t.TempDir(), "var-log.jsonl")
	s := startServer(t, "--store", "file:"+log)
	const scopes = 48
	part := strings.Repeat("y", 255_000)
	var q strings.Builder
	for i := 0; i < scopes; i++ {
		sc := fmt.Sprintf("batch.s%02d", i)
		publishDoc(t, s.Base, "", sc, map[string]any{"i": i, "blob": []string{part, part, part, part}}, 0)
		fmt.Fprintf(&q, "key=%s&", sc)
	}
	q.WriteString("key=batch.none")
	target := s.Base + "/batch?" + q.String()
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			status, body, err := sendAs("GET", target, nil, "", time.Minute)
			if err != nil || status != 200 {
				t.Errorf("batch: %d %v", status, err)
				return
			}
			var got struct {
				Items []struct {
					Scope, Status string
					Values        map[string]struct {
						I    int
						Blob []string
					}
				}
			}
			if err := json.Unmarshal(body, &got); err != nil || len(got.Items) != scopes+1 {
				t.Errorf("batch answer: %d items, %v", len(got.Items), err)
				return
			}
			for i, it := range got.Items[:scopes] {
				v := it.Values[it.Scope]
				if it.Status != "ok" || v.I != i || len(v.Blob) != 4 || v.Blob[3] != part {
					t.Errorf("item %d: %s %s i=%d", i, it.Scope, it.Status, v.I)
				}
			}
			if it := got.Items[scopes]; it.Status != "no-head" {
				t.Errorf("the last item: %+v", it)
			}
		})
	}
	wg.Wait()
	s.checkRSS(t)
}
