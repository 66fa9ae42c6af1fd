package main

import (
	"crypto/tls"
	"flag"
	"fmt"

	"github.com/varplane/varplane/internal/wire"
)

// tlsServeFlags are serve's TLS flags: with --tls-cert and --tls-key every
// listener (--addr, --rpc-addr) serves HTTPS, HTTP/1.1 and HTTP/2 (gRPC
// included) sharing each port through ALPN; the files are reread when they
// change. --tls-client-ca asks every client for a certificate signed by one
// of its CAs (mutual TLS).
type tlsServeFlags struct {
	cert, key, clientCA string
}

func (f *tlsServeFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.cert, "tls-cert", getenv("VARPLANE_TLS_CERT"), "PEM certificate (chain) to serve HTTPS with, reloaded when the file changes (env VARPLANE_TLS_CERT)")
	fs.StringVar(&f.key, "tls-key", getenv("VARPLANE_TLS_KEY"), "PEM private key of --tls-cert (env VARPLANE_TLS_KEY)")
	fs.StringVar(&f.clientCA, "tls-client-ca", getenv("VARPLANE_TLS_CLIENT_CA"), "PEM bundle of the CAs client certificates must be signed by (mutual TLS; needs --tls-cert) (env VARPLANE_TLS_CLIENT_CA)")
}

// config returns the listeners' TLS configuration, nil without TLS.
func (f *tlsServeFlags) config() (*tls.Config, error) {
	if f.cert == "" && f.key == "" && f.clientCA == "" {
		return nil, nil
	}
	if f.cert == "" || f.key == "" {
		return nil, usagef("--tls-cert and --tls-key go together (--tls-client-ca needs them too)")
	}
	c, err := wire.ServerTLS(f.cert, f.key, f.clientCA)
	if err != nil {
		return nil, usagef("%s", err)
	}
	return c, nil
}

// tlsClientFlags are the client commands' TLS flags: the CAs to trust and
// the client certificate to present.
type tlsClientFlags struct {
	ca, cert, key string
}

func (f *tlsClientFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.ca, "tls-ca", getenv("VARPLANE_TLS_CA"), "PEM bundle of the CAs to trust for an https:// --server, instead of the system's (env VARPLANE_TLS_CA)")
	fs.StringVar(&f.cert, "tls-cert", getenv("VARPLANE_TLS_CLIENT_CERT"), "PEM client certificate for a server that asks for one (env VARPLANE_TLS_CLIENT_CERT)")
	fs.StringVar(&f.key, "tls-key", getenv("VARPLANE_TLS_CLIENT_KEY"), "PEM private key of --tls-cert (env VARPLANE_TLS_CLIENT_KEY)")
}

func (f *tlsClientFlags) config() (*tls.Config, error) {
	c, err := wire.ClientTLS(f.ca, f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
	}
	return c, nil
}
