package wire

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

func TestNewRequest(t *testing.T) {
	req, err := NewRequest(context.Background(), http.MethodPost, "http://h/x?a=1", "tok", map[string]string{"k": "<v>"})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	if string(body) != `{"k":"<v>"}` {
		t.Errorf("body = %s, want the JSON without HTML escaping", body)
	}
	for h, want := range map[string]string{"Content-Type": "application/json", "Accept": "application/json", "Authorization": "Bearer tok"} {
		if got := req.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	req, err = NewRequest(context.Background(), http.MethodGet, "http://h/x", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if req.Body != nil || req.Header.Get("Content-Type") != "" || req.Header.Get("Authorization") != "" {
		t.Errorf("a GET without token has body %v, Content-Type %q, Authorization %q", req.Body, req.Header.Get("Content-Type"), req.Header.Get("Authorization"))
	}
	if _, err := NewRequest(context.Background(), http.MethodPost, "http://h/x", "", func() {}); err == nil {
		t.Error("an unencodable body was accepted")
	}
	if _, err := NewRequest(context.Background(), "BAD METHOD", "http://h/x", "", nil); err == nil {
		t.Error("an invalid method was accepted")
	}
}

// TestDo sends requests to servers answering through WriteError (as every
// varplane server does) and as a proxy would: the client gets the error back
// whole, or the code of the status without the proxy's text.
func TestDo(t *testing.T) {
	exp, cur := varplane.Generation(1), varplane.Generation(2)
	cases := []struct {
		name    string
		handler http.HandlerFunc
		is      error
		check   func(t *testing.T, e *varplane.Error)
	}{
		{"conflict keeps its generations", func(w http.ResponseWriter, r *http.Request) {
			WriteError(w, r, nil, varplane.ConflictError("a.b", exp, cur))
		}, varplane.ErrConflict, func(t *testing.T, e *varplane.Error) {
			if e.Expected == nil || *e.Expected != exp || e.Current == nil || *e.Current != cur || e.Scope != "a.b" {
				t.Errorf("conflict details lost: %+v", e)
			}
		}},
		{"invalid keeps its issues", func(w http.ResponseWriter, r *http.Request) {
			WriteError(w, r, nil, &varplane.Error{Code: varplane.CodeRevisionInvalid, Message: "invalid", Issues: []varplane.Issue{{Code: "c", Path: "/p", Message: "m"}}})
		}, varplane.ErrInvalid, func(t *testing.T, e *varplane.Error) {
			if len(e.Issues) != 1 || e.Issues[0].Path != "/p" {
				t.Errorf("issues lost: %+v", e.Issues)
			}
		}},
		{"proxy 502 is store-unavailable without its page", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>upstream secret-host:9999 down</html>")
		}, varplane.ErrUnavailable, func(t *testing.T, e *varplane.Error) {
			if strings.Contains(e.Error(), "secret-host") || strings.Contains(e.Error(), "html") {
				t.Errorf("the proxy's text reached the error: %v", e)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			req, err := NewRequest(context.Background(), http.MethodPost, srv.URL, "", struct{}{})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := Do(srv.Client(), req)
			if resp != nil {
				t.Fatalf("an error answer returned a response")
			}
			var e *varplane.Error
			if !errors.As(err, &e) || !errors.Is(err, c.is) {
				t.Fatalf("err = %v, want %v as a *varplane.Error", err, c.is)
			}
			c.check(t, e)
		})
	}
	t.Run("below 400 is returned open", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotModified) }))
		defer srv.Close()
		req, _ := NewRequest(context.Background(), http.MethodGet, srv.URL, "", nil)
		resp, err := Do(srv.Client(), req)
		if err != nil || resp.StatusCode != http.StatusNotModified {
			t.Fatalf("Do = %v, %v", resp, err)
		}
		resp.Body.Close()
	})
	t.Run("transport failure is not a varplane error", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		req, _ := NewRequest(context.Background(), http.MethodGet, srv.URL, "", nil)
		_, err := Do(NewHTTPClient(nil, time.Second), req)
		var e *varplane.Error
		if err == nil || errors.As(err, &e) {
			t.Fatalf("err = %v, want a transport error", err)
		}
	})
}

func TestCheckStream(t *testing.T) {
	cases := []struct {
		name   string
		status int
		ct     string
		body   string
		want   error
	}{
		{"event stream", 200, "text/event-stream; charset=utf-8", "", nil},
		{"JSON 200", 200, "application/json", "{}", ErrNotEventStream},
		{"204", 204, "text/event-stream", "", ErrNotEventStream},
		{"error answer", 403, "application/json", `{"code":"forbidden","error":"no"}`, varplane.ErrForbidden},
		{"proxy page", 504, "text/html", "<html>gateway</html>", varplane.ErrUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: c.status, Header: http.Header{"Content-Type": {c.ct}}, Body: io.NopCloser(strings.NewReader(c.body))}
			err := CheckStream(resp)
			if c.want == nil {
				if err != nil {
					t.Fatalf("CheckStream = %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("CheckStream = %v, want %v", err, c.want)
			}
		})
	}
}

func TestSetStreamHeaders(t *testing.T) {
	req, _ := NewRequest(context.Background(), http.MethodGet, "http://h/watch", "", nil)
	SetStreamHeaders(req)
	if req.Header.Get("Accept") != "text/event-stream" || req.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("headers = %v", req.Header)
	}
}
