package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/varplane/varplane/internal/wire"
	"github.com/varplane/varplane/internal/wire/wiretest"
	v1 "github.com/varplane/varplane/rpc/gen/varplane/v1"
	"github.com/varplane/varplane/rpc/gen/varplane/v1/varplanev1connect"
)

// serve --tls-cert --tls-key --tls-client-ca: the CLI with --tls-ca and a
// client certificate gets in, without one it is refused; gRPC shares the
// TLS port.
func TestServeMutualTLS(t *testing.T) {
	ca := wiretest.NewCA(t, "ca")
	cert, key := ca.Issue(t, t.TempDir(), "server")
	s := startServe(t, "--addr", "127.0.0.1:0", "--store", "memory:", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca.File)
	if !strings.HasPrefix(s.URL, "https://") {
		t.Fatalf("URL = %s", s.URL)
	}
	clientCert, clientKey := ca.Issue(t, t.TempDir(), "cli")
	env := []string{"VARPLANE_SERVER=" + s.URL}
	ok := runCLI(t, env, "", "status", "--scope", "tls.k", "--tls-ca", ca.File, "--tls-cert", clientCert, "--tls-key", clientKey)
	if ok.code != 0 {
		t.Fatalf("status with a client certificate: exit %d\n%s%s", ok.code, ok.stdout, ok.stderr)
	}
	if r := runCLI(t, env, "", "status", "--scope", "tls.k", "--tls-ca", ca.File); r.code == 0 {
		t.Fatalf("status without a client certificate succeeded:\n%s", r.stdout)
	}
	// gRPC (connect-go's gRPC client over HTTP/2 with ALPN) on the same port.
	cfg, err := wire.ClientTLS(ca.File, clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := varplanev1connect.NewPushServiceClient(hc, s.URL, connect.WithGRPC()).Subscribe(ctx, connect.NewRequest(&v1.SubscribeRequest{Keys: []string{"tls.k"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || !stream.Msg().GetSnapshot() {
		t.Fatalf("gRPC over TLS: %v", stream.Err())
	}
}
