package file

import (
	"context"

	"github.com/varplane/varplane"
)

// WriteReady reports whether the store accepts writes
// (varplane.WriteReadiness): not after a write or fdatasync failed (a full
// disk, an I/O error), since which it refuses every write until it is
// reopened, a store-unavailable error naming that failure; ErrClosed after
// Close.
func (s *Store) WriteReady(context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return varplane.ErrClosed
	}
	if p := s.failed.Load(); p != nil {
		return &varplane.Error{Code: varplane.CodeStoreUnavailable,
			Message: "the file store refuses writes since a write to its log failed; restart once the disk is fixed", Err: *p}
	}
	return nil
}
