package main

import (
	"bytes"
	"context"
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

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/redis/redistest"
)

// The trust cases of the attack suite (issue 34 item 3): statuses and
// reports are filed by instance identities only, each under a bounded
// number of names, with bounded bodies. Each case runs through the real
// server on the file store and on Redis, and checks the answer (status and
// stable code), that nothing stored changed (the instances the control
// plane counts as live, the log, the live scope's history) and the
// server's peak RSS.

// trustTokens: an administrator, a read-only token (the attacker),
// and an instance identity.
const trustTokens = `admin-token id=ops
reader-token id=reader kinds=read
pod-token id=pod-a kinds=read roles=` + varplane.InstanceRole + "\n"

func trustServer(t *testing.T, store string) *server {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(trustTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--store", store, "--tokens", tokens)
	auth := []string{"Authorization", "Bearer admin-token"}
	a := expect(t, call(t, "POST", s.Base+"/admin/revisions", map[string]any{"scope": "safe.scope", "document": map[string]any{"v": 1}}, auth...), 201, "")
	expect(t, call(t, "POST", s.Base+"/admin/activate", map[string]any{"scope": "safe.scope", "revision": str(t, a, "revision"), "expectedGeneration": 0}, auth...), 200, "")
	return s
}

// live is how many instances the control plane counts as live.
func live(t *testing.T, s *server) float64 {
	t.Helper()
	m := expect(t, call(t, "GET", s.Base+"/control/documents/safe.scope/revisions/1/propagation", nil, "Authorization", "Bearer admin-token"), 200, "")
	n, _ := m["live"].(float64)
	return n
}

// flood PUTs body to path(i) for i in [0, n) as token, eight at a time,
// and returns how many answers had each status and code. The requests are
// queued at once: a worker that a failed call ends (t.Fatal) cannot leave
// the test blocked on the queue until its timeout.
func flood(t *testing.T, s *server, token string, n int, path func(i int) string, body []byte) map[string]int {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				// Not call: a worker that failed the test would leave the
				// loop below waiting for it forever. A refusal sent before
				// a large body is read can reach the client as a reset
				// instead (the server closes the connection rather than
				// read the rest); the request is sent again, as a client
				// would, after a pause: each such connection stays open on
				// the server for half a second after the answer (net/http
				// waits before closing a connection whose body it did not
				// read), and a flood of them meets the per-address cap
				// (--max-connections-per-addr, 1,000), where new
				// connections are closed at once. A transport error that
				// stays is counted.
				key := ""
				for attempt := 0; attempt < 8 && !strings.HasPrefix(key, "2") && !strings.HasPrefix(key, "4") && !strings.HasPrefix(key, "5"); attempt++ {
					if attempt > 0 {
						time.Sleep(time.Duration(attempt) * 250 * time.Millisecond)
					}
					status, b, err := sendRaw("PUT", s.Base+path(i), body, token)
					if err != nil {
						key = "transport error: " + err.Error()
						continue
					}
					var e struct{ Code string }
					_ = json.Unmarshal(b, &e)
					key = fmt.Sprintf("%d %s", status, e.Code)
				}
				mu.Lock()
				got[key]++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return got
}

func TestAttackTrust(t *testing.T) {
	stores := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return "file:" + filepath.Join(t.TempDir(), "log.jsonl") }},
		{"redis", func(t *testing.T) string { return redistest.PrefixURL(t, "attack-trust") }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := trustServer(t, st.url(t))
			history := call(t, "GET", s.Base+"/admin/history?scope=safe.scope", nil, "Authorization", "Bearer admin-token").body
			unchanged := func(t *testing.T, wantLive float64) {
				t.Helper()
				if n := live(t, s); n != wantLive {
					t.Fatalf("the control plane counts %v live instances, want %v", n, wantLive)
				}
				if h := call(t, "GET", s.Base+"/admin/history?scope=safe.scope", nil, "Authorization", "Bearer admin-token").body; !bytes.Equal(h, history) {
					t.Fatalf("history changed:\n%s", h)
				}
			}

			// The attack: a read-only token files 1 MiB statuses
			// under 1,200 names. Every one is 403 forbidden, nothing is
			// stored.
			big := []byte(`{"instance":"` + strings.Repeat("x", 1<<20-64) + `"}`)
			got := flood(t, s, "reader-token", 1200, func(i int) string { return fmt.Sprintf("/control/instances/reader:%d/status", i) }, big)
			if got["403 forbidden"] != 1200 {
				t.Fatalf("a read-only token flooding statuses: answers %v, want 1200 × 403 forbidden", got)
			}
			unchanged(t, 0)
			s.checkRSS(t)

			// An instance identity's body past the bound is 413.
			got = flood(t, s, "pod-token", 50, func(int) string { return "/control/instances/pod-a/status" }, big)
			if got["413 payload-too-large"] != 50 {
				t.Fatalf("an instance filing 1 MiB statuses: answers %v, want 50 × 413 payload-too-large", got)
			}
			unchanged(t, 0)

			// It files under its bounded names with bodies at the bound,
			// then under more: varplane.MaxInstanceNames are stored, every
			// other is 400 limit-exceeded.
			doc := make([]map[string]any, 0, varplane.MaxStatusDocuments)
			for len(doc) < varplane.MaxStatusDocuments {
				doc = append(doc, map[string]any{"scope": "safe.scope", "generation": 1, "revision": "sha256:" + strings.Repeat("a", 64), "lagSeconds": 0})
			}
			okBody, _ := json.Marshal(map[string]any{"instance": "pod-a", "documents": doc})
			got = flood(t, s, "pod-token", 300, func(i int) string { return fmt.Sprintf("/control/instances/pod-a:%d/status", i) }, okBody)
			if got["204 "] != varplane.MaxInstanceNames || got["400 limit-exceeded"] != 300-varplane.MaxInstanceNames {
				t.Fatalf("an instance flooding names: answers %v, want %d × 204 and the rest 400 limit-exceeded", got, varplane.MaxInstanceNames)
			}
			unchanged(t, varplane.MaxInstanceNames)
			s.checkRSS(t)
		})
	}
}

// sendRaw sends body as it is (sendAs encodes its body as JSON) as token,
// with a timeout, and returns the status and the answer.
func sendRaw(method, target string, body []byte, token string) (int, []byte, error) {
	req, err := http.NewRequest(method, target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := httpClient.Do(req.WithContext(ctx))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
