package postgres

import "github.com/varplane/varplane"

// Forget drops scope's installed head from memory (varplane.Forgetter), so
// that an embedding cache (package instance) that bounds what it holds
// bounds the store's copy too. The next read of scope reads the server
// again.
func (s *Store) Forget(scope varplane.Scope) {
	s.mu.Lock()
	s.entries.Delete(scope)
	s.mu.Unlock()
}

// Hold lets an embedding cache decide which scopes the store follows
// (varplane.Holder): a notification for a scope the store does not hold
// and wants does not report is not read, so nothing is installed for it.
func (s *Store) Hold(wants func(varplane.Scope) bool) (release func(), err error) {
	return s.entries.Hold(wants)
}

var _ varplane.Holder = (*Store)(nil)
