package access_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
	"github.com/varplane/varplane/store/redis"
)

// TestRevokedOnAnotherReplica: two replicas on one Redis; a token revoked
// through one is refused by the other as soon as the invalidation installs
// the revoking revision there: the very next authorization after that
// commit, with no wait of its own.
func TestRevokedOnAnotherReplica(t *testing.T) {
	ctx := context.Background()
	u := redisURL(t)
	a, b := openRedis(t, u, redis.Options{}), openRedis(t, u, redis.Options{})
	svcA := access.NewService(newEngine(t, a))
	engB := newEngine(t, b)
	azB := access.NewAuthorizer(b)

	c, err := svcA.Create(ctx, "ci", access.Binding{Kinds: []varplane.Kind{varplane.KindRead}}, access.Root("t"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authorize(azB, varplane.KindRead, "x.y", c.Token); err != nil {
		t.Fatalf("replica B before the revocation: %v", err)
	}
	installed := make(chan varplane.Commit, 16)
	defer engB.OnCommit(func(cm varplane.Commit) {
		if cm.Scope == access.Scope {
			installed <- cm
		}
	})()
	res, err := svcA.Revoke(ctx, "ci", access.Root("t"), "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case cm := <-installed:
		if cm.Changes[0].Generation != res.Generation {
			t.Fatalf("B installed generation %d, want %d", cm.Changes[0].Generation, res.Generation)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replica B never heard of the revocation")
	}
	_, err = authorize(azB, varplane.KindRead, "x.y", c.Token)
	wantCode(t, "replica B after the invalidation", err, varplane.CodeForbidden)
}

// TestRevokedWithoutInvalidation: replica B's subscription is cut (its
// Redis user loses the channel, so it cannot resubscribe either) and the
// revocation's invalidation never reaches it; B still refuses the token
// within one revalidation interval, by the store's revalidation pass.
func TestRevokedWithoutInvalidation(t *testing.T) {
	ctx := context.Background()
	p := startPrivateRedis(t)
	p.do(t, "ACL", "SETUSER", "replica", "on", ">replica-pw", "~*", "&*", "+@all")
	url := "redis://" + p.addr + "/0?prefix=access"
	a := openRedis(t, url, redis.Options{})
	const interval = 100 * time.Millisecond
	b := openRedis(t, "redis://replica:replica-pw@"+p.addr+"/0?prefix=access", redis.Options{RevalidateInterval: interval})
	svcA := access.NewService(newEngine(t, a))
	azB := access.NewAuthorizer(b)
	c, err := svcA.Create(ctx, "ci", access.Binding{}, access.Root("t"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authorize(azB, varplane.KindRead, "x", c.Token); err != nil {
		t.Fatalf("replica B before the revocation: %v", err)
	}
	// Redis disconnects a subscriber whose user loses its channel, and
	// refuses its resubscription from then on.
	p.do(t, "ACL", "SETUSER", "replica", "resetchannels")
	time.Sleep(2 * interval)
	heard := b.Stats().Invalidations
	if _, err := svcA.Revoke(ctx, "ci", access.Root("t"), ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*interval+5*time.Second, "replica B to refuse the revoked token", func() bool {
		_, err := authorize(azB, varplane.KindRead, "x", c.Token)
		return varplane.ErrorCode(err) == varplane.CodeForbidden
	})
	if got := b.Stats().Invalidations; got != heard {
		t.Fatalf("B received %d invalidations after its subscription was cut: the test did not cut it", got-heard)
	}
}

// privateRedis is a redis-server of this test's own, for the test that
// reconfigures users; it never touches the shared server.
type privateRedis struct {
	addr string
	cmd  *exec.Cmd
}

func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("VARPLANE_REQUIRE_SERVICES") != "" {
			t.Fatal("redis-server is required and not installed")
		}
		t.Skip("redis-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir := t.TempDir()
	p := &privateRedis{addr: "127.0.0.1:" + strconv.Itoa(port)}
	p.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	})
	eventually(t, 5*time.Second, "the private redis to listen", func() bool {
		c, err := net.DialTimeout("tcp", p.addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return p
}

// do runs one command on the private server as the default user.
func (p *privateRedis) do(t *testing.T, args ...string) {
	t.Helper()
	c := rawRedis(t, "redis://"+p.addr+"/0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Arbitrary(args...).Build()).Error(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}
