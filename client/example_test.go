package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/client"
)

// A consumer registers the scopes it reads, starts the follower, waits for
// the first value, then reads from memory on every request.
func Example() {
	type Lane struct {
		Enabled bool   `json:"enabled"`
		Model   string `json:"model_target_ref"`
	}
	c, err := client.New("http://127.0.0.1:8790", client.Options{
		Defaults: map[varplane.Scope]json.RawMessage{
			"agentic.lanes.vinci": json.RawMessage(`{"enabled":false}`),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Register("agentic.lanes.vinci"); err != nil {
		log.Fatal(err)
	}
	c.OnChange(func(scope varplane.Scope, old, new client.Value) {
		log.Printf("%s: generation %d from the %s tier", scope, new.Generation, new.Tier)
	})
	c.Start()
	defer c.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Fetch(ctx, "agentic.lanes.vinci"); err != nil {
		log.Printf("not served yet (%v): reads use the defaults", err)
	}
	lane, err := client.Get[Lane](c, "agentic.lanes.vinci") // lock-free
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lane.Enabled)
}
