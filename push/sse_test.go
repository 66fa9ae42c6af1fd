package push_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/push"
)

type sseEvent struct {
	Event, ID, Data string
	Comment         string
}

type sseStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
}

// openSSE connects to the handler at srv with query q and header hdr.
func openSSE(t *testing.T, srv *httptest.Server, q url.Values, hdr http.Header) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/watch?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	s := &sseStream{t: t, resp: resp, events: make(chan sseEvent, 64)}
	if resp.StatusCode != http.StatusOK {
		return s
	}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ev.Comment = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.Data = line[len("data: "):]
			}
		}
	}()
	return s
}

// next returns the next event that is not a heartbeat or retry hint.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				s.t.Fatal("stream ended")
			}
			if ev.Event == "" {
				continue
			}
			return ev
		case <-timeout:
			s.t.Fatal("no event within 5s")
		}
	}
}

func newSSEServer(t *testing.T, h *push.Hub, opts push.SSEOptions) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(push.NewSSEHandler(h, opts))
	t.Cleanup(srv.Close)
	return srv
}

func TestSSEStream(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "g.k1", `{"on":true}`)
	activate(t, e, "g", `{"g.x":1}`)
	srv := newSSEServer(t, h, push.SSEOptions{})
	s := openSSE(t, srv, url.Values{"key": {"g.k1", "g.none"}, "group": {"g"}}, nil)

	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := s.resp.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	ev := s.next()
	if ev.Event != "head" || ev.ID != "g.k1@1" {
		t.Fatalf("first event = %+v, want head g.k1@1", ev)
	}
	var body struct {
		Scope      string                     `json:"scope"`
		Generation uint64                     `json:"generation"`
		Revision   string                     `json:"revision"`
		Values     map[string]json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &body); err != nil {
		t.Fatalf("data %q: %v", ev.Data, err)
	}
	if body.Scope != "g.k1" || body.Generation != 1 || !strings.HasPrefix(body.Revision, "sha256:") || string(body.Values["g.k1"]) != `{"on":true}` {
		t.Errorf("data = %+v", body)
	}
	// Keys in request order, then groups.
	if ev := s.next(); ev.Event != "no-head" || ev.ID != "g.none@0" || ev.Data != `{"scope":"g.none","generation":0}` {
		t.Errorf("second event = %+v, want no-head g.none", ev)
	}
	if ev := s.next(); ev.Event != "head" || ev.ID != "g@1" {
		t.Errorf("third event = %+v, want head g@1", ev)
	}

	activate(t, e, "g.k1", `{"on":false}`)
	if ev := s.next(); ev.Event != "head" || ev.ID != "g.k1@2" || !strings.Contains(ev.Data, `"values":{"g.k1":{"on":false}}`) {
		t.Errorf("commit event = %+v", ev)
	}
	deactivate(t, e, "g")
	got := []string{s.next().ID, s.next().ID}
	if got[0] != "g@2" || got[1] != "g.k1@3" {
		t.Errorf("deactivation events = %v, want [g@2 g.k1@3]", got)
	}
}

func TestSSEResume(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	activate(t, e, "a.x", `1`)
	activate(t, e, "a.y", `1`)
	activate(t, e, "a.y", `2`)
	srv := newSSEServer(t, h, push.SSEOptions{})

	tests := []struct {
		name string
		q    url.Values
		hdr  http.Header
		want string
	}{
		{"since holds everything current", url.Values{"prefix": {"a"}, "since": {"a.x@1", "a.y@2"}}, nil, ""},
		{"since holds an older a.y", url.Values{"prefix": {"a"}, "since": {"a.x@1", "a.y@1"}}, nil, "a.y@2"},
		{"since holds nothing", url.Values{"prefix": {"a"}}, nil, "a.x@1 a.y@2"},
		{"last-event-id holds a.x", url.Values{"key": {"a.x"}}, http.Header{"Last-Event-Id": {"a.x@1"}}, ""},
		{"last-event-id holds an older a.y", url.Values{"key": {"a.y"}}, http.Header{"Last-Event-Id": {"a.y@1"}}, "a.y@2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A marker commit tells "nothing was resent" apart from "not yet":
			// the client holds the marker's current generation, so only the
			// next one is sent, after everything the snapshot resent.
			st, err := e.Status(context.Background(), "m.marker")
			if err != nil {
				t.Fatal(err)
			}
			q := url.Values{"key": {"m.marker"}, "since": {push.EventID("m.marker", st.Generation)}}
			for k, v := range tt.q {
				q[k] = append(q[k], v...)
			}
			s := openSSE(t, srv, q, tt.hdr)
			activate(t, e, "m.marker", `1`)
			var got []string
			for ev := s.next(); !strings.HasPrefix(ev.ID, "m.marker@"); ev = s.next() {
				got = append(got, ev.ID)
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("resent = %q, want %q", g, tt.want)
			}
		})
	}
}

