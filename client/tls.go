package client

import (
	"crypto/tls"

	"github.com/varplane/varplane/internal/wire"
)

// TLSConfig returns the TLS configuration of Options.TLS for a server
// whose certificate is signed by a CA of caFile (a PEM bundle; the
// system's roots when empty) and, with certFile and keyFile, presenting
// that client certificate for mutual TLS (reread when its files change,
// so a renewed certificate is used without a restart). It returns nil,
// nil when every argument is empty.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	return wire.ClientTLS(caFile, certFile, keyFile)
}
