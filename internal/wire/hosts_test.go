package wire

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHostPolicy(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8790}
	tests := []struct {
		listen  net.Addr
		allowed []string
		host    string
		ok      bool
	}{
		{loop, nil, "127.0.0.1:8790", true},
		{loop, nil, "localhost:8790", true},
		{loop, nil, "LOCALHOST", true},
		{loop, nil, "app.localhost:8790", true},
		{loop, nil, "[::1]:8790", true},
		{loop, nil, "127.5.5.5", true},
		{loop, nil, "attacker.example:8790", false},
		{loop, nil, "localhost.attacker.example", false},
		{loop, nil, "10.1.2.3:8790", false},
		{loop, nil, "", false},
		{loop, []string{"varplane.internal"}, "varplane.internal:443", true},
		{loop, []string{"varplane.internal"}, "x.varplane.internal", false},
		{loop, []string{".corp.example"}, "cp.corp.example", true},
		{loop, []string{"*.corp.example"}, "a.b.corp.example", true},
		{loop, []string{".corp.example"}, "corpxexample", false},
		{loop, []string{"10.1.2.3"}, "10.1.2.3:8790", true},
		{loop, []string{"*"}, "anything.example", true},
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 1}, nil, "192.0.2.7:1", true},
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 1}, nil, "192.0.2.8:1", false},
	}
	for _, tt := range tests {
		if got := NewHostPolicy(tt.listen, tt.allowed).Allows(tt.host); got != tt.ok {
			t.Errorf("listen %v allowed %v: Allows(%q) = %v, want %v", tt.listen, tt.allowed, tt.host, got, tt.ok)
		}
	}
}

func TestHostGuardAnswers421(t *testing.T) {
	h := NewHostPolicy(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil).Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(204)
	}))
	r := httptest.NewRequest("POST", "/vars/admin/activate", nil)
	r.Host = "rebound.attacker.example"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusMisdirectedRequest {
		t.Fatalf("status %d", rec.Code)
	}
	if e := ParseError(rec.Code, rec.Body.Bytes()); e.Code != "forbidden" || e.Hint == "" {
		t.Fatalf("error %+v", e)
	}
	r.Host = "127.0.0.1:8790"
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 204 {
		t.Fatalf("allowed host: %d", rec.Code)
	}
}
