package redis

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

func TestConformance(t *testing.T) {
	u := sharedURL(t)
	storetest.Run(t, storetest.Harness{
		Open: func(tb testing.TB) varplane.Store {
			return openStore(tb, withPrefix(tb, u, testPrefix(tb, u)), Options{})
		},
		Reopen: func(tb testing.TB, s varplane.Store) varplane.Store {
			rs := s.(*Store)
			prefix := rs.keys.prefix
			_ = s.Close()
			return openStore(tb, withPrefix(tb, u, prefix), Options{})
		},
	})
}
