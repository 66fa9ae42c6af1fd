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
