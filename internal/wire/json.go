package wire

import (
	"net/http"

	"github.com/varplane/varplane/internal/jsontext"
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
	hdr["Content-Type"] = jsonType
	if hdr.Get("Cache-Control") == "" {
		hdr["Cache-Control"] = noStore
	}
	hdr["X-Content-Type-Options"] = noSniff
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// The values WriteRaw sets, shared by every answer instead of allocated
// per answer (Header.Set makes a slice each time). Their capacity is their
// length, so a later Header.Add copies instead of writing into them.
var (
	jsonType = []string{"application/json"}[:1:1]
	noStore  = []string{"no-store"}[:1:1]
	noSniff  = []string{"nosniff"}[:1:1]
)
