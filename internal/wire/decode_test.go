package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

type sampleBody struct {
	Scope              *string         `json:"scope"`
	Document           json.RawMessage `json:"document"`
	ExpectedGeneration json.RawMessage `json:"expectedGeneration"`
	Tags               []string        `json:"tags"`
}

type otherBody struct {
	Revision *string `json:"revision"`
	Count    int     `json:"count"`
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		name, in string
		code     varplane.Code
		msg      string
	}{
		{"valid", `{"scope":"a.b","document":{"x":1}}`, "", ""},
		{"empty", ``, varplane.CodeBadRequest, "required"},
		{"not an object", `[1]`, varplane.CodeBadRequest, "object"},
		{"unknown field", `{"scopes":"a"}`, varplane.CodeBadRequest, "unknown field scopes"},
		{"case differs", `{"Scope":"a"}`, varplane.CodeBadRequest, "unknown field Scope"},
		{"unknown field not echoed", `{"<script>":1}`, varplane.CodeBadRequest, "an unknown field"},
		{"duplicate", `{"scope":"a","scope":"b"}`, varplane.CodeBadRequest, "more than once"},
		{"wrong type", `{"scope":5}`, varplane.CodeBadRequest, "scope must be a string"},
		{"trailing data", `{"scope":"a"} {}`, varplane.CodeBadRequest, ""},
		{"bad UTF-8", "{\"scope\":\"\xff\"}", varplane.CodeBadRequest, "UTF-8"},
		{"too deep", `{"document":` + strings.Repeat("[", 80) + strings.Repeat("]", 80) + `}`, varplane.CodeLimitExceeded, "depth"},
		{"document at the depth limit", `{"document":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, "", ""},
		{"too many members", `{"tags":[` + strings.Repeat(`"a",`, 10_000) + `"a"]}`, varplane.CodeLimitExceeded, "member"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b sampleBody
			err := DecodeStrict([]byte(tt.in), &b, varplane.Limits{})
			if tt.code == "" {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			if varplane.ErrorCode(err) != tt.code || !strings.Contains(varplane.ErrorMessage(err), tt.msg) {
				t.Fatalf("got %v, want %s containing %q", err, tt.code, tt.msg)
			}
		})
	}
}

// FuzzDecodeStrict holds DecodeStrict (json/v2 semantics) to the decoder it
// replaced (oracle_test.go): the same verdict, the same message, the same
// decoded request. The one intended difference: a member name repeated
// inside a nested object (a document) is refused at decode time now, where
// the old decoder let it through to the canonicaliser.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"scope":"a.b","document":{"x":[1,{"y":"}"}]},"tags":["t"]}`,
		`{"scope":"a.b","revision":"r","expectedGeneration":0}`,
		`{"scope":"a.b","scope":"a.c"}`,
		`{"Scope":"a.b"}`,
		`{"sc\u006fpe":"a.b","document":1}`,
		`{"scope":5}`,
		`{"document":"\"\\"}`,
		` [1,2] `,
		`null`,
		`{"scope":"a.b"} {}`,
		`{"count":-1,"revision":1e3}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	lim := varplane.Limits{}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(bytes.TrimSpace(body)) == 0 || lim.CheckJSON(body, 1) != nil {
			return // answered before either path
		}
		compare := func(fast, slow any) {
			errFast, errSlow := DecodeStrict(body, fast, lim), decodeStrictTokens(body, slow)
			if errFast != nil && errSlow == nil && strings.Contains(errFast.Error(), "member given more than once") {
				return // a nested duplicate: refused now, by design
			}
			if (errFast == nil) != (errSlow == nil) || (errFast != nil && errFast.Error() != errSlow.Error()) {
				t.Fatalf("%T: fast path says %v, token path %v", fast, errFast, errSlow)
			}
			if errFast == nil && !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%T: fast path decoded %+v, token path %+v", fast, fast, slow)
			}
		}
		compare(&sampleBody{}, &sampleBody{})
		compare(&otherBody{}, &otherBody{})
	})
}

func TestCheckContentType(t *testing.T) {
	for ct, ok := range map[string]bool{
		"":                                  true,
		"application/json":                  true,
		"Application/JSON; charset=utf-8":   true,
		"text/plain":                        false,
		"application/x-www-form-urlencoded": false,
		"multipart/form-data; boundary=x":   false,
		"garbage;;":                         false,
	} {
		r := httptest.NewRequest("POST", "/", nil)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		err := CheckContentType(r, "application/json")
		if (err == nil) != ok || (err != nil && varplane.ErrorCode(err) != varplane.CodeUnsupportedMediaType) {
			t.Errorf("%q: %v", ct, err)
		}
	}
}

// TestReadBodyAnswers413ToAWholeBody sends an over-limit body in one write
// before reading, as most clients do, and expects the 413 every time rather
// than a reset connection.
func TestReadBodyAnswers413ToAWholeBody(t *testing.T) {
	const limit = 1 << 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := ReadBody(w, r, limit); err != nil {
			WriteError(w, r, nil, err)
			return
		}
		w.WriteHeader(204)
	}))
	defer srv.Close()
	// Twice the limit, through small socket buffers: the client is still
	// writing when the server has its answer, as over a real network.
	body := bytes.Repeat([]byte("x"), 2*limit)
	for i := 0; i < 3; i++ {
		for _, chunked := range []bool{false, true} {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn := c.(*net.TCPConn)
			_ = conn.SetWriteBuffer(16 << 10)
			_ = conn.SetReadBuffer(16 << 10)
			var req bytes.Buffer
			req.WriteString("POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
			if chunked {
				req.WriteString("Transfer-Encoding: chunked\r\n\r\n")
				req.WriteString(strconv.FormatInt(int64(len(body)), 16) + "\r\n")
				req.Write(body)
				req.WriteString("\r\n0\r\n\r\n")
			} else {
				req.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
				req.Write(body)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write(req.Bytes()); err != nil {
				t.Fatalf("attempt %d: write: %v", i, err)
			}
			resp, err := io.ReadAll(conn)
			conn.Close()
			if !bytes.HasPrefix(resp, []byte("HTTP/1.1 413")) {
				t.Fatalf("attempt %d (chunked %v): got %q, err %v", i, chunked, truncate(resp), err)
			}
		}
	}
}

func truncate(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// TestReadBodyDeclaredLength reads a body of a declared length whole, and
// refuses one that ends before its Content-Length (the client gave up).
func TestReadBodyDeclaredLength(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := ReadBody(w, r, 1<<10)
		if err != nil {
			WriteError(w, r, nil, err)
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	for _, tt := range []struct {
		declared int
		sent     string
		want     string
	}{
		{5, "hello", "HTTP/1.1 200"},
		{1, "x", "HTTP/1.1 200"},
		{10, "hello", "HTTP/1.1 400"},
	} {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", tt.declared, tt.sent)
		_ = c.(*net.TCPConn).CloseWrite()
		resp, _ := io.ReadAll(c)
		c.Close()
		if !bytes.HasPrefix(resp, []byte(tt.want)) {
			t.Fatalf("Content-Length %d, body %q: got %q, want %s", tt.declared, tt.sent, truncate(resp), tt.want)
		}
		if tt.want == "HTTP/1.1 200" && !bytes.HasSuffix(resp, []byte("\r\n\r\n"+tt.sent)) {
			t.Fatalf("Content-Length %d: answered %q, want the body back", tt.declared, truncate(resp))
		}
	}
}
