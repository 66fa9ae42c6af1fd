package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane/client"
)

// replicaHead is what a fake read replica serves for one key: generation,
// revision and the value of member v.
type replicaHead struct {
	gen int
	rev string
	v   int
}

// TestSameGenerationOtherRevision: a head at the generation the client
// holds, with another revision, replaces it; an older generation does not.
// The sequence is a read replica's during a rollout that is aborted: the
// rollout's revision as generation 2 (the step selected the replica), the
// head at generation 1 again (the abort moved nothing in the store, so
// the client keeps what it has: the documented gap), then the next publish,
// which takes generation 2 with another revision and must reach the client.
func TestSameGenerationOtherRevision(t *testing.T) {
	var mu sync.Mutex
	cur := replicaHead{2, "sha256:" + fmt.Sprintf("%064x", 2), 2}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h := cur
		mu.Unlock()
		values := fmt.Sprintf(`{"app.k":{"v":%d}}`, h.v)
		switch r.URL.Path {
		case "/vars/batch":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"items":[{"scope":"app.k","status":"ok","generation":%d,"revision":%q,"values":%s}]}`, h.gen, h.rev, values)
		case "/vars":
			etag := `"` + h.rev + `"`
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("ETag", etag)
			fmt.Fprintf(w, `{"scope":"app.k","generation":%d,"revision":%q,"values":%s}`, h.gen, h.rev, values)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c := startClientAt(t, srv.URL, client.Options{Transport: client.TransportPoll, PollInterval: 10 * time.Millisecond}, "app.k")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v := func() int {
		val, err := c.Fetch(ctx, "app.k")
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ V int }
		if err := json.Unmarshal(val.Raw, &m); err != nil {
			t.Fatal(err)
		}
		return m.V
	}
	if got := v(); got != 2 {
		t.Fatalf("first read: v=%d", got)
	}
	set := func(h replicaHead) {
		mu.Lock()
		cur = h
		mu.Unlock()
	}
	set(replicaHead{1, "sha256:" + fmt.Sprintf("%064x", 1), 1})
	time.Sleep(100 * time.Millisecond) // ten polls
	if got := v(); got != 2 {
		t.Fatalf("an older generation replaced the held one: v=%d", got)
	}
	set(replicaHead{2, "sha256:" + fmt.Sprintf("%064x", 3), 3})
	waitFor(t, "the next publish at the held generation with another revision", func() bool { return v() == 3 })
}
