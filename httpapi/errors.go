package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/varplane/varplane"
)

// StatusCode returns the HTTP status of an error code. It is the one place
// where codes become statuses; every error response of the package goes
// through it. Unknown codes (and internal) are 500.
//
// idempotency-key-reused is 422 Unprocessable Content: the request is well
// formed but cannot be processed because its key already names a different
// request (the choice of the IETF Idempotency-Key draft); 409 stays reserved
// for generation conflicts, which a client resolves by re-reading.
func StatusCode(code varplane.Code) int {
	switch code {
	case varplane.CodeBadRequest, varplane.CodeStoreUnsupported:
		return http.StatusBadRequest
	case varplane.CodeUnauthorized:
		return http.StatusUnauthorized
	case varplane.CodeForbidden:
		return http.StatusForbidden
	case varplane.CodeNoHead, varplane.CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case varplane.CodeRevisionConflict:
		return http.StatusConflict
	case varplane.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case varplane.CodeRevisionInvalid, varplane.CodeIdempotencyReused:
		return http.StatusUnprocessableEntity
	case varplane.CodeStoreUnavailable, varplane.CodeTooManyRequests:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the JSON shape of every error response: the stable code, a
// human message, and the details of conflicts and invalid documents.
type ErrorBody struct {
	Code               varplane.Code        `json:"code"`
	Error              string               `json:"error"`
	ExpectedGeneration *varplane.Generation `json:"expectedGeneration,omitempty"`
	CurrentGeneration  *varplane.Generation `json:"currentGeneration,omitempty"`
	Issues             []varplane.Issue     `json:"issues,omitempty"`
}

// errorBody builds the client-safe body of err. Anything that is not a
// *varplane.Error becomes internal with the fixed message "internal error".
func errorBody(err error) ErrorBody {
	code := varplane.ErrorCode(err)
	b := ErrorBody{Code: code, Error: varplane.ErrorMessage(err)}
	var e *varplane.Error
	if code != varplane.CodeInternal && errors.As(err, &e) {
		if code == varplane.CodeRevisionConflict {
			b.ExpectedGeneration, b.CurrentGeneration = e.Expected, e.Current
		}
		if code == varplane.CodeRevisionInvalid {
			b.Issues = e.Issues
			if b.Issues == nil {
				b.Issues = []varplane.Issue{}
			}
		}
	}
	return b
}

// writeError answers err. Internal errors are logged with their cause; the
// client only ever sees "internal error".
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	body := errorBody(err)
	status := StatusCode(body.Code)
	if status >= 500 {
		h.log.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("code", string(body.Code)), slog.String("error", err.Error()))
	}
	writeJSON(w, status, body)
}

// writeJSON answers v with status. Encoding failures cannot happen for the
// package's own types; should one occur the client gets a bare 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"code":"internal","error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
