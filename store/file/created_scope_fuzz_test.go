package file

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/eventjson"
)

// FuzzCreatedLineScope holds the checkpointer's shortcut to the decoder:
// whenever createdLineScope reads a scope off a line that decodes as an
// event, the decoder reads the same scope.
func FuzzCreatedLineScope(f *testing.F) {
	f.Add([]byte(`{"kind":"revision-created","scope":"a.b","revision":"sha256:00","document":{"x":"}"}}` + "\n"))
	f.Add([]byte(`{"kind":"revision-created","scope":"a\"b","revision":"r"}` + "\n"))
	f.Add([]byte(`{"kind":"revision-created","scope":"a\\u0062","revision":"r"}` + "\n"))
	f.Add([]byte(`{"kind":"revision-created","scope":"","revision":"r"}` + "\n"))
	f.Add([]byte(`{"kind":"revision-created","scope":"a","scope":"b","revision":"r"}` + "\n"))
	f.Add([]byte(`{"kind":"activated","scope":"a","generation":1}` + "\n"))
	f.Fuzz(func(t *testing.T, line []byte) {
		sc, ok := createdLineScope(line)
		if !ok {
			return
		}
		if sc == "" {
			t.Fatalf("empty scope taken from %q", line)
		}
		body := line
		if n := len(body); n > 0 && body[n-1] == '\n' {
			body = body[:n-1]
		}
		var ev varplane.Event
		if _, _, err := eventjson.DecodeEventLazy(body, &ev, nil); err != nil {
			return // not a line the store wrote: the checkpointer reads only those
		}
		if ev.Scope != sc {
			t.Fatalf("shortcut read scope %q, decoder %q, from %q", sc, ev.Scope, line)
		}
	})
}
