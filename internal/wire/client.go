package wire

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/varplane/varplane/internal/jsontext"
)

// Client timeouts: every client of the project (SDK, CLI, configuration
// consumer) dials, handshakes and waits for headers within these, so that a
// server that accepts and then stalls never hangs a caller.
const (
	DialTimeout           = 5 * time.Second
	TLSHandshakeTimeout   = 5 * time.Second
	ResponseHeaderTimeout = 30 * time.Second
	IdleConnTimeout       = 90 * time.Second
	// RequestTimeout bounds a whole request that is not a stream.
	RequestTimeout = 60 * time.Second
)

// NewTransport returns the HTTP transport every client uses: bounded dial,
// handshake and header waits, HTTP/2 when the server offers it over TLS, and
// tlsConfig (nil for the system roots) for https URLs.
func NewTransport(tlsConfig *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   TLSHandshakeTimeout,
		ResponseHeaderTimeout: ResponseHeaderTimeout,
		IdleConnTimeout:       IdleConnTimeout,
		MaxIdleConnsPerHost:   16,
		ForceAttemptHTTP2:     true,
	}
}

// NewHTTPClient returns a client over NewTransport(tlsConfig) whose requests
// time out after timeout (RequestTimeout when 0; negative for none, for a
// client that holds streams and bounds each request by its context).
func NewHTTPClient(tlsConfig *tls.Config, timeout time.Duration) *http.Client {
	if timeout == 0 {
		timeout = RequestTimeout
	}
	if timeout < 0 {
		timeout = 0
	}
	return &http.Client{Transport: NewTransport(tlsConfig), Timeout: timeout}
}

// NewRequest builds a request a client sends to target: body, when not nil,
// encoded as JSON (jsontext.Marshal) with Content-Type application/json,
// Accept application/json, and the bearer token (SetBearer; none when
// empty). Callers add their own headers after it.
func NewRequest(ctx context.Context, method, target, token string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := jsontext.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("wire: encode request body: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("wire: build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	SetBearer(req.Header, token)
	return req, nil
}

// Do sends req with hc and returns the response when its status is below
// 400 (the caller closes its body). An error answer is read, closed and
// returned as the *varplane.Error it carries (ResponseError), details
// included; a transport failure is returned as hc.Do returned it.
func Do(hc *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, ResponseError(resp)
	}
	return resp, nil
}

// ErrNotEventStream is returned by CheckStream for a success answer to a
// stream request that is not text/event-stream (a server or proxy that does
// not stream).
var ErrNotEventStream = errors.New("wire: the answer is not an event stream")

// SetStreamHeaders marks req as an event-stream request: Accept
// text/event-stream, and no cached answer.
func SetStreamHeaders(req *http.Request) {
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
}

// CheckStream checks the answer to a stream request: nil for 200 with
// Content-Type text/event-stream; for an error answer the *varplane.Error it
// carries (read, not closed); ErrNotEventStream for any other answer.
func CheckStream(resp *http.Response) error {
	if resp.StatusCode >= 400 {
		return ResponseError(resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		return fmt.Errorf("%w (%d, %q)", ErrNotEventStream, resp.StatusCode, safeMediaType(resp.Header.Get("Content-Type")))
	}
	return nil
}

// safeMediaType shows a Content-Type back only when it is short and plain.
func safeMediaType(ct string) string {
	if len(ct) > 64 || strings.ContainsFunc(ct, func(r rune) bool { return r < ' ' || r > '~' }) {
		return "(media type)"
	}
	return ct
}
