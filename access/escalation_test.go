package access_test

import (
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/access"
)

// TestMayGive: one table per rule of docs/access.md ("Who may give
// what"); each row is a creator, a binding, and whether it may give it.
func TestMayGive(t *testing.T) {
	k := func(ks ...varplane.Kind) []varplane.Kind { return ks }
	s := func(ss ...string) []string { return ss }
	admin := access.Creator{ID: "ops", Roles: s("admin")}
	rules := map[string][]struct {
		name string
		by   access.Creator
		b    access.Binding
		ok   bool
	}{
		"administration is a role of its own": {
			{"every kind, no role", access.Creator{ID: "m", Kinds: k("read", "audit", "mutate")}, access.Binding{Kinds: k("read")}, false},
			{"a role that is not admin", access.Creator{ID: "r", Roles: s("reviewer")}, access.Binding{Kinds: k("read")}, false},
			{"admin", admin, access.Binding{Kinds: k("read")}, true},
			{"a parent of nothing: * holds admin", access.Root("root"), access.Binding{Kinds: k("read")}, true},
		},
		"kinds": {
			{"a kind held", access.Creator{ID: "a", Kinds: k("read", "audit"), Roles: s("admin")}, access.Binding{Kinds: k("audit")}, true},
			{"a kind not held", access.Creator{ID: "a", Kinds: k("read", "audit"), Roles: s("admin")}, access.Binding{Kinds: k("read", "mutate")}, false},
			{"every kind from a narrowed creator", access.Creator{ID: "a", Kinds: k("read"), Roles: s("admin")}, access.Binding{}, false},
			{"every kind from a creator holding every kind", admin, access.Binding{}, true},
		},
		"prefixes": {
			{"the same prefix", access.Creator{ID: "a", Prefixes: s("app."), Roles: s("admin")}, access.Binding{Prefixes: s("app.")}, true},
			{"below", access.Creator{ID: "a", Prefixes: s("app"), Roles: s("admin")}, access.Binding{Prefixes: s("app", "app.x", "app.")}, true},
			{"below a dot prefix", access.Creator{ID: "a", Prefixes: s("app."), Roles: s("admin")}, access.Binding{Prefixes: s("app.x", "app.x.")}, true},
			{"the parent of a dot prefix", access.Creator{ID: "a", Prefixes: s("app."), Roles: s("admin")}, access.Binding{Prefixes: s("app")}, false},
			{"a sibling", access.Creator{ID: "a", Prefixes: s("app"), Roles: s("admin")}, access.Binding{Prefixes: s("apps")}, false},
			{"another tree", access.Creator{ID: "a", Prefixes: s("app."), Roles: s("admin")}, access.Binding{Prefixes: s("billing.")}, false},
			{"every scope from a narrowed creator", access.Creator{ID: "a", Prefixes: s("app."), Roles: s("admin")}, access.Binding{}, false},
			{"* from a narrowed creator", access.Creator{ID: "a", Prefixes: s("app."), Roles: s("admin")}, access.Binding{Prefixes: s("*")}, false},
			{"* from a creator holding *", access.Creator{ID: "a", Prefixes: s("*"), Roles: s("admin")}, access.Binding{Prefixes: s("*")}, true},
		},
		"roles": {
			{"a role held", access.Creator{ID: "a", Roles: s("admin", "reviewer")}, access.Binding{Roles: s("reviewer")}, true},
			{"a role below one held", access.Creator{ID: "a", Roles: s("admin", "system")}, access.Binding{Roles: s("system:configuration:get")}, true},
			{"a role not held", admin, access.Binding{Roles: s("reviewer")}, false},
			{"a parent of a role held", access.Creator{ID: "a", Roles: s("admin", "system:configuration:get")}, access.Binding{Roles: s("system")}, false},
			{"* from a creator without it", admin, access.Binding{Roles: s("*")}, false},
			{"admin from an admin", admin, access.Binding{Roles: s("admin")}, true},
			{"the instance role from an admin without it", admin, access.Binding{Roles: s(varplane.InstanceRole)}, false},
			{"anything from *", access.Root("root"), access.Binding{Roles: s("*", "reviewer")}, true},
		},
	}
	for rule, rows := range rules {
		for _, tc := range rows {
			t.Run(rule+"/"+tc.name, func(t *testing.T) {
				err := tc.by.MayGive(tc.b)
				if got := err == nil; got != tc.ok {
					t.Fatalf("MayGive = %v, want allowed %v", err, tc.ok)
				}
				if err != nil && varplane.ErrorCode(err) != varplane.CodeForbidden {
					t.Fatalf("MayGive = %v, want forbidden", err)
				}
			})
		}
	}
}
