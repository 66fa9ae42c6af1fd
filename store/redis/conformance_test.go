package redis

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/storetest"
)

func conformanceHarness(t *testing.T) storetest.Harness {
	u := sharedURL(t)
	return storetest.Harness{
		Open: func(tb testing.TB) varplane.Store {
			return openStore(tb, withPrefix(tb, u, testPrefix(tb, u)), Options{})
		},
		Reopen: func(tb testing.TB, s varplane.Store) varplane.Store {
			rs := s.(*Store)
			prefix := rs.keys.prefix
			_ = s.Close()
			return openStore(tb, withPrefix(tb, u, prefix), Options{})
		},
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, conformanceHarness(t))
}

// TestChainTwoReplicas races commits of every kind on one scope and its
// subtree through two store values on one Redis prefix: every chain comes
// out gapless and sound, whatever retries the compare-and-set of the chain
// head took.
func TestChainTwoReplicas(t *testing.T) {
	u := sharedURL(t)
	u = withPrefix(t, u, testPrefix(t, u))
	storetest.ChainReplicas(t, openStore(t, u, Options{}), openStore(t, u, Options{}))
}
