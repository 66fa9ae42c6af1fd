package varplane

import "context"

// MaxStatusPage bounds the limit of one StatusPager read.
const MaxStatusPage = 1000

// StatusValue is one instance's stored status value (InstanceStatus as
// JSON) under the id it was filed as.
type StatusValue struct {
	ID    string
	Value []byte
}

// StatusPager is a StatusReader that reads the statuses a page at a time,
// so that a view of the fleet reads a bounded number of them per request.
// Every store of this module that keeps statuses implements it.
type StatusPager interface {
	// InstanceStatusPage returns the unexpired statuses of the instances
	// whose id sorts (byte-wise) after after, in id order: at most limit
	// of them (1 to MaxStatusPage; a larger limit is cut to it). next is
	// the cursor to read the following page with, "" when there is none.
	// A page may hold fewer than limit statuses while next is set (a
	// store that lists its instances apart from their statuses skips
	// listed ones whose status expired): the caller reads on while next
	// is set.
	InstanceStatusPage(ctx context.Context, after string, limit int) (page []StatusValue, next string, err error)
}

// StatusPageLimit is limit as a StatusPager uses it: at least 1, at most
// MaxStatusPage.
func StatusPageLimit(limit int) int {
	return min(max(limit, 1), MaxStatusPage)
}
