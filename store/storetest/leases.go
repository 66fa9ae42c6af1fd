package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// testLeases runs the conformance cases of the lease methods: exclusion, a
// holder re-taking its own lease for the full duration, renewal, release by
// compare-and-delete, expiry, a race of many holders, the argument checks,
// and Close.
func testLeases(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Exclusive", testLeaseExclusive},
		{"RetakeGetsFullDuration", testLeaseRetake},
		{"Renew", testLeaseRenew},
		{"ReleaseComparesHolder", testLeaseRelease},
		{"Expiry", testLeaseExpiry},
		{"Race", testLeaseRace},
		{"BadArguments", testLeaseBadArguments},
		{"Closed", testLeaseClosed},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func mustAcquire(t testing.TB, s varplane.Store, name, holder string, d time.Duration) {
	t.Helper()
	if err := s.AcquireLease(context.Background(), name, holder, d); err != nil {
		t.Fatalf("AcquireLease(%s, %s): %v", name, holder, err)
	}
}

func wantHeld(t testing.TB, s varplane.Store, name, other string) {
	t.Helper()
	if err := s.AcquireLease(context.Background(), name, other, time.Minute); !errors.Is(err, varplane.ErrLeaseHeld) {
		t.Fatalf("AcquireLease(%s, %s) while another holds it = %v, want ErrLeaseHeld", name, other, err)
	}
}

func testLeaseExclusive(t *testing.T, h Harness) {
	s := open(t, h)
	mustAcquire(t, s, "pass:a", "holder-1", time.Minute)
	wantHeld(t, s, "pass:a", "holder-2")
	// Another name is another lease.
	mustAcquire(t, s, "pass:b", "holder-2", time.Minute)
	wantHeld(t, s, "pass:b", "holder-1")
}

func testLeaseRetake(t *testing.T, h Harness) {
	s := open(t, h)
	mustAcquire(t, s, "retake", "holder-1", 50*time.Millisecond)
	// Re-taking its own lease gives the holder the full new duration: long
	// after the first one would have ended, the lease is still held.
	mustAcquire(t, s, "retake", "holder-1", time.Minute)
	time.Sleep(150 * time.Millisecond)
	wantHeld(t, s, "retake", "holder-2")
}

func testLeaseRenew(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	if err := s.RenewLease(ctx, "renew", "holder-1", time.Minute); !errors.Is(err, varplane.ErrLeaseLost) {
		t.Fatalf("RenewLease of a lease nobody holds = %v, want ErrLeaseLost", err)
	}
	// Long enough that the renewal comes before the end even on a loaded
	// machine; the sleep then outlasts it.
	mustAcquire(t, s, "renew", "holder-1", 500*time.Millisecond)
	if err := s.RenewLease(ctx, "renew", "holder-2", time.Minute); !errors.Is(err, varplane.ErrLeaseLost) {
		t.Fatalf("RenewLease by another holder = %v, want ErrLeaseLost", err)
	}
	if err := s.RenewLease(ctx, "renew", "holder-1", time.Minute); err != nil {
		t.Fatalf("RenewLease by its holder: %v", err)
	}
	time.Sleep(700 * time.Millisecond)
	wantHeld(t, s, "renew", "holder-2")
}

func testLeaseRelease(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	mustAcquire(t, s, "release", "holder-1", time.Minute)
	if err := s.ReleaseLease(ctx, "release", "holder-2"); !errors.Is(err, varplane.ErrLeaseLost) {
		t.Fatalf("ReleaseLease by another holder = %v, want ErrLeaseLost", err)
	}
	wantHeld(t, s, "release", "holder-2") // the foreign release deleted nothing
	if err := s.ReleaseLease(ctx, "release", "holder-1"); err != nil {
		t.Fatalf("ReleaseLease by its holder: %v", err)
	}
	if err := s.ReleaseLease(ctx, "release", "holder-1"); !errors.Is(err, varplane.ErrLeaseLost) {
		t.Fatalf("second ReleaseLease = %v, want ErrLeaseLost", err)
	}
	mustAcquire(t, s, "release", "holder-2", time.Minute)
}

func testLeaseExpiry(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	mustAcquire(t, s, "expiry", "holder-1", 30*time.Millisecond)
	// Wait for the lease to end: another holder then takes it. The bound
	// is generous; the test asserts that it ends, not how fast.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.AcquireLease(ctx, "expiry", "holder-2", time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, varplane.ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatalf("AcquireLease after the lease's end = %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The first holder lost it: it can neither renew nor release its
	// successor's lease.
	if err := s.RenewLease(ctx, "expiry", "holder-1", time.Minute); !errors.Is(err, varplane.ErrLeaseLost) {
		t.Errorf("RenewLease by the expired holder = %v, want ErrLeaseLost", err)
	}
	if err := s.ReleaseLease(ctx, "expiry", "holder-1"); !errors.Is(err, varplane.ErrLeaseLost) {
		t.Errorf("ReleaseLease by the expired holder = %v, want ErrLeaseLost", err)
	}
	wantHeld(t, s, "expiry", "holder-1")
}

func testLeaseRace(t *testing.T, h Harness) {
	s := open(t, h)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.AcquireLease(context.Background(), "race", fmt.Sprintf("holder-%d", i), time.Minute)
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, varplane.ErrLeaseHeld):
			t.Errorf("holder-%d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d holders took one lease, want exactly 1", won)
	}
}

func testLeaseBadArguments(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	long := string(make([]byte, varplane.MaxLeaseName+1))
	for _, tc := range []struct {
		name, holder string
		d            time.Duration
	}{
		{"", "h", time.Minute},
		{"n", "", time.Minute},
		{"n n", "h", time.Minute},
		{"n", "h\n", time.Minute},
		{long, "h", time.Minute},
		{"n", "h", 0},
		{"n", "h", -time.Second},
		{"n", "h", time.Microsecond},
	} {
		if err := s.AcquireLease(ctx, tc.name, tc.holder, tc.d); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("AcquireLease(%q, %q, %v) = %v, want bad-request", tc.name, tc.holder, tc.d, err)
		}
		if err := s.RenewLease(ctx, tc.name, tc.holder, tc.d); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("RenewLease(%q, %q, %v) = %v, want bad-request", tc.name, tc.holder, tc.d, err)
		}
	}
	if err := s.ReleaseLease(ctx, "", "h"); varplane.ErrorCode(err) != varplane.CodeBadRequest {
		t.Errorf("ReleaseLease with no name = %v, want bad-request", err)
	}
	// Nothing was taken by the refused calls.
	mustAcquire(t, s, "n", "other", time.Minute)
}

func testLeaseClosed(t *testing.T, h Harness) {
	s := open(t, h)
	ctx := context.Background()
	mustAcquire(t, s, "closed", "holder-1", time.Minute)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.AcquireLease(ctx, "closed", "holder-1", time.Minute); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("AcquireLease after Close = %v, want ErrClosed", err)
	}
	if err := s.RenewLease(ctx, "closed", "holder-1", time.Minute); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("RenewLease after Close = %v, want ErrClosed", err)
	}
	if err := s.ReleaseLease(ctx, "closed", "holder-1"); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("ReleaseLease after Close = %v, want ErrClosed", err)
	}
}
