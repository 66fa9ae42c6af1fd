package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

// testBeats runs the heartbeat and report contract on a store that
// implements it (and skips one that does not): a write replaces the
// instance's previous value, a deleted status is gone (and only it, until
// it is written again), values come back byte for byte under the id they
// were filed under, reports are kept per window, a window id with a
// brace is refused, concurrent writers lose nothing, and a closed store
// answers ErrClosed. Expiry runs on the store's clock (minutes and days),
// so each store's own tests cover it.
func testBeats(t *testing.T, h Harness) {
	s := open(t, h)
	if _, ok := s.(varplane.HeartbeatStore); !ok {
		t.Skipf("the %s store keeps no instance heartbeats", s.Name())
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"StatusReplaces", testBeatStatus},
		{"StatusDelete", testBeatStatusDelete},
		{"StatusPage", testBeatStatusPage},
		{"ReportsPerWindow", testBeatReports},
		{"BadWindow", testBeatBadWindow},
		{"Concurrent", testBeatConcurrent},
		{"Closed", testBeatClosed},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openBeats(t *testing.T, h Harness) (varplane.Store, varplane.HeartbeatStore) {
	t.Helper()
	s := open(t, h)
	return s, s.(varplane.HeartbeatStore)
}

func wantValues(t *testing.T, what string, got map[string][]byte, err error, want map[string]string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
	for id, v := range want {
		if string(got[id]) != v {
			t.Fatalf("%s[%s] = %q, want %q (all: %q)", what, id, got[id], v, got)
		}
	}
}

func testBeatStatus(t *testing.T, h Harness) {
	_, b := openBeats(t, h)
	ctx := context.Background()
	got, err := b.InstanceStatuses(ctx)
	wantValues(t, "statuses of a fresh store", got, err, map[string]string{})
	for _, id := range []string{"pod-a", "pod-b"} {
		if err := b.ListInstance(ctx, id, time.Now()); err != nil {
			t.Fatalf("ListInstance(%s): %v", id, err)
		}
	}
	must(t, b.WriteStatus(ctx, "pod-a", []byte(`{"instance":"pod-a","n":1}`)))
	must(t, b.WriteStatus(ctx, "pod-b", []byte(`{"instance":"pod-b"}`)))
	must(t, b.WriteStatus(ctx, "pod-a", []byte(`{"instance":"pod-a","n":2}`)))
	got, err = b.InstanceStatuses(ctx)
	wantValues(t, "statuses", got, err, map[string]string{"pod-a": `{"instance":"pod-a","n":2}`, "pod-b": `{"instance":"pod-b"}`})
	// What is answered is a copy: changing it changes nothing stored.
	got["pod-a"][0] = 'X'
	got, err = b.InstanceStatuses(ctx)
	wantValues(t, "statuses after the caller changed its copy", got, err, map[string]string{"pod-a": `{"instance":"pod-a","n":2}`, "pod-b": `{"instance":"pod-b"}`})
}

func testBeatStatusDelete(t *testing.T, h Harness) {
	_, b := openBeats(t, h)
	ctx := context.Background()
	for _, id := range []string{"pod-a", "pod-b", "pod-a:1"} {
		must(t, b.ListInstance(ctx, id, time.Now()))
		must(t, b.WriteStatus(ctx, id, []byte(`{"instance":"`+id+`"}`)))
	}
	must(t, b.DeleteStatus(ctx, "pod-a"))
	WantHeldStatuses(t, b, map[string][]byte{"pod-b": []byte(`{"instance":"pod-b"}`), "pod-a:1": []byte(`{"instance":"pod-a:1"}`)})
	// Deleting a status that is not there is no error.
	must(t, b.DeleteStatus(ctx, "pod-a"))
	must(t, b.DeleteStatus(ctx, "pod-never"))
	// A deleted instance that writes again is back (still listed).
	must(t, b.WriteStatus(ctx, "pod-a", []byte(`{"instance":"pod-a","n":2}`)))
	WantHeldStatuses(t, b, map[string][]byte{"pod-a": []byte(`{"instance":"pod-a","n":2}`), "pod-b": []byte(`{"instance":"pod-b"}`), "pod-a:1": []byte(`{"instance":"pod-a:1"}`)})
	must(t, b.DeleteStatus(ctx, "pod-b"))
	must(t, b.DeleteStatus(ctx, "pod-a:1"))
	WantHeldStatuses(t, b, map[string][]byte{"pod-a": []byte(`{"instance":"pod-a","n":2}`)})
}

func testBeatReports(t *testing.T, h Harness) {
	_, b := openBeats(t, h)
	ctx := context.Background()
	got, err := b.CanaryReports(ctx, "c1-2")
	wantValues(t, "reports of a window nobody reported on", got, err, map[string]string{})
	must(t, b.WriteCanaryReport(ctx, "c1-2", "pod-a", []byte(`{"decoded":1}`)))
	must(t, b.WriteCanaryReport(ctx, "c1-2", "pod-b", []byte(`{"decoded":1}`)))
	must(t, b.WriteCanaryReport(ctx, "c9-4", "pod-a", []byte(`{"other":true}`)))
	// A later write replaces the instance's report: it is cumulative.
	must(t, b.WriteCanaryReport(ctx, "c1-2", "pod-a", []byte(`{"decoded":2}`)))
	got, err = b.CanaryReports(ctx, "c1-2")
	wantValues(t, "reports of c1-2", got, err, map[string]string{"pod-a": `{"decoded":2}`, "pod-b": `{"decoded":1}`})
	got, err = b.CanaryReports(ctx, "c9-4")
	wantValues(t, "reports of c9-4", got, err, map[string]string{"pod-a": `{"other":true}`})
	// A report filed under one id and naming another is stored as is: the
	// reader judges it (control.Evaluate).
	must(t, b.WriteCanaryReport(ctx, "c9-4", "pod-c", []byte(`{"instance":"pod-a"}`)))
	got, err = b.CanaryReports(ctx, "c9-4")
	wantValues(t, "reports of c9-4 with a forged one", got, err, map[string]string{"pod-a": `{"other":true}`, "pod-c": `{"instance":"pod-a"}`})
}

func testBeatBadWindow(t *testing.T, h Harness) {
	_, b := openBeats(t, h)
	ctx := context.Background()
	for _, w := range []string{"", "a{b", "a}b"} {
		if err := b.WriteCanaryReport(ctx, w, "pod-a", []byte(`{}`)); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("WriteCanaryReport(window %q) = %v, want bad-request", w, err)
		}
		if _, err := b.CanaryReports(ctx, w); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("CanaryReports(window %q) = %v, want bad-request", w, err)
		}
	}
}

