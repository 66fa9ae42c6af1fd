package redis

import "github.com/varplane/varplane"

// Hold lets an embedding cache decide which scopes the store follows
// (varplane.Holder): an invalidation for a scope the store does not hold
// and wants does not report is not read, so nothing is installed for it.
func (s *Store) Hold(wants func(varplane.Scope) bool) (release func(), err error) {
	return s.entries.Hold(wants)
}

var _ varplane.Holder = (*Store)(nil)
