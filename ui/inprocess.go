package ui

import (
	"bytes"
	"io"
	"net/http"
)

// inProcess is an http.RoundTripper that serves each request with the API
// handler in this process, so the console's calls pass through the very
// routes, decoding, authorization and error mapping a remote client meets,
// with no socket, TLS or host check in between. It buffers the answer: it
// carries the console's JSON calls, not streams (the live stream is handed
// to the handler directly, see handleLive).
type inProcess struct{ h http.Handler }

// RoundTrip runs the handler on req and returns what it wrote.
func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}}
	if req.Body == nil {
		req.Body = http.NoBody
	}
	t.h.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &http.Response{
		Status:        http.StatusText(rec.status),
		StatusCode:    rec.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Body:          io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		ContentLength: int64(rec.body.Len()),
		Request:       req,
	}, nil
}

// recorder is the http.ResponseWriter of one in-process request.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
