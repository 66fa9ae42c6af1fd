package replica

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/varplane/varplane"
)

func TestParseInvalidation(t *testing.T) {
	// payload → what it parses to; nil: malformed.
	want := map[string]*Invalidation{
		"activated\n3 2 a.b":                   {Kind: "activated", Lines: []Line{{"3", "2", "a.b"}}},
		"deactivated\n5 4 a\n2 7 a.b\n9 1 a.c": {Kind: "deactivated", Lines: []Line{{"5", "4", "a"}, {"2", "7", "a.b"}, {"9", "1", "a.c"}}},
		"deactivated\n*":                       {Kind: "deactivated", All: true},
		"deactivated\n5 4 a\n*":                {Kind: "deactivated", All: true},
		"activated":                            {Kind: "activated"},
		"activated\n3 2 a b c":                 {Kind: "activated", Lines: []Line{{"3", "2", "a b c"}}},
		"":                                     {},
		"activated\n":                          nil,
		"activated\n3 2":                       nil,
		"activated\n3 2 a\n\n":                 nil,
		"activated\n3":                         nil,
	}
	for payload, w := range want {
		got, ok := ParseInvalidation(payload)
		if ok != (w != nil) || (ok && !reflect.DeepEqual(got, *w)) {
			t.Errorf("ParseInvalidation(%q) = %+v, %v; want %+v", payload, got, ok, w)
		}
	}
}

func FuzzParseInvalidation(f *testing.F) {
	for _, s := range []string{"activated\n3 2 a.b", "deactivated\n*", "x\n1 2 a\n3 4 b", "\n\n", "a\n1  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		inv, ok := ParseInvalidation(payload)
		if !ok {
			return
		}
		if inv.All && len(inv.Lines) != 0 {
			t.Fatalf("All with lines: %+v", inv)
		}
		if !strings.HasPrefix(payload, string(inv.Kind)) {
			t.Fatalf("kind %q is not the payload's first line", inv.Kind)
		}
		for _, l := range inv.Lines {
			if strings.Contains(l.Version, " ") || strings.Contains(l.Generation, " ") || strings.ContainsRune(string(l.Scope), '\n') {
				t.Fatalf("line %+v not split on its first two spaces", l)
			}
			if !strings.Contains(payload, l.Version+" "+l.Generation+" "+string(l.Scope)) {
				t.Fatalf("line %+v not in the payload", l)
			}
		}
	})
}

func kicked(f *Follower) bool {
	select {
	case <-f.kick:
		return true
	default:
		return false
	}
}

func TestHandle(t *testing.T) {
	inv := Invalidation{Kind: "activated", Lines: []Line{{"1", "1", "a"}, {"2", "2", "b"}, {"3", "3", "c"}}}
	held := map[varplane.Scope]bool{"b": true}
	current := func(i int, l Line) bool {
		if inv.Lines[i] != l {
			t.Fatalf("line %d: %+v, want %+v", i, l, inv.Lines[i])
		}
		return held[l.Scope]
	}
	t.Run("reads the stale scopes in one call", func(t *testing.T) {
		f := NewFollower(1)
		var calls [][]varplane.Scope
		read, err := f.Handle(context.Background(), inv, current, func(_ context.Context, k varplane.EventKind, sc ...varplane.Scope) error {
			if k != "activated" {
				t.Errorf("kind %q", k)
			}
			calls = append(calls, sc)
			return nil
		})
		if err != nil || !reflect.DeepEqual(read, []varplane.Scope{"a", "c"}) || len(calls) != 1 {
			t.Fatalf("read %v, %v, calls %v", read, err, calls)
		}
		if kicked(f) || len(f.TakePending()) != 0 {
			t.Fatal("a successful read asked for a pass or left scopes pending")
		}
	})
	t.Run("a failed read is pending for the next pass", func(t *testing.T) {
		f := NewFollower(1)
		read, err := f.Handle(context.Background(), inv, current, func(context.Context, varplane.EventKind, ...varplane.Scope) error { return errors.New("down") })
		if err == nil || len(read) != 2 {
			t.Fatalf("read %v, %v", read, err)
		}
		if !kicked(f) {
			t.Fatal("no pass asked for")
		}
		if p := f.TakePending(); len(p) != 2 {
			t.Fatalf("pending %v, want a and c", p)
		}
		if len(f.TakePending()) != 0 {
			t.Fatal("TakePending did not forget")
		}
	})
	t.Run("nothing stale reads nothing", func(t *testing.T) {
		f := NewFollower(1)
		only := func(_ int, l Line) bool { return held[l.Scope] }
		read, err := f.Handle(context.Background(), Invalidation{Kind: "activated", Lines: []Line{{"2", "2", "b"}}}, only, func(context.Context, varplane.EventKind, ...varplane.Scope) error {
			t.Fatal("read called")
			return nil
		})
		if read != nil || err != nil {
			t.Fatalf("read %v, %v", read, err)
		}
	})
	t.Run("everything asks for a pass", func(t *testing.T) {
		f := NewFollower(1)
		read, err := f.Handle(context.Background(), Invalidation{Kind: "deactivated", All: true}, current, func(context.Context, varplane.EventKind, ...varplane.Scope) error {
			t.Fatal("read called")
			return nil
		})
		if read != nil || err != nil || !kicked(f) {
			t.Fatalf("read %v, %v, kicked %v", read, err, false)
		}
	})
}

func TestOfferServe(t *testing.T) {
	f := NewFollower(2)
	if !f.Offer("1") || !f.Offer("2") {
		t.Fatal("offer refused below the queue size")
	}
	if kicked(f) {
		t.Fatal("a pass was asked for before the queue was full")
	}
	if f.Offer("3") {
		t.Fatal("offer accepted on a full queue")
	}
	if !kicked(f) {
		t.Fatal("a dropped payload asked for no pass")
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 3)
	done := make(chan struct{})
	go func() {
		f.Serve(ctx, func(p string) { got <- p })
		close(done)
	}()
	for _, want := range []string{"1", "2"} {
		if p := <-got; p != want {
			t.Fatalf("served %q, want %q (queue order)", p, want)
		}
	}
	cancel()
	<-done
}

func TestRevalidateLoop(t *testing.T) {
	f := NewFollower(1)
	ctx, cancel := context.WithCancel(context.Background())
	var passes atomic.Int32
	ran := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		f.RevalidateLoop(ctx, time.Hour, func() { passes.Add(1); ran <- struct{}{} })
		close(done)
	}()
	f.AskPass()
	f.AskPass() // coalesced with the first while it is pending
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("asked pass did not run")
	}
	cancel()
	<-done
	if n := passes.Load(); n < 1 || n > 2 {
		t.Fatalf("%d passes for two asks, want 1 or 2", n)
	}
}

func TestRetryPending(t *testing.T) {
	f := NewFollower(1)
	f.Remember("a", "b", "c")
	if kicked(f) {
		t.Fatal("Remember asked for a pass")
	}
	var read []varplane.Scope
	f.RetryPending(func(sc varplane.Scope) error {
		read = append(read, sc)
		if sc == "b" {
			return errors.New("down")
		}
		return nil
	})
	if len(read) != 3 {
		t.Fatalf("read %v, want a, b and c", read)
	}
	if p := f.TakePending(); len(p) != 1 {
		t.Fatalf("pending after retry %v, want b alone", p)
	} else if _, ok := p["b"]; !ok {
		t.Fatalf("pending after retry %v, want b", p)
	}
}
