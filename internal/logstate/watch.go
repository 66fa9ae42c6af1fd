package logstate

import (
	"sync"
	"sync/atomic"

	"github.com/varplane/varplane"
)

// Watchers is a registry of commit callbacks for a store's Watch. Add and
// the cancel functions are safe for concurrent use; Notify is called by the
// store's single writer, in commit order, and reads the registry without a
// lock.
type Watchers struct {
	mu   sync.Mutex
	next uint64
	fns  atomic.Pointer[[]watcher]
}

type watcher struct {
	id uint64
	fn func(varplane.Commit)
}

// Add registers fn and returns the function that unregisters it; calling the
// cancel function more than once is harmless. A commit being notified while
// fn is cancelled may still reach fn once.
func (ws *Watchers) Add(fn func(varplane.Commit)) (cancel func()) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.next++
	id := ws.next
	var cur []watcher
	if p := ws.fns.Load(); p != nil {
		cur = *p
	}
	next := append(append(make([]watcher, 0, len(cur)+1), cur...), watcher{id: id, fn: fn})
	ws.fns.Store(&next)
	return func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		p := ws.fns.Load()
		if p == nil {
			return
		}
		out := make([]watcher, 0, len(*p))
		for _, w := range *p {
			if w.id != id {
				out = append(out, w)
			}
		}
		ws.fns.Store(&out)
	}
}

// Notify calls every registered function with each commit, in order.
func (ws *Watchers) Notify(commits []varplane.Commit) {
	if len(commits) == 0 {
		return
	}
	p := ws.fns.Load()
	if p == nil {
		return
	}
	for _, c := range commits {
		for _, w := range *p {
			w.fn(c)
		}
	}
}
