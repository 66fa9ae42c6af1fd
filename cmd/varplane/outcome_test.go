package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOutcomeUnknownExplained: a write the server answers outcome-unknown
// (504: the store went silent after the commit was sent) exits 1 with the
// code and a hint that says the write may have happened and how to find
// out, in text and in -o json.
func TestOutcomeUnknownExplained(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGatewayTimeout)
		_, _ = w.Write([]byte(`{"code":"outcome-unknown","error":"the store may or may not have committed the write: re-read, or repeat it with the same idempotency key"}`))
	}))
	t.Cleanup(srv.Close)
	env := []string{"VARPLANE_SERVER=" + srv.URL}
	r := runCLI(t, env, `{"x":1}`, "set", "a.b", "-f", "-", "--expected-generation", "0")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "outcome-unknown") || !strings.Contains(r.stderr, "may or may not have happened") ||
		!strings.Contains(r.stderr, "--idempotency-key") {
		t.Fatalf("set answered outcome-unknown: %+v", r)
	}
	r = runCLI(t, env, `{"x":1}`, "set", "a.b", "-f", "-", "--expected-generation", "0", "-o", "json")
	if r.code != ExitRefused || !strings.Contains(r.stderr, `"code":"outcome-unknown"`) || !strings.Contains(r.stderr, "idempotency-key") {
		t.Fatalf("set -o json answered outcome-unknown: %+v", r)
	}
}

// TestChangePublishOutcomeUnknownExplained: a change's publish that the
// server answers outcome-unknown (the store failed once the publish had
// started) tells to look at the change and to repeat its publish, which
// finishes it; it says nothing of idempotency keys, which it has none of.
func TestChangePublishOutcomeUnknownExplained(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGatewayTimeout)
		_, _ = w.Write([]byte(`{"code":"outcome-unknown","error":"the publish was started and the store then failed: the change is publishing and its document may be active; read the change, or repeat its publish to finish it"}`))
	}))
	t.Cleanup(srv.Close)
	r := runCLI(t, []string{"VARPLANE_SERVER=" + srv.URL}, "", "change", "publish", "ch-1")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "outcome-unknown") || !strings.Contains(r.stderr, "varplane change publish ch-1") ||
		!strings.Contains(r.stderr, "varplane change show ch-1") || strings.Contains(r.stderr, "idempotency-key") {
		t.Fatalf("change publish answered outcome-unknown: %+v", r)
	}
}

// TestTokenCreateOutcomeUnknownExplained: a token's creation answered
// outcome-unknown tells that the principal may exist with a token never
// shown, and how to find out and start again.
func TestTokenCreateOutcomeUnknownExplained(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGatewayTimeout)
		_, _ = w.Write([]byte(`{"code":"outcome-unknown","error":"the store may or may not have committed the write: re-read, or repeat it with the same idempotency key"}`))
	}))
	t.Cleanup(srv.Close)
	r := runCLI(t, []string{"VARPLANE_SERVER=" + srv.URL}, "", "token", "create", "--id", "ci")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "never shown") || !strings.Contains(r.stderr, "varplane token list") ||
		!strings.Contains(r.stderr, "varplane token revoke ci") || strings.Contains(r.stderr, "--idempotency-key") {
		t.Fatalf("token create answered outcome-unknown: %+v", r)
	}
}
