package control_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/varplane/varplane/instance"
)

// TestIngestOnRedis: a consumer's status and report filed over HTTP land
// in Redis where the instance caches' do (the status listed, so the
// control plane reads it), under the id the route checked.
func TestIngestOnRedis(t *testing.T) {
	e := redisEnv(t, redisPrefix(t))
	e.publish("app.flags", `{"a":1}`)
	c := e.propose("alice", "app.flags", 1, `{"a":2}`)
	st, body, c := e.act("alice", c.ID, "canary", map[string]any{"duration": "10m", "minInstances": 1})
	want(t, "open a window", st, body, 200, "")
	s, b := e.do("PUT", "/v1/control/instances/reader:pod-1/status", "reader", status("app.flags"), nil)
	want(t, "file a status", s, b, http.StatusNoContent, "")
	s, b = e.do("PUT", "/v1/control/windows/"+c.Canary.ID+"/reports/reader:pod-1", "reader",
		instance.Report{Window: c.Canary.ID, Instance: "reader:pod-1", Decoded: 1}, nil)
	want(t, "file a report", s, b, http.StatusNoContent, "")
	list, err := e.svc.Propagation(context.Background(), "app.flags", 1)
	if err != nil || list.Live != 1 || list.Installed != 1 {
		t.Fatalf("propagation after one status over HTTP = %+v, %v; want 1 of 1", list, err)
	}
	reps := reports(t, e, c.Canary.ID)
	var r instance.Report
	if err := json.Unmarshal(reps["reader:pod-1"], &r); err != nil || r.Decoded != 1 || len(reps) != 1 {
		t.Fatalf("reports on Redis = %q, %v", reps, err)
	}
}
