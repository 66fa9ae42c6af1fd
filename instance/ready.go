package instance

import (
	"context"

	"github.com/varplane/varplane"
)

// Ready reports whether the read replica may serve (varplane.Readier): not
// until its root document is installed (not-ready).
func (s *Store) Ready(context.Context) error { return s.cache.Ready() }

// ReadyDetails are the details of the store underneath (the store of
// record the replica reads), when it has any (varplane.ReadyDetailer); nil
// otherwise.
func (s *Store) ReadyDetails() any {
	if d, ok := s.Store.(varplane.ReadyDetailer); ok {
		return d.ReadyDetails()
	}
	return nil
}

// The capabilities the wrapper adds to the store it wraps; the others are
// found through Unwrap (varplane.StoreAs).
var (
	_ varplane.Readier         = (*Store)(nil)
	_ varplane.ReadyDetailer   = (*Store)(nil)
	_ varplane.Unwrapper       = (*Store)(nil)
	_ varplane.Snapshotter     = (*Store)(nil)
	_ varplane.HeadSnapshotter = (*Store)(nil)
)
