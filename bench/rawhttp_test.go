package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminPostOnTheRawClient checks the harness's admin client on its
// minimal HTTP/1.1 connection: the request a server reads (method, path
// under the base, Content-Type, body), a 2xx answer decoded whether it
// comes with a Content-Length or chunked, a 409 as an *apiError with its
// current generation, and the same connection kept for every request.
func TestAdminPostOnTheRawClient(t *testing.T) {
	conns := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conns[r.RemoteAddr] = true
		body, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || r.Header.Get("Content-Type") != "application/json" || r.URL.Path != "/vars/admin/publish" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch string(body) {
		case `{"n":1}`:
			w.Write([]byte(`{"generation":7}`))
		case `{"n":2}`:
			w.Write([]byte(`{"generation":`))
			w.(http.Flusher).Flush() // a chunked answer
			w.Write([]byte(`8}`))
		default:
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"code":"revision-conflict","error":"stale","currentGeneration":9}`))
		}
	}))
	defer srv.Close()
	a := newAdmin(srv.URL + "/vars")
	defer a.close()
	ctx := context.Background()
	for i, want := range []uint64{7, 8} {
		var out struct {
			Generation uint64 `json:"generation"`
		}
		if err := a.post(ctx, "/admin/publish", []byte(`{"n":`+string(rune('1'+i))+`}`), &out); err != nil || out.Generation != want {
			t.Fatalf("post %d: generation %d, %v; want %d", i+1, out.Generation, err, want)
		}
	}
	err := a.post(ctx, "/admin/publish", []byte(`{"n":3}`), nil)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.CurrentGeneration == nil || *ae.CurrentGeneration != 9 || !strings.Contains(ae.Message, "stale") {
		t.Fatalf("a 409: %v (%+v)", err, ae)
	}
	if len(conns) != 1 {
		t.Fatalf("the requests used %d connections, want 1 (keep-alive)", len(conns))
	}
}
