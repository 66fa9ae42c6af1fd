package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/varplane/varplane"
)

// Status returns the HTTP status of an error code. It is the one table where
// codes become statuses; every server answers through it and every client
// reads statuses back through ParseError. Unknown codes (and internal) are
// 500.
//
// idempotency-key-reused is 422: the request is well formed but its key
// already names another request (the IETF Idempotency-Key draft's choice);
// 409 stays for generation conflicts, which a client resolves by re-reading.
//
// outcome-unknown is 504, not 503: a 503 promises that nothing changed, and
// a write whose answer the store lost may have committed. 504 is what a
// gateway answers when its upstream (here the store of record) did not
// answer in time, and gRPC's equivalent, DEADLINE_EXCEEDED, is the code
// that says a state change may have completed.
func Status(code varplane.Code) int {
	switch code {
	case varplane.CodeBadRequest, varplane.CodeStoreUnsupported, varplane.CodeLimitExceeded,
		varplane.CodeTargetingKeyMissing:
		return http.StatusBadRequest
	case varplane.CodeUnauthorized:
		return http.StatusUnauthorized
	case varplane.CodeForbidden, varplane.CodeScopeOwned, varplane.CodeChangeRequired:
		return http.StatusForbidden
	case varplane.CodeNoHead, varplane.CodeNotFound:
		return http.StatusNotFound
	case varplane.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case varplane.CodeRevisionConflict, varplane.CodeChangeState, varplane.CodeCanaryWindowOpen, varplane.CodeConfirmationRequired:
		return http.StatusConflict
	case varplane.CodeRevisionReclaimed:
		return http.StatusGone
	case varplane.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case varplane.CodeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case varplane.CodeRevisionInvalid, varplane.CodeIdempotencyReused,
		varplane.CodeUnknownComponent, varplane.CodeInvalidConfiguration:
		return http.StatusUnprocessableEntity
	case varplane.CodeStoreUnavailable, varplane.CodeTooManyRequests,
		varplane.CodeDocumentFailed, varplane.CodeDocumentStale, varplane.CodeNotReady,
		varplane.CodeCheckUnavailable:
		return http.StatusServiceUnavailable
	case varplane.CodeOutcomeUnknown:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

// codeOfStatus is the code a client assumes when an answer carries no error
// body of ours (a proxy's page, an empty 502): the most specific code whose
// status it is.
func codeOfStatus(status int) varplane.Code {
	switch status {
	case http.StatusBadRequest:
		return varplane.CodeBadRequest
	case http.StatusUnauthorized:
		return varplane.CodeUnauthorized
	case http.StatusForbidden:
		return varplane.CodeForbidden
	case http.StatusNotFound:
		return varplane.CodeNotFound
	case http.StatusMethodNotAllowed:
		return varplane.CodeMethodNotAllowed
	case http.StatusConflict:
		return varplane.CodeRevisionConflict
	case http.StatusGone:
		return varplane.CodeRevisionReclaimed
	case http.StatusRequestEntityTooLarge:
		return varplane.CodePayloadTooLarge
	case http.StatusUnsupportedMediaType:
		return varplane.CodeUnsupportedMediaType
	case http.StatusUnprocessableEntity:
		return varplane.CodeRevisionInvalid
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return varplane.CodeStoreUnavailable
	}
	return varplane.CodeInternal
}

// ErrorBody is the JSON shape of every error answer: the stable code, a
// sentence, and the details some codes carry. Field names are part of the
// API.
type ErrorBody struct {
	Code               varplane.Code        `json:"code"`
	Error              string               `json:"error"`
	Scope              varplane.Scope       `json:"scope,omitempty"`
	ExpectedGeneration *varplane.Generation `json:"expectedGeneration,omitempty"`
	CurrentGeneration  *varplane.Generation `json:"currentGeneration,omitempty"`
	Issues             []varplane.Issue     `json:"issues,omitempty"`
	Limit              string               `json:"limit,omitempty"`
	Hint               string               `json:"hint,omitempty"`
	Change             string               `json:"change,omitempty"`
}

// BodyOf builds the client-safe body of err. Anything that is not a
// *varplane.Error becomes internal with the fixed sentence "internal error":
// no cause, path or value of an internal failure reaches a client.
func BodyOf(err error) ErrorBody {
	code := varplane.ErrorCode(err)
	b := ErrorBody{Code: code, Error: varplane.ErrorMessage(err)}
	var e *varplane.Error
	if code == varplane.CodeInternal || !errors.As(err, &e) {
		return b
	}
	b.Hint, b.Limit, b.Scope, b.Change = e.Hint, e.Limit, e.Scope, e.Change
	switch code {
	case varplane.CodeRevisionConflict:
		b.ExpectedGeneration, b.CurrentGeneration = e.Expected, e.Current
	case varplane.CodeRevisionInvalid, varplane.CodeInvalidConfiguration:
		b.Issues = e.Issues
		if b.Issues == nil {
			b.Issues = []varplane.Issue{}
		}
	}
	return b
}

// Err turns a body read off the wire back into the error it came from, so
// that errors.Is(err, varplane.ErrConflict) and the details work across it.
func (b ErrorBody) Err() *varplane.Error {
	return &varplane.Error{
		Code: b.Code, Message: b.Error, Scope: b.Scope,
		Expected: b.ExpectedGeneration, Current: b.CurrentGeneration,
		Issues: b.Issues, Limit: b.Limit, Hint: b.Hint, Change: b.Change,
	}
}

// WriteError answers err with its status and body. Answers of 500 and above
// (but too-many-subscribers, which comes in floods and has its metric) are
// logged with their cause on log (when not nil); the client only ever sees
// the body. A 503 carries Retry-After.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	body, status := answerError(w, r, log, err)
	WriteJSON(w, status, body)
}

// answerError is what every error answer does before its body: the body and
// status of err, the log line of a 5xx, Retry-After on a 503.
func answerError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) (ErrorBody, int) {
	body := BodyOf(err)
	status := Status(body.Code)
	// A full push layer refuses in floods; its metric counts them.
	if status >= 500 && log != nil && body.Code != varplane.CodeTooManyRequests {
		log.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("code", string(body.Code)), slog.String("error", err.Error()))
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	return body, status
}

