package main

import (
	"path/filepath"
	"testing"
)

// TestServeComponentsOwnScopes: with --components, the values service owns
// its "<component>@<epoch>" scopes. A token with var-API mutate rights
// cannot create, activate, deactivate or roll back such a scope through the
// admin API (403 scope-owned, nothing stored), so the values service never
// serves what its schema forbids; its own creates still work and its schema
// still applies. Other scopes stay writable.
func TestServeComponentsOwnScopes(t *testing.T) {
	deployment, epoch := deployFixture(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFiles(t, filepath.Dir(tokens), map[string]string{"tokens": "ops-token id=ops roles=system:configuration\nmutator id=mallory kinds=read,audit,mutate\n"})
	s := startServer(t, "--store", "memory:", "--components", deployment, "--tokens", tokens)
	scope := "dummies.dummy@" + epoch
	values := s.URL + "/configuration/values/dummies.dummy/"
	ops := []string{"Authorization", "Bearer ops-token"}

	// Two objects through the values service: generations 1 and 2 (create
	// stores a revision and activates it).
	expect(t, send(t, "POST", values, "application/json", `{"configuration":{"foo":"first"}}`, ops...), 201, "")
	expect(t, send(t, "POST", values, "application/json", `{"configuration":{"foo":"second"}}`, ops...), 201, "")
	status := expect(t, call(t, "GET", s.Base+"/admin/status?scope="+q(scope), nil, ops...), 200, "")
	revision, generation := str(t, status, "revision"), num(t, status, "generation")
	history := func() int {
		h := expect(t, call(t, "GET", s.Base+"/admin/history?scope="+q(scope), nil, ops...), 200, "")
		events, _ := h["events"].([]any)
		return len(events)
	}
	before := history()

	// The schema wants foo a string: 5 is what a writer around the service
	// would store.
	for _, token := range []string{"mutator", "ops-token"} {
		auth := []string{"Authorization", "Bearer " + token}
		for _, tt := range []struct {
			name, path string
			body       map[string]any
		}{
			{"create", "/admin/revisions", map[string]any{"scope": scope, "document": map[string]any{"foo": 5}, "actor": "x"}},
			{"activate", "/admin/activate", map[string]any{"scope": scope, "revision": revision, "expectedGeneration": generation}},
			{"deactivate", "/admin/deactivate", map[string]any{"scope": scope, "expectedGeneration": generation}},
			{"rollback", "/admin/rollback", map[string]any{"scope": scope, "expectedGeneration": generation}},
		} {
			t.Run(token+" "+tt.name, func(t *testing.T) {
				expect(t, call(t, "POST", s.Base+tt.path, tt.body, auth...), 403, "scope-owned")
			})
		}
	}
	if after := history(); after != before {
		t.Fatalf("history has %d events after the refused writes, %d before", after, before)
	}
	st := expect(t, call(t, "GET", s.Base+"/admin/status?scope="+q(scope), nil, ops...), 200, "")
	if str(t, st, "revision") != revision || num(t, st, "generation") != generation {
		t.Fatalf("status after the refused writes = %v", st)
	}
	got := expect(t, call(t, "GET", values, nil, ops...), 200, "")
	if conf, _ := got["configuration"].(map[string]any); conf["foo"] != "second" {
		t.Fatalf("served %v, want the second object", got)
	}

	// The values service's own writes pass, and its schema still applies.
	expect(t, send(t, "POST", values, "application/json", `{"configuration":{"foo":5}}`, ops...), 422, "invalid-configuration")
	expect(t, send(t, "POST", values, "application/yaml", "configuration:\n  foo: third\n", ops...), 201, "")
	// A scope of no owner stays writable through the var API.
	expect(t, call(t, "POST", s.Base+"/admin/revisions", map[string]any{"scope": "dummies.other", "document": map[string]any{"foo": 5}}, "Authorization", "Bearer mutator"), 201, "")
}
