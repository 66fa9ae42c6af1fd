package varplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/store/memory"
)

// TestDryRunAgreesWithTheWrite: for generated sequences of publishes,
// activations, rollbacks and deactivations (as an owner or not, at the
// current generation or a stale one, of stored and unknown revisions, of
// documents a group refuses, over scopes owned by a subsystem and scopes
// under a change-required guard, cascades reaching them), the dry run of
// each write changes nothing (no event, not even a rejection) and answers
// what the write then does: the same refusal code, or the same generation,
// revision, cascade and creation.
func TestDryRunAgreesWithTheWrite(t *testing.T) {
	scopes := []varplane.Scope{"a", "a.b", "a.c", "own", "own.x", "pol", "pol.b", "grp"}
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		st := memory.New()
		defer st.Close()
		e := varplane.NewEngine(st, varplane.Options{Owners: []varplane.Owner{
			{Name: "sys", Owns: func(s varplane.Scope) bool { return s == "own.x" }},
			{Name: "sys", Owns: func(s varplane.Scope) bool { return s == "pol.b" }, Code: varplane.CodeChangeRequired},
		}})
		defer e.Close()
		var revs []varplane.Revision
		// The owned and guarded scopes start active, so that cascades
		// reach them.
		for _, sc := range []varplane.Scope{"own.x", "pol.b"} {
			r, err := e.Publish(ctx, varplane.PublishRequest{Scope: sc, Document: json.RawMessage(`{"on":true}`), Owner: "sys"})
			if err != nil {
				t.Fatal(err)
			}
			revs = append(revs, r.Revision)
		}
		// events is every scope's event count: what a dry run must leave.
		events := func() string {
			var b strings.Builder
			for _, sc := range scopes {
				h, err := st.History(ctx, sc)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "%s:%d ", sc, len(h))
			}
			return b.String()
		}
		for i := rapid.IntRange(1, 40).Draw(t, "ops"); i > 0; i-- {
			scope := rapid.SampledFrom(scopes).Draw(t, "scope")
			state, err := st.State(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			expected := state.Generation
			switch rapid.IntRange(0, 3).Draw(t, "guard") {
			case 0:
				if expected > 0 {
					expected--
				}
			case 1:
				expected++
			}
			owner := ""
			if rapid.Bool().Draw(t, "asOwner") {
				owner = "sys"
			}
			rev := varplane.Revision("sha256:" + strings.Repeat("0", 64))
			if len(revs) > 0 && rapid.IntRange(0, 3).Draw(t, "knownRevision") > 0 {
				rev = rapid.SampledFrom(revs).Draw(t, "revision")
			}
			// write runs the op as a dry run or not and returns a
			// comparable summary of its answer.
			var write func(dry bool) (string, error)
			switch op := rapid.SampledFrom([]string{"publish", "activate", "rollback", "deactivate"}).Draw(t, "op"); op {
			case "publish":
				doc := json.RawMessage(fmt.Sprintf(`{"%s.n":%d}`, scope, rapid.IntRange(0, 3).Draw(t, "n")))
				if rapid.IntRange(0, 4).Draw(t, "invalid") == 0 {
					doc = json.RawMessage(`[1]`) // a group refuses it
				}
				write = func(dry bool) (string, error) {
					r, err := e.Publish(ctx, varplane.PublishRequest{Scope: scope, Document: doc, ExpectedGeneration: expected, Owner: owner, DryRun: dry})
					if err == nil && !dry {
						revs = append(revs, r.Revision)
					}
					return fmt.Sprint(r.Scope, r.Generation, r.Revision, r.Created), err
				}
			case "activate":
				write = func(dry bool) (string, error) {
					r, err := e.Activate(ctx, varplane.ActivateRequest{Scope: scope, Revision: rev, ExpectedGeneration: expected, Owner: owner, DryRun: dry})
					return fmt.Sprint(r.Scope, r.Generation, r.Revision), err
				}
			case "rollback":
				var to *varplane.Generation
				if rapid.Bool().Draw(t, "toGeneration") {
					g := varplane.Generation(rapid.IntRange(0, 6).Draw(t, "to"))
					to = &g
				}
				write = func(dry bool) (string, error) {
					r, err := e.Rollback(ctx, varplane.RollbackRequest{Scope: scope, ExpectedGeneration: expected, ToGeneration: to, Owner: owner, DryRun: dry})
					return fmt.Sprint(r.Scope, r.Generation, r.Revision), err
				}
			case "deactivate":
				write = func(dry bool) (string, error) {
					r, err := e.Deactivate(ctx, varplane.DeactivateRequest{Scope: scope, ExpectedGeneration: expected, Owner: owner, DryRun: dry})
					return fmt.Sprint(r.Scope, r.Generation, r.Cascade), err
				}
			}
			before := events()
			dryOut, dryErr := write(true)
			if after := events(); after != before {
				t.Fatalf("the dry run changed the log: %s → %s", before, after)
			}
			out, err := write(false)
			if varplane.ErrorCode(dryErr) != varplane.ErrorCode(err) || (dryErr == nil) != (err == nil) {
				t.Fatalf("the dry run answered %v, the write %v", dryErr, err)
			}
			if err == nil && dryOut != out {
				t.Fatalf("the dry run said %s, the write did %s", dryOut, out)
			}
		}
	})
}
