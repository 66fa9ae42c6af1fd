package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
)

// AppendEvent appends one Server-Sent Events frame: an optional event name
// and id, and data (which must not contain a newline: varplane's data is
// always one line of JSON), followed by the blank line that ends it.
func AppendEvent(b []byte, event, id string, data []byte) []byte {
	b = appendEventHead(b, event, id)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

// AppendEventWith is AppendEvent with the data appended by data(b) in
// place, for a server that builds large data (a document) and would
// otherwise build it once and copy it again. data must append one line (no
// newline) and return the extended slice.
func AppendEventWith(b []byte, event, id string, data func([]byte) []byte) []byte {
	b = data(appendEventHead(b, event, id))
	return append(b, '\n', '\n')
}

// appendEventHead appends the event and id lines and the "data: " prefix.
func appendEventHead(b []byte, event, id string) []byte {
	if event != "" {
		b = append(b, "event: "...)
		b = append(b, event...)
		b = append(b, '\n')
	}
	if id != "" {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	return append(b, "data: "...)
}

// AppendComment appends an SSE comment line (a heartbeat), ended by a blank
// line so that readers see it at once.
func AppendComment(b []byte, text string) []byte {
	b = append(b, ": "...)
	b = append(b, text...)
	return append(b, '\n', '\n')
}

// AppendRetry appends the retry field that tells EventSource how long to wait
// before it reconnects.
func AppendRetry(b []byte, millis int) []byte {
	b = append(b, "retry: "...)
	b = strconv.AppendInt(b, int64(millis), 10)
	return append(b, '\n', '\n')
}

// Event is one Server-Sent Event as a reader sees it. Comment is set (and
// the rest empty) for a comment frame, which tells a reader the stream is
// alive.
type Event struct {
	Name    string
	ID      string
	Data    string
	Retry   int
	Comment bool
}

// MaxEventBytes bounds one event a reader accepts (its lines together): a
// stream that sends a larger one is broken, not buffered without end.
const MaxEventBytes = 8 << 20

// ErrEventTooLarge is returned by SSEReader.Next for an event over its bound.
var ErrEventTooLarge = errors.New("wire: server-sent event larger than the reader's bound")

// SSEReader reads Server-Sent Events from a stream, per the HTML standard's
// parsing rules (field names, one optional space after the colon, data lines
// joined by newlines, LF and CRLF line ends; a lone CR, which no varplane
// server sends, is not a line end), within a bound per event.
type SSEReader struct {
	r   *bufio.Reader
	max int
}

// NewSSEReader reads events from r, at most max bytes each (MaxEventBytes
// when max <= 0).
func NewSSEReader(r io.Reader, max int) *SSEReader {
	if max <= 0 {
		max = MaxEventBytes
	}
	return &SSEReader{r: bufio.NewReaderSize(r, 32<<10), max: max}
}

// Next returns the next event, a comment frame, or the stream's error (io.EOF
// at its end; ErrEventTooLarge past the bound).
func (s *SSEReader) Next() (Event, error) {
	var ev Event
	var data strings.Builder
	hasData, hasAny, size := false, false, 0
	for {
		line, err := s.line(s.max - size)
		if err != nil {
			if errors.Is(err, io.EOF) && hasAny {
				return Event{}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		size += len(line) + 1
		if len(line) == 0 {
			if !hasAny {
				continue
			}
			if hasData {
				ev.Data = data.String()
			}
			return ev, nil
		}
		hasAny = true
		if line[0] == ':' {
			ev.Comment = true
			continue
		}
		name, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(name) {
		case "event":
			ev.Name = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID = string(value)
			}
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
				ev.Retry = n
			}
		}
	}
}

// line reads one line without its ending, refusing one longer than max.
func (s *SSEReader) line(max int) ([]byte, error) {
	var out []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		out = append(out, frag...)
		if len(out) > max+1 {
			return nil, ErrEventTooLarge
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(out) > 0 {
			break // a last line without its end
		}
		return nil, err
	}
	out = bytes.TrimSuffix(out, []byte{'\n'})
	out = bytes.TrimSuffix(out, []byte{'\r'})
	return out, nil
}
