package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
	"github.com/varplane/varplane/httpapi"
	"github.com/varplane/varplane/store/memory"
)

// An operator's tool publishes a document guarded by the generation it
// read, and learns from the error itself when someone else moved first.
func ExampleAdmin() {
	// A server to talk to (in production: the URL of varplane serve).
	st := memory.New()
	e := varplane.NewEngine(st, varplane.Options{})
	api := httpapi.NewHandler(e, httpapi.Options{Authorizer: varplane.AllowAll, DisableOps: true, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(api)
	defer func() { srv.Close(); api.Close(); e.Close(); _ = st.Close() }()

	ctx := context.Background()
	admin, err := client.NewAdmin(srv.URL, client.AdminOptions{})
	if err != nil {
		log.Fatal(err)
	}
	st0, err := admin.Status(ctx, "agentic.lanes.vinci")
	if err != nil {
		log.Fatal(err)
	}
	res, err := admin.Publish(ctx, varplane.PublishRequest{
		Scope: "agentic.lanes.vinci", Document: json.RawMessage(`{"enabled":true}`),
		ExpectedGeneration: st0.Generation, Actor: "ops", Reason: "enable vinci",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published generation", res.Generation)

	// The same expected generation again: the scope has moved.
	_, err = admin.Publish(ctx, varplane.PublishRequest{
		Scope: "agentic.lanes.vinci", Document: json.RawMessage(`{"enabled":false}`),
		ExpectedGeneration: st0.Generation,
	})
	var ve *varplane.Error
	if errors.Is(err, varplane.ErrConflict) && errors.As(err, &ve) {
		fmt.Println("conflict: the scope is at generation", *ve.Current)
	}
	// Output:
	// published generation 1
	// conflict: the scope is at generation 1
}
