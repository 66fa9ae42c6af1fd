package control

import (
	"context"

	"github.com/varplane/varplane"
)

// RevisionsInUse returns, by scope, the revisions the open changes rest on:
// each open change's candidate and the revision its base generation
// activated. Retention keeps them (retention.Options.InUse); an error means
// the open changes could not be read, and a reclamation pass then reclaims
// nothing.
func (svc *Service) RevisionsInUse(ctx context.Context) (map[varplane.Scope][]varplane.Revision, error) {
	out := map[varplane.Scope][]varplane.Revision{}
	histories := map[varplane.Scope][]varplane.Event{}
	err := svc.each(ctx, func(c *Change) error {
		if !c.State.Open() {
			return nil
		}
		if c.Revision != "" {
			out[c.Scope] = append(out[c.Scope], c.Revision)
		}
		if c.Base == 0 {
			return nil
		}
		h, ok := histories[c.Scope]
		if !ok {
			var err error
			if h, err = svc.store.EventHistory(ctx, c.Scope); err != nil {
				return err
			}
			histories[c.Scope] = h
		}
		for _, ev := range h {
			if ev.Kind == varplane.EventActivated && ev.Generation == c.Base {
				out[c.Scope] = append(out[c.Scope], ev.Revision)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
