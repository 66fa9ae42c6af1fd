package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/varplane/varplane"
)

// TestErrorRoundTrip checks the error model both ways: what a server writes
// for an error, a client reads back as the same *varplane.Error, details
// included, so errors.Is works across the wire.
func TestErrorRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		is     error
	}{
		{"conflict", varplane.ConflictError("a.b", 3, 5), 409, varplane.ErrConflict},
		{"invalid", varplane.InvalidError([]varplane.Issue{{Code: "document.type", Path: "/x", Message: "must be a string"}}), 422, varplane.ErrInvalid},
		{"not found", varplane.Errorf(varplane.CodeNotFound, "no such revision"), 404, varplane.ErrNotFound},
		{"no head", varplane.Errorf(varplane.CodeNoHead, "scope has no head"), 404, varplane.ErrNoHead},
		{"bad request", BadRequest("scope is required"), 400, varplane.ErrBadRequest},
		{"limit", varplane.DefaultLimits().CheckJSON([]byte(strings.Repeat("[", 100)+strings.Repeat("]", 100)), 0), 400, &varplane.Error{Code: varplane.CodeLimitExceeded}},
		{"unavailable", varplane.Unavailable(errors.New("dial tcp: refused")), 503, varplane.ErrUnavailable},
		{"hinted", &varplane.Error{Code: varplane.CodeNotFound, Message: "no such route", Hint: "the var API is mounted under /vars"}, 404, varplane.ErrNotFound},
		{"owned", &varplane.Error{Code: varplane.CodeScopeOwned, Message: "owned"}, 403, &varplane.Error{Code: varplane.CodeScopeOwned}},
		{"idempotency", &varplane.Error{Code: varplane.CodeIdempotencyReused, Message: "reused"}, 422, varplane.ErrIdempotencyReuse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteError(rec, httptest.NewRequest("GET", "/", nil), nil, tt.err)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d", rec.Code, tt.status)
			}
			if got := rec.Header().Get("Content-Type"); got != "application/json" {
				t.Fatalf("Content-Type %q", got)
			}
			back := ParseError(rec.Code, rec.Body.Bytes())
			if !errors.Is(back, tt.is) {
				t.Fatalf("read back %v, not %v", back, tt.is)
			}
			var orig *varplane.Error
			errors.As(tt.err, &orig)
			want := *orig
			want.Err = nil
			if want.Code == varplane.CodeRevisionInvalid && want.Issues == nil {
				want.Issues = []varplane.Issue{}
			}
			if !reflect.DeepEqual(*back, want) {
				t.Fatalf("read back %#v\nwant      %#v", *back, want)
			}
		})
	}
}

func TestInternalErrorsSayNothing(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest("GET", "/", nil), nil, fmt.Errorf("open /secret/path: %w", errors.New("token=abc")))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") || strings.Contains(rec.Body.String(), "abc") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got := ParseError(rec.Code, rec.Body.Bytes()); got.Code != varplane.CodeInternal {
		t.Fatalf("code %s", got.Code)
	}
}

func TestParseErrorOfForeignAnswers(t *testing.T) {
	tests := []struct {
		status int
		body   string
		code   varplane.Code
	}{
		{502, "<html>bad gateway</html>", varplane.CodeStoreUnavailable},
		{404, "404 page not found\n", varplane.CodeNotFound},
		{401, "", varplane.CodeUnauthorized},
		{500, `{"unrelated":true}`, varplane.CodeInternal},
		{418, "", varplane.CodeInternal},
	}
	for _, tt := range tests {
		got := ParseError(tt.status, []byte(tt.body))
		if got.Code != tt.code || strings.Contains(got.Message, "html") || strings.Contains(got.Message, "page") {
			t.Errorf("ParseError(%d, %q) = %v, want code %s and no body text", tt.status, tt.body, got, tt.code)
		}
	}
}

