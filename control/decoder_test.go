package control_test

import (
	"context"
	"errors"
	"testing"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/control"
)

// TestFamilyDecoderCheck: the decoder of the instance family a scope
// belongs to is one of the change's checks; a document it refuses fails
// the change with its error as the issue, other families' scopes are not
// held to it, and a decodable document passes.
func TestFamilyDecoderCheck(t *testing.T) {
	calls := 0
	dec := func(_ context.Context, rec *varplane.RevisionRecord) (flags, error) {
		calls++
		m, err := decodeFlags(context.Background(), rec)
		if err == nil && rec.Scope == "" {
			err = errors.New("no scope")
		}
		return m, err
	}
	e := newEnv(t, envOpts{checks: []control.Check{control.FamilyDecoder("tenant", dec)}})
	e.publish("tenant.acme", `{"a":1}`)
	e.publish("app.flags", `{"a":1}`)
	for _, tc := range []struct {
		scope     varplane.Scope
		doc       string
		wantState control.State
		wantCalls int
	}{
		{"tenant.acme", `{"undecodable":true}`, control.StateFailed, 1},
		{"tenant.acme", `{"a":2}`, control.StateChecked, 1},
		{"app.flags", `{"undecodable":true}`, control.StateChecked, 0}, // another family's decoder
	} {
		calls = 0
		c := e.propose("alice", tc.scope, 1, tc.doc)
		if c.State != tc.wantState || calls != tc.wantCalls {
			t.Fatalf("%s %s: %s after %d decodes, want %s after %d; checks %+v", tc.scope, tc.doc, c.State, calls, tc.wantState, tc.wantCalls, c.Checks)
		}
		var r *control.CheckResult
		for i := range c.Checks {
			if c.Checks[i].Name == control.DecoderCheckPrefix+"tenant" {
				r = &c.Checks[i]
			}
		}
		if r == nil {
			t.Fatalf("no decoder check among %+v", c.Checks)
		}
		if tc.wantState == control.StateFailed && (r.Passed || len(r.Issues) != 1 || !contains([]byte(r.Issues[0].Message), "undecodable")) {
			t.Fatalf("decoder check of a refused document: %+v", r)
		}
	}
}
