package wire

import (
	"net/http"

	"github.com/varplane/varplane/internal/wire/jsontext"
)

// WriteJSON answers v as JSON with status: compact, not HTML-escaped, one
// trailing newline, never cached and never sniffed. An encoding failure
// (impossible for the project's own types) is a bare 500.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := jsontext.Marshal(v)
	if err != nil {
		http.Error(w, `{"code":"internal","error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	WriteRaw(w, status, append(b, '\n'))
}

// WriteRaw answers b, a JSON body already encoded (with its newline), with
// the headers of WriteJSON.
func WriteRaw(w http.ResponseWriter, status int, b []byte) {
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	if hdr.Get("Cache-Control") == "" {
		hdr.Set("Cache-Control", "no-store")
	}
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