func testBeatConcurrent(t *testing.T, h Harness) {
	_, b := openBeats(t, h)
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("pod-%02d", i)
			errs <- b.ListInstance(ctx, id, time.Now())
			errs <- b.WriteStatus(ctx, id, []byte(id))
			errs <- b.WriteCanaryReport(ctx, "w-1", id, []byte(id))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	want := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("pod-%02d", i)
		want[id] = id
	}
	got, err := b.CanaryReports(ctx, "w-1")
	wantValues(t, "reports written concurrently", got, err, want)
	got, err = b.InstanceStatuses(ctx)
	wantValues(t, "statuses written concurrently", got, err, want)
}

func testBeatClosed(t *testing.T, h Harness) {
	s, b := openBeats(t, h)
	_ = s.Close()
	ctx := context.Background()
	if err := b.WriteStatus(ctx, "pod-a", []byte(`{}`)); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("WriteStatus after Close = %v, want ErrClosed", err)
	}
	if _, err := b.InstanceStatuses(ctx); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("InstanceStatuses after Close = %v, want ErrClosed", err)
	}
	if err := b.DeleteStatus(ctx, "pod-a"); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("DeleteStatus after Close = %v, want ErrClosed", err)
	}
	if err := b.WriteCanaryReport(ctx, "w-1", "pod-a", []byte(`{}`)); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("WriteCanaryReport after Close = %v, want ErrClosed", err)
	}
	if _, err := b.CanaryReports(ctx, "w-1"); !errors.Is(err, varplane.ErrClosed) {
		t.Errorf("CanaryReports after Close = %v, want ErrClosed", err)
	}
}

// StatusWrittenAt is the JSON of a status of instance id written at at, as
// a store's own expiry test writes one with an old writtenAt.
func StatusWrittenAt(id string, at time.Time) []byte {
	b, _ := json.Marshal(varplane.InstanceStatus{Instance: id, WrittenAt: at, Documents: []varplane.InstanceDocument{}})
	return b
}

// WantHeldStatuses fails t unless r answers exactly the statuses want (by
// instance id, byte for byte) through InstanceStatuses and, when it pages
// (varplane.StatusPager), through one page of them.
func WantHeldStatuses(t testing.TB, r varplane.StatusReader, want map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	got, err := r.InstanceStatuses(ctx)
	if err != nil || len(got) != len(want) {
		t.Fatalf("statuses = %q, %v; want %q", got, err, want)
	}
	for id, v := range want {
		if string(got[id]) != string(v) {
			t.Fatalf("status of %s = %q, want %q", id, got[id], v)
		}
	}
	p, ok := r.(varplane.StatusPager)
	if !ok {
		return
	}
	page, _, err := p.InstanceStatusPage(ctx, "", varplane.MaxStatusPage)
	if err != nil || len(page) != len(want) {
		t.Fatalf("status page = %+v, %v; want %d statuses", page, err, len(want))
	}
	for _, v := range page {
		if string(want[v.ID]) != string(v.Value) {
			t.Fatalf("status page: %s = %q, want %q", v.ID, v.Value, want[v.ID])
		}
	}
}
