package wire

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSSERoundTrip(t *testing.T) {
	var b []byte
	b = AppendRetry(b, 1000)
	b = AppendEvent(b, "head", "a.b@3", []byte(`{"scope":"a.b"}`))
	b = AppendComment(b, "heartbeat")
	b = AppendEvent(b, "", "", []byte(`{}`))
	r := NewSSEReader(strings.NewReader(string(b)), 0)
	want := []Event{
		{Retry: 1000},
		{Name: "head", ID: "a.b@3", Data: `{"scope":"a.b"}`},
		{Comment: true},
		{Data: `{}`},
	}
	for i, w := range want {
		got, err := r.Next()
		if err != nil || got != w {
			t.Fatalf("event %d: %+v, %v; want %+v", i, got, err, w)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

func TestSSEReaderParsing(t *testing.T) {
	in := "event:x\r\ndata:a\r\ndata: b\r\nid: 1\r\nignored: z\r\n\r\n" + "data: tail"
	r := NewSSEReader(strings.NewReader(in), 0)
	got, err := r.Next()
	if err != nil || got != (Event{Name: "x", ID: "1", Data: "a\nb"}) {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut event: %v", err)
	}
}

func TestSSEReaderBound(t *testing.T) {
	big := "data: " + strings.Repeat("x", 2000) + "\n\n"
	if _, err := NewSSEReader(strings.NewReader(big), 1000).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("one long line: %v", err)
	}
	many := strings.Repeat("data: "+strings.Repeat("x", 100)+"\n", 20) + "\n"
	if _, err := NewSSEReader(strings.NewReader(many), 1000).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("many lines: %v", err)
	}
}

// FuzzSSEReader: any byte stream is read without panic, and an event the
// writer wrote comes back whole.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: x\n\n"), "head", "a@1", "{}")
	f.Add([]byte(":\n\nretry: x\nid: \x00\n\n"), "", "", "")
	f.Fuzz(func(t *testing.T, noise []byte, name, id, data string) {
		r := NewSSEReader(strings.NewReader(string(noise)), 4096)
		for i := 0; i < 100; i++ {
			if _, err := r.Next(); err != nil {
				break
			}
		}
		if strings.ContainsAny(name+id+data, "\r\n") || strings.ContainsRune(id, 0) || strings.HasPrefix(name, " ") || strings.HasPrefix(id, " ") || strings.HasPrefix(data, " ") {
			return
		}
		got, err := NewSSEReader(strings.NewReader(string(AppendEvent(nil, name, id, []byte(data)))), 0).Next()
		if err != nil || got != (Event{Name: name, ID: id, Data: data}) {
			t.Fatalf("round trip of %q %q %q: %+v %v", name, id, data, got, err)
		}
	})
}

// AppendEventWith writes the frame AppendEvent writes for the same data.
func TestAppendEventWith(t *testing.T) {
	for _, tt := range []struct{ event, id, data string }{
		{"head", "a.b@3", `{"scope":"a.b"}`},
		{"", "", `{}`},
		{"close", "", ``},
	} {
		want := AppendEvent([]byte("prefix\n"), tt.event, tt.id, []byte(tt.data))
		got := AppendEventWith([]byte("prefix\n"), tt.event, tt.id, func(b []byte) []byte { return append(b, tt.data...) })
		if string(got) != string(want) {
			t.Errorf("AppendEventWith = %q, want %q", got, want)
		}
	}
}
