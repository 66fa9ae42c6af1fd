package redis

import (
	"context"
	"strings"
	"testing"
)

// reportRules are what docs/instances.md adds to an instance's heartbeat
// rules so that instance pod-a writes its own canary reports.
const reportRules = " ~varplane:report:{*}:pod-a ~varplane:reports:{*} +pexpire"

// TestACLReports: with docs/instances.md's rules an instance's own user
// writes its canary report, and not one filed under another instance.
func TestACLReports(t *testing.T) {
	p := startPrivateRedis(t)
	admin := rawClient(t, p.url(""))
	ctx := context.Background()
	line := strings.Replace(aclLines[1], "varplane-reader", "varplane-pod-a", 1) + heartbeatRules + reportRules
	if err := admin.Do(ctx, admin.B().Arbitrary(strings.Fields(line)...).Build()).Error(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	pod := openStore(t, p.url("varplane-pod-a:reader-pw"), Options{ReadOnly: true})
	if err := pod.WriteCanaryReport(ctx, "ch-1-2", "pod-a", []byte(`{"instance":"pod-a"}`)); err != nil {
		t.Fatalf("pod-a's own report: %v", err)
	}
	if err := pod.WriteCanaryReport(ctx, "ch-1-2", "pod-b", []byte(`{}`)); err == nil {
		t.Fatal("pod-a wrote a report filed under pod-b")
	}
	got, err := openStore(t, p.url(""), Options{}).CanaryReports(ctx, "ch-1-2")
	if err != nil || len(got) != 1 || string(got["pod-a"]) != `{"instance":"pod-a"}` {
		t.Fatalf("reports = %q, %v", got, err)
	}
}
