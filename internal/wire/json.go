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

// StreamJSON answers 200 with a JSON value holding one array written an
// element at a time, for answers too large to hold encoded at once (a
// scope's history with its documents): open is the answer up to the
// array's opening bracket, end what follows its closing one. each calls
// emit for every element in order; emit encodes it as WriteJSON would and
// returns the write's error (the client left). The headers and bytes are
// those of WriteJSON for the same value. An error of each before the first
// element is returned with nothing written, for the caller to answer; one
// after it aborts the answer (http.ErrAbortHandler), so that the client
// sees a truncated body rather than a list with a hole.
func StreamJSON(w http.ResponseWriter, open []byte, end string, each func(emit func(v any) error) error) error {
	var (
		bw   *bufio.Writer
		n    int
		werr error
	)
	start := func() {
		writeJSONHeader(w, http.StatusOK)
		bw = bufio.NewWriterSize(w, 32<<10)
		_, werr = bw.Write(open)
	}
	err := each(func(v any) error {
		if bw == nil {
			start()
		}
		if werr != nil {
			return werr
		}
		b, err := jsontext.Marshal(v)
		if err != nil {
			return err
		}
		if n > 0 {
			werr = bw.WriteByte(',')
		}
		n++
		if werr == nil {
			_, werr = bw.Write(b)
		}
		return werr
	})
	switch {
	case err != nil && bw == nil:
		return err
	case err != nil:
		panic(http.ErrAbortHandler)
	case bw == nil:
		start()
	}
	if werr == nil {
		_, _ = bw.WriteString(end)
		_ = bw.WriteByte('\n')
		_ = bw.Flush()
	}
	return nil
}
