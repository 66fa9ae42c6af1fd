package postgres

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

func TestConformance(t *testing.T) {
	u := sharedURL(t)
	storetest.Run(t, storetest.Harness{
		Open: func(tb testing.TB) varplane.Store {
			return openStore(tb, freshSchema(tb, u), Options{})
		},
		Reopen: func(tb testing.TB, s varplane.Store) varplane.Store {
			schema := s.(*Store).Schema()
			_ = s.Close()
			return openStore(tb, withParam(tb, u, "schema", schema), Options{})
		},
	})
}
