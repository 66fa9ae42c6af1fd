package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLSReloadInterval is how often a served certificate's files are checked
// for a change (their modification time and size), at a handshake.
const TLSReloadInterval = time.Second

// filesStamp is what tells a changed file apart: its modification time and
// size.
type filesStamp [2]struct {
	mod  time.Time
	size int64
}

func stampOf(files ...string) (filesStamp, error) {
	var s filesStamp
	for i, f := range files {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return s, err
		}
		s[i].mod, s[i].size = fi.ModTime(), fi.Size()
	}
	return s, nil
}

// reloading caches what load builds from files, rebuilding it when a file
// changes (checked at most every TLSReloadInterval). A reload that fails
// (a half-written file) keeps the previous value and is tried again.
type reloading[T any] struct {
	files []string
	load  func() (T, error)

	mu      sync.Mutex
	val     T
	stamp   filesStamp
	checked time.Time
}

func newReloading[T any](load func() (T, error), files ...string) (*reloading[T], error) {
	r := &reloading[T]{files: files, load: load}
	stamp, err := stampOf(files...)
	if err != nil {
		return nil, err
	}
	v, err := load()
	if err != nil {
		return nil, err
	}
	r.val, r.stamp, r.checked = v, stamp, time.Now()
	return r, nil
}

func (r *reloading[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= TLSReloadInterval {
		r.checked = now
		if stamp, err := stampOf(r.files...); err == nil && stamp != r.stamp {
			if v, err := r.load(); err == nil {
				r.val, r.stamp = v, stamp
			}
		}
	}
	return r.val
}

func loadPair(certFile, keyFile string) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		return &c, nil
	}
}

func loadPool(file string) func() (*x509.CertPool, error) {
	return func() (*x509.CertPool, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s holds no PEM certificate", file)
		}
		return p, nil
	}
}

// ServerTLS returns the TLS configuration of a listener serving the
// certificate in certFile and keyFile (PEM), reloaded when either file
// changes, so that a renewed certificate is served without a restart. With
// clientCAFile, clients must present a certificate signed by one of its
// CAs (mutual TLS; the bundle is reloaded the same way). ALPN offers h2
// and http/1.1, so that HTTP/1.1, HTTP/2 and gRPC share the port. It
// returns an error when a file cannot be read or parsed.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a TLS certificate needs both its certificate and its key file")
	}
	pair, err := newReloading(loadPair(certFile, keyFile), certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	base := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.get(), nil },
	}
	if clientCAFile == "" {
		return base, nil
	}
	cas, err := newReloading(loadPool(clientCAFile), clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("TLS client CA: %w", err)
	}
	base.ClientAuth = tls.RequireAndVerifyClientCert
	base.ClientCAs = cas.get()
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = cas.get()
		return c, nil
	}
	return base, nil
}

// ClientTLS returns the TLS configuration of a client that trusts the CAs
// of caFile (PEM; the system's roots when empty) and, with certFile and
// keyFile, presents that certificate (reloaded when its files change). It
// returns nil, nil when every argument is empty: the default configuration.
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)()
		if err != nil {
			return nil, fmt.Errorf("TLS CA bundle: %w", err)
		}
		c.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return nil, errors.New("a client certificate needs both its certificate and its key file")
		}
		pair, err := newReloading(loadPair(certFile, keyFile), certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
	}
	return c, nil
}
