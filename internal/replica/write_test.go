package replica

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

func TestChecks(t *testing.T) {
	var closed atomic.Bool
	ro := ReadOnlyError("test", "a replica")
	if ro.Code != varplane.CodeStoreUnsupported || !strings.Contains(ro.Message, "test store is read-only (a replica)") {
		t.Fatalf("ReadOnlyError = %+v", ro)
	}
	if CheckOpen(&closed) != nil || CheckWritable(&closed, false, ro) != nil {
		t.Fatal("an open writable store refused")
	}
	if err := CheckWritable(&closed, true, ro); err != ro {
		t.Fatalf("read-only store: %v, want %v", err, ro)
	}
	closed.Store(true)
	for _, err := range []error{CheckOpen(&closed), CheckWritable(&closed, true, ro), CheckWritable(&closed, false, ro)} {
		if !errors.Is(err, varplane.ErrClosed) {
			t.Fatalf("closed store: %v, want ErrClosed", err)
		}
	}
	if CheckScope("a.b") != nil {
		t.Fatal("a valid scope refused")
	}
	for _, bad := range []varplane.Scope{"", "a..b", ".a", "a b"} {
		if CheckScope(bad) == nil {
			t.Errorf("scope %q accepted", bad)
		}
	}
}

func TestDeactivation(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	event := func() *varplane.Event {
		return &varplane.Event{Kind: varplane.EventDeactivated, Scope: "a.b", Actor: "ann", Reason: "done", Timestamp: ts,
			Cascade: []varplane.CascadeEntry{{Scope: "a.b.c", Generation: 9}}}
	}
	t.Run("refusals", func(t *testing.T) {
		ev := event()
		ev.Kind = varplane.EventActivated
		if _, _, err := Deactivation(ev, 1, nil); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("an activation: %v", err)
		}
		ev = event()
		ev.Generation = 5
		if _, _, err := Deactivation(ev, 1, nil); varplane.ErrorCode(err) != varplane.CodeBadRequest {
			t.Errorf("generation 5 after 1: %v", err)
		}
		boom := errors.New("boom")
		if _, _, err := Deactivation(event(), 1, func(*varplane.Event) error { return boom }); err != boom {
			t.Errorf("check's refusal: %v", err)
		}
	})
	t.Run("encoding", func(t *testing.T) {
		ev := event()
		var checked *varplane.Event
		head, tail, err := Deactivation(ev, 3, func(e *varplane.Event) error { checked = e; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if ev.Generation != 4 {
			t.Fatalf("generation filled in as %d, want 4", ev.Generation)
		}
		if checked == nil || checked.Cascade != nil || checked.Generation != 4 || ev.Cascade == nil {
			t.Fatalf("check saw %+v; the event keeps its cascade: %v", checked, ev.Cascade)
		}
		if strings.HasSuffix(string(head), "}") || strings.Contains(string(head), "cascade") {
			t.Fatalf("head %s: want no closing brace and no cascade", head)
		}
		var whole varplane.Event
		if err := json.Unmarshal(append(head, '}'), &whole); err != nil || whole.Generation != 4 || whole.Scope != "a.b" {
			t.Fatalf("head closed = %+v, %v", whole, err)
		}
		if !strings.HasPrefix(string(tail), ",") || strings.HasSuffix(string(tail), "}") {
			t.Fatalf("tail %s: want a leading comma and no braces", tail)
		}
		var desc struct {
			Generation int       `json:"generation"`
			Actor      string    `json:"actor"`
			Reason     string    `json:"reason"`
			Timestamp  time.Time `json:"timestamp"`
		}
		if err := json.Unmarshal([]byte(`{"generation":7`+string(tail)+`}`), &desc); err != nil {
			t.Fatalf("a descendant's event from the tail: %v", err)
		}
		if desc.Actor != "ann" || desc.Reason != varplane.CascadeReason("a.b") || !desc.Timestamp.Equal(ts) || desc.Generation != 7 {
			t.Fatalf("descendant = %+v", desc)
		}
	})
}
