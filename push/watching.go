package push

import "github.com/varplane/varplane"

// Watching reports whether a live subscription selects scope. A read
// replica's cache follows such a scope's commits though it does not hold
// it (instance.Cache.Follow), so that its streams miss none of them.
func (h *Hub) Watching(scope varplane.Scope) bool {
	for _, s := range *h.subs.Load() {
		if s.m.match(scope) {
			return true
		}
	}
	return false
}
