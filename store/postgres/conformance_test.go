package postgres

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

func conformanceHarness(t *testing.T) storetest.Harness {
	u := sharedURL(t)
	return storetest.Harness{
		Open: func(tb testing.TB) varplane.Store {
			return openStore(tb, freshSchema(tb, u), Options{})
		},
		Reopen: func(tb testing.TB, s varplane.Store) varplane.Store {
			schema := s.(*Store).Schema()
			_ = s.Close()
			return openStore(tb, withParam(tb, u, "schema", schema), Options{})
		},
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, conformanceHarness(t))
}
