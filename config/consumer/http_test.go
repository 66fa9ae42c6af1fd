package consumer_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/config"
	"github.com/varplane/varplane/config/consumer"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// TestHTTPStreamReconnects breaks the event stream: the subscriber
// reconnects and the client fetches again, so a create made while the stream
// was down still reaches the component.
func TestHTTPStreamReconnects(t *testing.T) {
	m, err := config.ParseManifest("m.yaml", []byte("name: one\nnamespace: a\nconfiguration:\n  schema: {type: object}\n  defaults: {v: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dep, err := config.NewDeployment([]*config.Manifest{m}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	eng := varplane.NewEngine(st, varplane.Options{})
	t.Cleanup(func() { eng.Close(); _ = st.Close() })
	svc, err := config.NewService(eng, dep)
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.NewHandler(eng, httpapi.Options{Authorizer: varplane.AllowAll, Values: svc, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	remote := &consumer.HTTP{BaseURL: srv.URL, Client: srv.Client(), Logger: quiet, ReconnectBase: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond}
	client := consumer.NewClient(remote, remote, consumer.ClientOptions{Logger: quiet})
	t.Cleanup(client.Close)
	conf, err := consumer.Open(context.Background(), client, m, consumer.Options{LookupEnv: func(string) (string, bool) { return "", false }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conf.Close)

	for i, want := range []string{"1", "2"} {
		srv.CloseClientConnections() // the stream breaks
		if _, err := svc.Create(context.Background(), config.CreateRequest{Component: "a.one", Configuration: json.RawMessage(`{"v":` + want + `}`), Originator: "t"}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for conf.Created() != uint64(i+1) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if v, _ := conf.Get("v"); v != json.Number(want) {
			t.Fatalf("after break %d: v = %v, want %s", i, v, want)
		}
	}
}
