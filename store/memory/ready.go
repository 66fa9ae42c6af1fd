package memory

import (
	"context"

	"github.com/varplane/varplane"
)

// WriteReady reports that the store accepts writes, which it does until
// Close (varplane.WriteReadiness); ErrClosed after.
func (s *Store) WriteReady(context.Context) error {
	if s.IsShut() {
		return varplane.ErrClosed
	}
	return nil
}
