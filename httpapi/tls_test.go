package httpapi_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/wiretest"
)

// startTLS serves a handler that answers the protocol and the client
// certificate's name over TLS.
func startTLS(t *testing.T, cfg *tls.Config) *httpapi.Server {
	t.Helper()
	srv := httpapi.NewServer("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := "-"
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			name = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		_, _ = io.WriteString(w, r.Proto+" "+name)
	}))
	srv.TLS, srv.H2C = cfg, true
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(t.Context()) })
	return srv
}

func get(t *testing.T, c *http.Client, url string) (string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// HTTP/1.1 and HTTP/2 share the TLS port through ALPN; a renewed
// certificate is served without a restart.
func TestTLSALPNAndReload(t *testing.T) {
	ca := wiretest.NewCA(t, "ca")
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, dir, "first")
	cfg, err := wire.ServerTLS(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := startTLS(t, cfg)
	if !strings.HasPrefix(srv.URL(), "https://") {
		t.Fatalf("URL = %s", srv.URL())
	}
	ccfg, err := wire.ClientTLS(ca.File, "", "")
	if err != nil {
		t.Fatal(err)
	}
	served := func(h2 bool) *x509.Certificate {
		c := ccfg.Clone()
		c.NextProtos = []string{"http/1.1"}
		if h2 {
			c.NextProtos = []string{"h2"}
		}
		tr := &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: h2}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]; !strings.HasPrefix(string(b), want) {
			t.Errorf("h2=%v: served %q, want %s", h2, b, want)
		}
		return resp.TLS.PeerCertificates[0]
	}
	if c := served(false); c.Subject.CommonName != "first" {
		t.Errorf("certificate %s, want first", c.Subject.CommonName)
	}
	served(true)
	// Renew: the next handshake after the reload interval serves it.
	ca.Issue(t, dir, "second")
	deadline := time.Now().Add(5 * time.Second)
	for served(false).Subject.CommonName != "second" {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was never served")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// With a client CA, only clients with a certificate it signed get in.
func TestMutualTLS(t *testing.T) {
	ca, other := wiretest.NewCA(t, "ca"), wiretest.NewCA(t, "other")
	certFile, keyFile := ca.Issue(t, t.TempDir(), "server")
	cfg, err := wire.ServerTLS(certFile, keyFile, ca.File)
	if err != nil {
		t.Fatal(err)
	}
	srv := startTLS(t, cfg)
	goodCert, goodKey := ca.Issue(t, t.TempDir(), "good-client")
	badCert, badKey := other.Issue(t, t.TempDir(), "bad-client")
	for _, tc := range []struct {
		name, cert, key string
		ok              bool
	}{
		{"no certificate", "", "", false},
		{"signed by another CA", badCert, badKey, false},
		{"signed by the client CA", goodCert, goodKey, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ccfg, err := wire.ClientTLS(ca.File, tc.cert, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			body, err := get(t, wire.NewHTTPClient(ccfg, 5*time.Second), srv.URL())
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !strings.HasSuffix(body, " good-client") {
				t.Errorf("served %q", body)
			}
		})
	}
}

func TestServerTLSRefusesBadFiles(t *testing.T) {
	ca := wiretest.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, t.TempDir(), "s")
	for _, tc := range [][3]string{{certFile, "", ""}, {certFile, certFile, ""}, {certFile, keyFile, keyFile}, {"/nonexistent", keyFile, ""}} {
		if _, err := wire.ServerTLS(tc[0], tc[1], tc[2]); err == nil {
			t.Errorf("ServerTLS(%q) accepted", tc)
		}
	}
}
