package wire

import (
	"crypto/tls"
	"math/rand/v2"
	"net"
	"net/http"
	"time"
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

// Backoff returns the wait before retry number attempt (0 for the first
// retry after a failure): "full jitter", a uniform draw in (0, d] where d
// doubles from min per attempt up to max. Spreading the whole interval is
// what keeps a fleet of clients from reconnecting in step after an outage.
func Backoff(attempt int, min, max time.Duration) time.Duration {
	if min <= 0 {
		min = 100 * time.Millisecond
	}
	if max < min {
		max = min
	}
	d := min
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return time.Duration(rand.Int64N(int64(d))) + 1
}