// MaxErrorBytes bounds how much of an error answer a client reads.
const MaxErrorBytes = 64 << 10

// ParseError turns an error answer (status and body) into a *varplane.Error.
// A body of ours gives its code and details back; anything else (a proxy's
// page, an empty body) gives the code of the status and a sentence naming
// it, never the body's text.
func ParseError(status int, body []byte) *varplane.Error {
	var b ErrorBody
	if err := json.Unmarshal(body, &b); err == nil && b.Code != "" {
		if b.Error == "" {
			b.Error = string(b.Code)
		}
		return b.Err()
	}
	return &varplane.Error{
		Code:    codeOfStatus(status),
		Message: fmt.Sprintf("the server answered %d %s", status, http.StatusText(status)),
	}
}

// ResponseError reads (at most MaxErrorBytes of) an error answer and returns
// it as ParseError does, except that a 504 without an error body of ours (a
// proxy's page) to a write is outcome-unknown: the proxy gave up waiting, and
// the server may have committed. It does not close the body.
func ResponseError(resp *http.Response) *varplane.Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBytes))
	e := ParseError(resp.StatusCode, body)
	if resp.StatusCode == http.StatusGatewayTimeout && e.Code == varplane.CodeStoreUnavailable && resp.Request != nil &&
		resp.Request.Method != http.MethodGet && resp.Request.Method != http.MethodHead {
		// A proxy's 504 to a write: it gave up waiting for the server,
		// which may have committed. Not "nothing changed".
		e.Code = varplane.CodeOutcomeUnknown
		e.Message = "a proxy gave up waiting for the server (" + e.Message + "), so the write may or may not have happened: re-read, or repeat it with the same idempotency key"
	}
	return e
}
