package wire

import (
	"bufio"
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
	writeJSONHeader(w, status)
	_, _ = w.Write(b)
}

// writeJSONHeader sets the headers of every JSON answer and writes status.
func writeJSONHeader(w http.ResponseWriter, status int) {
	hdr := w.Header()
	hdr["Content-Type"] = jsonType
	if hdr.Get("Cache-Control") == "" {
		hdr["Cache-Control"] = noStore
	}
	hdr["X-Content-Type-Options"] = noSniff
	w.WriteHeader(status)
}

// The values WriteRaw sets, shared by every answer instead of allocated
// per answer (Header.Set makes a slice each time). Their capacity is their
// length, so a later Header.Add copies instead of writing into them.
var (
	jsonType = []string{"application/json"}[:1:1]
	noStore  = []string{"no-store"}[:1:1]
	noSniff  = []string{"nosniff"}[:1:1]
)

// JSONStream writes a JSON answer whose array is encoded one element at a
// time, for answers too large to hold encoded at once (a scope's history
// with its documents). Its headers are WriteJSON's; its bytes are those
// WriteJSON would write for the same value, the elements encoded by the
// same encoder.
type JSONStream struct {
	bw   *bufio.Writer
	n    int
	werr error
}

// StartJSON answers status with WriteJSON's headers and writes open (the
// answer up to its array's opening bracket).
func StartJSON(w http.ResponseWriter, status int, open []byte) *JSONStream {
	writeJSONHeader(w, status)
	s := &JSONStream{bw: bufio.NewWriterSize(w, 32<<10)}
	_, s.werr = s.bw.Write(open)
	return s
}

// Element encodes v as the array's next element. It returns the write's
// error (the client left) or the encoder's.
func (s *JSONStream) Element(v any) error {
	if s.werr != nil {
		return s.werr
	}
	b, err := jsontext.Marshal(v)
	if err != nil {
		return err
	}
	if s.n > 0 {
		s.werr = s.bw.WriteByte(',')
	}
	s.n++
	if s.werr == nil {
		_, s.werr = s.bw.Write(b)
	}
	return s.werr
}

// Close writes end (what closes the array and the answer), the newline
// WriteJSON ends with, and flushes.
func (s *JSONStream) Close(end string) {
	if s.werr != nil {
		return
	}
	_, _ = s.bw.WriteString(end)
	_ = s.bw.WriteByte('\n')
	_ = s.bw.Flush()
}
