package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// webhook is a check webhook a test steers: it declares the heads it was
// told it read and answers the issues, the status, or the stall it was told.
type webhook struct {
	mu     sync.Mutex
	reads  []map[string]any
	issues []map[string]any
	status int
	stall  bool
	calls  []map[string]any
	auth   []string
}

func (h *webhook) set(reads, issues []map[string]any, status int, stall bool) {
	h.mu.Lock()
	h.reads, h.issues, h.status, h.stall = reads, issues, status, stall
	h.mu.Unlock()
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	_ = json.Unmarshal(body, &req)
	h.mu.Lock()
	h.calls = append(h.calls, req)
	h.auth = append(h.auth, r.Header.Get("Authorization"))
	reads, issues, status, stall := h.reads, h.issues, h.status, h.stall
	h.mu.Unlock()
	if stall {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	}
	if status != 0 && status != 200 {
		w.WriteHeader(status)
		return
	}
	if reads == nil {
		reads = []map[string]any{}
	}
	if issues == nil {
		issues = []map[string]any{}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"reads": reads, "issues": issues})
}

// TestCheckWebhookDetection runs `serve --check` with a webhook: a
// proposal is posted to it (with the bearer token of
// VARPLANE_CHECK_TOKEN), its issues fail a change, and after every publish
// the heads it declared are compared again: heads-unchanged,
// review-needed with new-issues when they moved and the re-run finds more,
// heads-moved when it finds nothing new, check-failed when the re-run
// cannot answer, and detection-timed-out when the comparison outlasts
// --detect-timeout; the publish stands every time. A webhook that cannot
// answer a proposal fails it with 503 check-unavailable and nothing
// written.
func TestCheckWebhookDetection(t *testing.T) {
	wh := &webhook{}
	hs := httptest.NewServer(wh)
	defer hs.Close()
	t.Setenv("VARPLANE_CHECK_TOKEN", "hook-secret")
	s := startServer(t, "--store", "memory:", "--check", "caps="+hs.URL+"/check", "--check-timeout", "2s", "--detect-timeout", "300ms")
	b := s.Base

	// The head the webhook says it judged by.
	publish := func(scope string, doc any, expected int) (string, int) {
		t.Helper()
		m := expect(t, call(t, "POST", b+"/admin/publish", map[string]any{"scope": scope, "document": doc, "expectedGeneration": expected}), 200, "")
		return str(t, m, "revision"), num(t, m, "generation")
	}
	r1, g1 := publish("platform.caps", map[string]any{"max": 10}, 0)
	readOf := func(rev string, gen int) []map[string]any {
		return []map[string]any{{"scope": "platform.caps", "generation": gen, "revision": rev}}
	}
	propose := func(scope string, doc any) map[string]any {
		t.Helper()
		return expect(t, call(t, "POST", b+"/control/changes", map[string]any{"scope": scope, "base": 0, "document": doc}), 201, "")
	}
	publishChange := func(id string) map[string]any {
		t.Helper()
		ch := expect(t, call(t, "POST", b+"/control/changes/"+id+":publish", nil), 200, "")
		if ch["state"] != "published" {
			t.Fatalf("change %s: state %v", id, ch["state"])
		}
		return ch
	}
	after := func(ch map[string]any) (string, string, string) {
		t.Helper()
		a, _ := ch["afterPublish"].(map[string]any)
		if a == nil {
			t.Fatalf("change has no afterPublish: %v", ch)
		}
		outcome, _ := a["outcome"].(string)
		reason, _ := a["reason"].(string)
		moved, _ := json.Marshal(a["moved"])
		return outcome, reason, string(moved)
	}

	// A check that finds issues fails the change.
	wh.set(readOf(r1, g1), []map[string]any{{"code": "cap", "path": "/max", "message": "over the cap"}}, 0, false)
	if ch := propose("app.failed", map[string]any{"max": 50}); ch["state"] != "failed" {
		t.Fatalf("state = %v, want failed", ch["state"])
	}
	wh.mu.Lock()
	if len(wh.calls) != 1 || wh.calls[0]["scope"] != "app.failed" || wh.calls[0]["check"] != "caps" || wh.auth[0] != "Bearer hook-secret" {
		t.Fatalf("webhook calls = %v, auth %v", wh.calls, wh.auth)
	}
	wh.mu.Unlock()

	// Nothing moved.
	wh.set(readOf(r1, g1), nil, 0, false)
	c := propose("app.a", map[string]any{"max": 5})
	if o, _, _ := after(publishChange(str(t, c, "id"))); o != "heads-unchanged" {
		t.Fatalf("outcome = %s, want heads-unchanged", o)
	}

	// The cap moves between the check and the publish, and the re-run
	// finds more: review-needed, new-issues.
	c = propose("app.b", map[string]any{"max": 9})
	r2, g2 := publish("platform.caps", map[string]any{"max": 8}, g1)
	wh.set(readOf(r2, g2), []map[string]any{{"code": "cap", "path": "/max", "message": "over the cap"}}, 0, false)
	if o, r, m := after(publishChange(str(t, c, "id"))); o != "review-needed" || r != "new-issues" || m != `["platform.caps"]` {
		t.Fatalf("after publish = %s %s %s, want review-needed new-issues [platform.caps]", o, r, m)
	}

	// It moves, and the re-run finds nothing new: heads-moved.
	wh.set(readOf(r2, g2), nil, 0, false)
	c = propose("app.c", map[string]any{"max": 1})
	r3, g3 := publish("platform.caps", map[string]any{"max": 7}, g2)
	wh.set(readOf(r3, g3), nil, 0, false)
	if o, r, _ := after(publishChange(str(t, c, "id"))); o != "heads-moved" || r != "" {
		t.Fatalf("after publish = %s %s, want heads-moved", o, r)
	}

	// It moves and the re-run cannot answer: review-needed, check-failed.
	wh.set(readOf(r3, g3), nil, 0, false)
	c = propose("app.d", map[string]any{"max": 1})
	r4, g4 := publish("platform.caps", map[string]any{"max": 6}, g3)
	wh.set(nil, nil, 500, false)
	if o, r, _ := after(publishChange(str(t, c, "id"))); o != "review-needed" || r != "check-failed" {
		t.Fatalf("after publish = %s %s, want review-needed check-failed", o, r)
	}

	// It moves and the re-run outlasts --detect-timeout: review-needed,
	// detection-timed-out, and the publish stands.
	wh.set(readOf(r4, g4), nil, 0, false)
	c = propose("app.e", map[string]any{"max": 1})
	publish("platform.caps", map[string]any{"max": 5}, g4)
	wh.set(nil, nil, 0, true)
	if o, r, _ := after(publishChange(str(t, c, "id"))); o != "review-needed" || r != "detection-timed-out" {
		t.Fatalf("after publish = %s %s, want review-needed detection-timed-out", o, r)
	}
	if r := runCLI(t, []string{"VARPLANE_SERVER=" + s.URL}, "", "change", "show", str(t, c, "id")); r.code != 0 || !strings.Contains(r.stdout, "after publish: review-needed (detection-timed-out)") {
		t.Fatalf("change show = %+v", r)
	}
	if st, g, body := readGen(t, b, "app.e"); st != 200 || g != 1 {
		t.Fatalf("app.e = %d %s: the publish did not stand", st, body)
	}

	// A webhook that cannot answer fails the proposal: 503, nothing
	// written, and the webhook's address is not in the answer.
	wh.set(nil, nil, 502, false)
	a := call(t, "POST", b+"/control/changes", map[string]any{"scope": "app.f", "base": 0, "document": map[string]any{"max": 1}})
	expect(t, a, 503, "check-unavailable")
	if strings.Contains(string(a.body), hs.Listener.Addr().String()) {
		t.Fatalf("the answer names the webhook's address: %s", a.body)
	}
	expect(t, call(t, "GET", b+"/admin/history?scope="+q("app.f"), nil), 200, "")
	if h := expect(t, call(t, "GET", b+"/admin/history?scope="+q("app.f"), nil), 200, ""); len(historyEntries(t, h)) != 0 {
		t.Fatalf("a failed proposal wrote to app.f: %v", h)
	}
	if strings.Contains(s.logs(), "hook-secret") {
		t.Fatal("the server log holds the webhook's token")
	}
}

// TestCheckFlags: --check is NAME=URL, each name once, an http(s) URL.
func TestCheckFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--check", "caps"},
		{"--check", "caps=ftp://h/x"},
		{"--check", "caps=http://h/x", "--check", "caps=http://h/y"},
		{"--check", "schema=http://h/x"},
		{"--check", "caps=http://h/x", "--control=false"},
		{"--check-timeout", "0s"},
		{"--detect-timeout", "-1s"},
	} {
		code, _, stderr := runServe(t, nil, append([]string{"--store", "memory:"}, args...)...)
		if code != 2 {
			t.Errorf("serve %v: exit %d, want 2 (usage); stderr %s", args, code, stderr)
		}
	}
}
