package control

import (
	"fmt"

	"github.com/varplane/varplane"
)

// The trust model of canary evidence (docs/control.md, "Trust model"): a
// window's minimum is met by instances only. An instance that wrote its
// report to the store itself holds the store's credentials, as the
// reference's instances hold their ACL users, and counts; a report filed
// over HTTP was filed by an instance identity (httpapi refuses any other
// token), and counts only when that identity may read the window's scope
// and is not the change's author.

// judge returns reports with Discount set on each one that does not count
// toward the minimum of a window of c. It does not change reports.
func judge(c *Change, reports []varplane.CanaryReport) []varplane.CanaryReport {
	out := make([]varplane.CanaryReport, len(reports))
	for i, r := range reports {
		r.Discount = discount(c.Author, r)
		out[i] = r
	}
	return out
}

// discount says why r does not count toward a window of a change by
// author, or "" when it counts.
func discount(author string, r varplane.CanaryReport) string {
	switch {
	case r.Identity == "":
		return "" // written to the store by an instance itself
	case r.Identity == author:
		return fmt.Sprintf("filed by %q, the change's author", r.Identity)
	case !r.MayRead:
		return fmt.Sprintf("filed by %q, which may not read the window's scope", r.Identity)
	}
	return ""
}

// counted returns how many of the fresh instances have a report that
// counts (no Discount).
func counted(fresh []string, reports []varplane.CanaryReport) int {
	ok := make(map[string]bool, len(reports))
	for _, r := range reports {
		if r.Discount == "" {
			ok[r.Instance] = true
		}
	}
	n := 0
	for _, id := range fresh {
		if ok[id] {
			n++
		}
	}
	return n
}
