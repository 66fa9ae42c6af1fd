package replica

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/varplane/varplane"
)

// Follower is a store's machinery for following the server: a queue of
// invalidation payloads handled one at a time in the order they arrived,
// the scopes whose invalidation could not be read (retried by the next
// pass), and the request for a revalidation pass.
type Follower struct {
	msgs chan string
	kick chan struct{}

	mu      sync.Mutex
	pending map[varplane.Scope]struct{}
}

// NewFollower returns a follower whose queue holds up to queue payloads.
func NewFollower(queue int) *Follower {
	return &Follower{msgs: make(chan string, queue), kick: make(chan struct{}, 1)}
}

// Offer queues an invalidation payload without blocking. On a full queue it
// drops the payload, asks for a revalidation pass (which catches what the
// payload announced) and returns false.
func (f *Follower) Offer(payload string) bool {
	select {
	case f.msgs <- payload:
		return true
	default:
		f.AskPass()
		return false
	}
}

// Serve calls handle with each queued payload, in queue order, until ctx
// ends.
func (f *Follower) Serve(ctx context.Context, handle func(payload string)) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-f.msgs:
			handle(m)
		}
	}
}

// AskPass requests a revalidation pass without blocking.
func (f *Follower) AskPass() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Remember adds scopes to those the next pass reads even if they are not
// installed, without asking for that pass.
func (f *Follower) Remember(scopes ...varplane.Scope) {
	f.mu.Lock()
	if f.pending == nil {
		f.pending = map[varplane.Scope]struct{}{}
	}
	for _, sc := range scopes {
		f.pending[sc] = struct{}{}
	}
	f.mu.Unlock()
}

// AddPending remembers scopes whose invalidation could not be read and asks
// for a pass.
func (f *Follower) AddPending(scopes ...varplane.Scope) {
	f.Remember(scopes...)
	f.AskPass()
}

// TakePending returns the remembered scopes and forgets them.
func (f *Follower) TakePending() map[varplane.Scope]struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pending
	f.pending = nil
	return p
}

// RevalidateLoop runs pass once per interval, or sooner when a pass was
// asked for, never two at once (a pass that outlasts the interval is
// followed by the next one right away, not by one in parallel), until ctx
// ends.
func (f *Follower) RevalidateLoop(ctx context.Context, interval time.Duration, pass func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-f.kick:
		case <-ctx.Done():
			return
		}
		pass()
	}
}

// RetryPending reads each remembered scope with read; a scope whose read
// fails is remembered again for the pass after.
func (f *Follower) RetryPending(read func(varplane.Scope) error) {
	for sc := range f.TakePending() {
		if err := read(sc); err != nil {
			f.Remember(sc)
		}
	}
}

// Line is one scope of an invalidation payload: the head's version and
// generation as the server announced them (in the store's own notation)
// and the scope.
type Line struct {
	Version, Generation string
	Scope               varplane.Scope
}

// Invalidation is a parsed payload "<kind>\n<version> <generation> <scope>"
// with one line per scope the commit changed, or "<kind>\n*" (All):
// revalidate everything.
type Invalidation struct {
	Kind  varplane.EventKind
	Lines []Line
	All   bool
}

// ParseInvalidation parses a payload; ok is false for a malformed one.
func ParseInvalidation(payload string) (inv Invalidation, ok bool) {
	kind, rest, more := strings.Cut(payload, "\n")
	inv.Kind = varplane.EventKind(kind)
	if !more {
		return inv, true // no scope
	}
	for l := range strings.SplitSeq(rest, "\n") {
		if l == "*" {
			return Invalidation{Kind: inv.Kind, All: true}, true
		}
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 {
			return Invalidation{}, false
		}
		inv.Lines = append(inv.Lines, Line{Version: f[0], Generation: f[1], Scope: varplane.Scope(f[2])})
	}
	return inv, true
}

// Handle acts on an invalidation: it reads with read, in one call, every
// scope whose installed head current does not confirm (an own commit's
// echo is skipped), and remembers them for the next pass when that read
// fails. A payload for everything asks for a pass. current is called with
// each line and its index in inv.Lines. It returns the scopes read and the
// read's error.
func (f *Follower) Handle(ctx context.Context, inv Invalidation, current func(i int, l Line) bool,
	read func(context.Context, varplane.EventKind, ...varplane.Scope) error) ([]varplane.Scope, error) {
	if inv.All {
		f.AskPass()
		return nil, nil
	}
	var stale []varplane.Scope
	for i, l := range inv.Lines {
		if !current(i, l) {
			stale = append(stale, l.Scope)
		}
	}
	if len(stale) == 0 {
		return nil, nil
	}
	err := read(ctx, inv.Kind, stale...)
	if err != nil {
		f.AddPending(stale...)
	}
	return stale, err
}
