package control

import "testing"

// TestCountedApprovals: the approvals a publish counts are by distinct
// identities other than the author, and, under a policy with roles, by
// identities that held one of them when they approved; a record that
// holds more (written by an older server, or by hand) counts no more.
func TestCountedApprovals(t *testing.T) {
	reviewer := Policy{Scope: "pay", Approvals: 2, Roles: []string{"reviewer"}}
	anyone := Policy{Scope: "pay", Approvals: 2}
	for _, tc := range []struct {
		name      string
		approvals []Approval
		pol       Policy
		has       bool
		want      int
	}{
		{"the author's approval", []Approval{{By: "alice", Roles: []string{"reviewer"}}}, reviewer, true, 0},
		{"one identity twice", []Approval{{By: "bob", Roles: []string{"reviewer"}}, {By: "bob", Roles: []string{"reviewer"}}}, reviewer, true, 1},
		{"distinct reviewers", []Approval{{By: "bob", Roles: []string{"reviewer"}}, {By: "carol", Roles: []string{"reviewer"}}}, reviewer, true, 2},
		{"an approver without the role", []Approval{{By: "dave"}, {By: "carol", Roles: []string{"reviewer"}}}, reviewer, true, 1},
		{"every role", []Approval{{By: "root", Roles: []string{"*"}}}, reviewer, true, 1},
		{"a parent role", []Approval{{By: "lead", Roles: []string{"reviewer"}}, {By: "other", Roles: []string{"review"}}}, Policy{Approvals: 1, Roles: []string{"reviewer:pay"}}, true, 1},
		{"no roles asked", []Approval{{By: "dave"}, {By: "erin"}}, anyone, true, 2},
		{"no policy", []Approval{{By: "dave"}, {By: "alice"}}, Policy{}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Change{ID: "ch-0000000000000001", Author: "alice", Approvals: tc.approvals}
			if got := countedApprovals(c, tc.pol, tc.has); got != tc.want {
				t.Fatalf("countedApprovals = %d, want %d", got, tc.want)
			}
		})
	}
}