func TestSSEHeartbeat(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{})
	srv := newSSEServer(t, h, push.SSEOptions{Heartbeat: 10 * time.Millisecond})
	s := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-s.events:
			if ev.Comment == "heartbeat" {
				return
			}
		case <-timeout:
			t.Fatal("no heartbeat")
		}
	}
}

func TestSSEErrors(t *testing.T) {
	e := newEngine(t)
	h := newHub(t, e, push.Options{MaxSubscribers: 1})
	deny := func(r *http.Request, f push.Filter) error {
		for _, s := range f.Scopes() {
			if s == "secret.x" {
				return varplane.ErrForbidden
			}
		}
		return nil
	}
	srv := newSSEServer(t, h, push.SSEOptions{Authorize: deny})
	keep := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil) // takes the only slot
	if keep.resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream status = %d", keep.resp.StatusCode)
	}
	tests := []struct {
		name   string
		q      url.Values
		status int
		code   string
	}{
		{"no filter", url.Values{}, 400, "bad-request"},
		{"bad scope", url.Values{"key": {"a..b"}}, 400, "bad-request"},
		{"bad since", url.Values{"key": {"a.x"}, "since": {"a.x"}}, 400, "bad-request"},
		{"denied", url.Values{"key": {"secret.x"}}, 403, "forbidden"},
		{"full", url.Values{"key": {"a.x"}}, 503, "too-many-subscribers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openSSE(t, srv, tt.q, nil)
			if s.resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", s.resp.StatusCode, tt.status)
			}
			var body map[string]string
			if err := json.NewDecoder(s.resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if body["code"] != tt.code || body["error"] == "" {
				t.Errorf("body = %v, want code %q and a message", body, tt.code)
			}
		})
	}
}

func TestSSEClosedWithReason(t *testing.T) {
	e := newEngine(t)
	h := push.New(e, push.Options{})
	srv := newSSEServer(t, h, push.SSEOptions{})
	s := openSSE(t, srv, url.Values{"key": {"a.x"}}, nil)
	if ev := s.next(); ev.Event != "no-head" {
		t.Fatalf("first event = %+v", ev)
	}
	h.Close()
	if ev := s.next(); ev.Event != "close" || ev.Data != `{"reason":"shutdown"}` {
		t.Errorf("event = %+v, want close with reason shutdown", ev)
	}
}

func TestParseHeld(t *testing.T) {
	got, err := push.ParseHeld([]string{"a.b@3", "x@y.z@7", "a.b@2"})
	if err != nil {
		t.Fatal(err)
	}
	if got["a.b"] != 3 || got["x@y.z"] != 7 || len(got) != 2 {
		t.Errorf("ParseHeld = %v", got)
	}
	for _, bad := range []string{"nogen", "@3", "a.b@", "a.b@-1", "a..b@1"} {
		if _, err := push.ParseHeld([]string{bad}); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("ParseHeld(%q) = %v, want bad-request", bad, err)
		}
	}
	if got, want := push.EventID("x@y.z", 7), "x@y.z@7"; got != want {
		t.Errorf("EventID = %q, want %q", got, want)
	}
}