// TestStatusTable pins every code's status; a new code must be placed here.
func TestStatusTable(t *testing.T) {
	want := map[varplane.Code]int{
		varplane.CodeBadRequest: 400, varplane.CodeStoreUnsupported: 400, varplane.CodeLimitExceeded: 400,
		varplane.CodeUnauthorized: 401, varplane.CodeForbidden: 403, varplane.CodeScopeOwned: 403,
		varplane.CodeNoHead: 404, varplane.CodeNotFound: 404, varplane.CodeMethodNotAllowed: 405,
		varplane.CodeRevisionConflict: 409, varplane.CodePayloadTooLarge: 413, varplane.CodeUnsupportedMediaType: 415,
		varplane.CodeRevisionInvalid: 422, varplane.CodeIdempotencyReused: 422, varplane.CodeUnknownComponent: 422,
		varplane.CodeInvalidConfiguration: 422, varplane.CodeStoreUnavailable: 503, varplane.CodeTooManyRequests: 503,
		varplane.CodeDocumentFailed: 503, varplane.CodeDocumentStale: 503, varplane.CodeNotReady: 503,
		varplane.CodeInternal: 500, "no-such-code": 500,
		varplane.CodeChangeRequired: 403, varplane.CodeChangeState: 409, varplane.CodeRevisionReclaimed: 410,
		varplane.CodeOutcomeUnknown: 504, varplane.CodeCanaryWindowOpen: 409, varplane.CodeTargetingKeyMissing: 400,
	}
	for code, status := range want {
		if got := Status(code); got != status {
			t.Errorf("Status(%s) = %d, want %d", code, got, status)
		}
	}
	for _, s := range []int{400, 401, 403, 404, 405, 409, 410, 413, 415, 503} {
		if got := Status(codeOfStatus(s)); got != s {
			t.Errorf("status %d reads back as %s, whose status is %d", s, codeOfStatus(s), got)
		}
	}
	if Status(codeOfStatus(http.StatusTeapot)) != 500 {
		t.Error("an unknown status must read back as internal")
	}
}

// A canary-window-open answer names the scope and the change that holds
// its slot, and both cross the wire back.
func TestCanaryWindowOpenRoundTrip(t *testing.T) {
	body := BodyOf(&varplane.Error{Code: varplane.CodeCanaryWindowOpen, Scope: "app.x", Change: "ch-0123456789abcdef", Message: "held"})
	b, _ := json.Marshal(body)
	if !bytes.Contains(b, []byte(`"change":"ch-0123456789abcdef"`)) || !bytes.Contains(b, []byte(`"scope":"app.x"`)) {
		t.Fatalf("body %s does not name the scope and the change", b)
	}
	err := ParseError(Status(body.Code), b)
	if err.Code != varplane.CodeCanaryWindowOpen || err.Change != "ch-0123456789abcdef" || err.Scope != "app.x" {
		t.Fatalf("read back as %+v", err)
	}
}

// An outcome-unknown answer crosses the wire as itself, never as a 503
// (which says that nothing changed), and its cause stays on the server.
func TestOutcomeUnknownRoundTrip(t *testing.T) {
	body := BodyOf(varplane.OutcomeUnknown(errors.New("i/o timeout after EVALSHA")))
	status := Status(body.Code)
	if status != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", status)
	}
	b, _ := json.Marshal(body)
	if bytes.Contains(b, []byte("EVALSHA")) {
		t.Errorf("the cause reached the body: %s", b)
	}
	if err := ParseError(status, b); !errors.Is(err, varplane.ErrOutcomeUnknown) || errors.Is(err, varplane.ErrUnavailable) {
		t.Errorf("read back as %v, want outcome-unknown", err)
	}
}

func TestBearer(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc": "abc", "bearer  abc ": "abc", "BEARER x": "x", "Basic abc": "", "Bearer": "", "Bearer ": "", "": "",
	} {
		if got := Bearer(in); got != want {
			t.Errorf("Bearer(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProxyTimeoutOfAWrite: a proxy's 504 page answered to a write is
// outcome-unknown (the server may have committed); to a read, and any
// answer with an error body of ours, it keeps its code.
func TestProxyTimeoutOfAWrite(t *testing.T) {
	for _, tc := range []struct {
		method, body string
		status       int
		want         varplane.Code
	}{
		{"POST", "<html>gateway timeout</html>", 504, varplane.CodeOutcomeUnknown},
		{"PUT", "", 504, varplane.CodeOutcomeUnknown},
		{"GET", "<html>gateway timeout</html>", 504, varplane.CodeStoreUnavailable},
		{"POST", "<html>bad gateway</html>", 502, varplane.CodeStoreUnavailable},
		{"POST", `{"code":"store-unavailable","error":"the store is unavailable"}`, 503, varplane.CodeStoreUnavailable},
		{"POST", `{"code":"revision-conflict","error":"x"}`, 409, varplane.CodeRevisionConflict},
	} {
		req := httptest.NewRequest(tc.method, "/vars/admin/publish", nil)
		resp := &http.Response{StatusCode: tc.status, Request: req, Body: io.NopCloser(strings.NewReader(tc.body))}
		if got := ResponseError(resp).Code; got != tc.want {
			t.Errorf("%s answered %d %q: code %s, want %s", tc.method, tc.status, tc.body, got, tc.want)
		}
	}
}
