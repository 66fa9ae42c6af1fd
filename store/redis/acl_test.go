package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

// The ACL users of docs/redis.md, for the default prefix. The test runs
// these exact lines (with test passwords) against a private server.
var aclLines = []string{
	"ACL SETUSER varplane-control on >control-pw resetkeys resetchannels ~varplane:* &varplane:inv -@all +@read +@write +@scripting +@connection +@pubsub -@dangerous +info",
	"ACL SETUSER varplane-reader on >reader-pw resetkeys resetchannels %R~varplane:* &varplane:inv -@all +hello +auth +ping +client|setname +select +info +evalsha_ro +eval_ro +get +hget +hmget +lrange +zrange +smembers +subscribe +unsubscribe",
}

func TestACLUsers(t *testing.T) {
	p := startPrivateRedis(t)
	admin := rawClient(t, p.url(""))
	ctx := context.Background()
	for _, line := range aclLines {
		if err := admin.Do(ctx, admin.B().Arbitrary(strings.Fields(line)...).Build()).Error(); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	opts := Options{RevalidateInterval: 200 * time.Millisecond}
	ctl := openStore(t, p.url("varplane-control:control-pw"), opts)
	ro := opts
	ro.ReadOnly = true
	reader := openStore(t, p.url("varplane-reader:reader-pw"), ro)
	if ok, detail := reader.EvictionPolicyOK(); !ok {
		t.Errorf("reader eviction check = %v %q, want readable noeviction", ok, detail)
	}
	rw := watchChan(t, reader)

	// Writes by the control plane reach the reader by invalidation.
	rev := create(t, ctl, "acl.k", 1)
	activate(t, ctl, "acl.k", rev, 0)
	if c := nextCommit(t, rw, 5*time.Second); c.Changes[0].Head == nil || c.Changes[0].Head.Revision != rev {
		t.Fatalf("reader got %+v", c)
	}
	// Every read the reader does works with its user.
	if st := state(t, reader, "acl.k"); st.Generation != 1 {
		t.Fatalf("reader state = %+v", st)
	}
	if _, err := reader.History(ctx, "acl.k"); err != nil {
		t.Errorf("reader History: %v", err)
	}
	if _, err := reader.Scopes(ctx); err != nil {
		t.Errorf("reader Scopes: %v", err)
	}
	if _, err := reader.Revision(ctx, "acl.k", create(t, ctl, "acl.k", 2)); err != nil {
		t.Errorf("reader Revision: %v", err)
	}
	// Revalidation with the reader's user: a pass confirms the head.
	before := reader.Stats().Confirmations
	eventually(t, 3*time.Second, "a revalidation pass to confirm", func() bool { return reader.Stats().Confirmations > before })
	if st := reader.Stats(); st.ConfirmErrors != 0 {
		t.Errorf("reader revalidation errors: %d", st.ConfirmErrors)
	}

	// The read-only store refuses mutations itself.
	err := reader.Append(ctx, storetest.CreatedEvent("acl.k", storetest.Doc(3)), 0)
	if varplane.ErrorCode(err) != varplane.CodeStoreUnsupported {
		t.Fatalf("read-only Append = %v, want store-unsupported", err)
	}
	// And Redis refuses writes by the reader's user, script or plain.
	rc, err := rueidis.NewClient(mustOpt(t, p.url("varplane-reader:reader-pw")))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	writes := []rueidis.Completed{
		rc.B().Set().Key("varplane:x").Value("1").Build(),
		rc.B().Hset().Key(ctl.keys.head("acl.k")).FieldValue().FieldValue("g", "9").Build(),
		rc.B().Eval().Script("return redis.call('SET', KEYS[1], '1')").Numkeys(1).Key("varplane:x").Build(),
		rc.B().EvalRo().Script("return redis.call('SET', KEYS[1], '1')").Numkeys(1).Key("varplane:x").Build(),
		rc.B().Publish().Channel("varplane:inv").Message("activated\n1 1 acl.k").Build(),
		rc.B().Get().Key("other:x").Build(),
	}
	for _, w := range writes {
		if err := rc.Do(ctx, w).Error(); err == nil {
			t.Errorf("%v by the reader succeeded, want a refusal", w.Commands())
		}
	}
	if st := state(t, ctl, "acl.k"); st.Generation != 1 {
		t.Errorf("state after refused writes = %+v", st)
	}
}

// TestEvictionCheckDenied: a user that may not run INFO or CONFIG (a managed
// Redis) fails Open under "fail" and opens under "warn", reporting the policy
// as unknown.
func TestEvictionCheckDenied(t *testing.T) {
	p := startPrivateRedis(t)
	admin := rawClient(t, p.url(""))
	ctx := context.Background()
	line := strings.Replace(aclLines[1], "varplane-reader", "varplane-noinfo", 1)
	line = strings.Replace(line, " +info", "", 1)
	if err := admin.Do(ctx, admin.B().Arbitrary(strings.Fields(line)...).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	u := p.url("varplane-noinfo:reader-pw")
	if _, err := Open(ctx, u, Options{ReadOnly: true}); varplane.ErrorCode(err) != varplane.CodeStoreUnavailable {
		t.Fatalf("Open without INFO under fail = %v, want store-unavailable", err)
	}
	s := openStore(t, u, Options{ReadOnly: true, EvictionCheck: EvictionCheckWarn})
	if ok, detail := s.EvictionPolicyOK(); !ok || !strings.HasPrefix(detail, "unknown") {
		t.Fatalf("EvictionPolicyOK = %v %q, want true, unknown", ok, detail)
	}
}

// heartbeatRules are what docs/instances.md adds to the reader's ACL line so
// that instance pod-a can write its status heartbeat, and only its own.
const heartbeatRules = " ~varplane:status:pod-a ~varplane:instances +set +evalsha +eval +hgetall +hdel +hset"

// TestACLHeartbeat: the reader of docs/redis.md cannot write a heartbeat;
// with docs/instances.md's rules it writes its own status and the instance
// list, and still not another instance's status or any document key.
func TestACLHeartbeat(t *testing.T) {
	p := startPrivateRedis(t)
	admin := rawClient(t, p.url(""))
	ctx := context.Background()
	line := strings.Replace(aclLines[1], "varplane-reader", "varplane-pod-a", 1) + heartbeatRules
	for _, l := range []string{aclLines[1], line} {
		if err := admin.Do(ctx, admin.B().Arbitrary(strings.Fields(l)...).Build()).Error(); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
	}
	plain := openStore(t, p.url("varplane-reader:reader-pw"), Options{ReadOnly: true})
	if err := plain.WriteStatus(ctx, "pod-a", []byte(`{}`)); err == nil {
		t.Fatal("the plain reader wrote a status")
	}
	pod := openStore(t, p.url("varplane-pod-a:reader-pw"), Options{ReadOnly: true})
	if err := pod.WriteStatus(ctx, "pod-a", []byte(`{"instance":"pod-a"}`)); err != nil {
		t.Fatalf("pod-a's own status: %v", err)
	}
	if err := pod.ListInstance(ctx, "pod-a", time.Now()); err != nil {
		t.Fatalf("pod-a listing itself: %v", err)
	}
	if err := pod.WriteStatus(ctx, "pod-b", []byte(`{}`)); err == nil {
		t.Fatal("pod-a wrote pod-b's status")
	}
	rc, err := rueidis.NewClient(mustOpt(t, p.url("varplane-pod-a:reader-pw")))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := rc.Do(ctx, rc.B().Set().Key(pod.keys.head("acl.k")).Value("x").Build()).Error(); err == nil {
		t.Fatal("pod-a wrote a head")
	}
	// The control plane reads them (its user covers every key under the
	// prefix).
	got, err := openStore(t, p.url(""), Options{}).InstanceStatuses(ctx)
	if err != nil || string(got["pod-a"]) != `{"instance":"pod-a"}` {
		t.Fatalf("statuses = %q, %v", got, err)
	}
}
