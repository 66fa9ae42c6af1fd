// Package control is varplane's reviewed-change workflow (the control API
// under {base}/control): the head of a document with who published and
// approved it, its paged revisions, revision n, the diff between two
// generations, how far a generation has propagated, and change requests
// that are proposed on a base generation, checked, optionally tried in a
// canary window, approved by someone other than their author, and published
// with a compare-and-set on the base, so a change whose base moved is
// conflicted and nothing is overwritten.
//
// Everything the workflow keeps lives in the store of record, as documents
// of reserved scopes under RecordRoot ("varplane-control"), so every replica
// sharing a store sees the same changes and policies, with history:
//   - varplane-control.change.<id>: one change request; the generation of
//     its scope is the change's version, and every transition is a publish
//     of the record guarded by it (a compare-and-set), whose event in the
//     store's log carries the identity that made it as actor and the
//     transition as reason;
//   - varplane-control.policies: the review policies, one per scope subtree.
//   - varplane-control.schemas: the schema bindings, one per scope prefix
//     (binding.go); Guard is the engine's Binder (varplane.Options.Binder),
//     so every write under a bound prefix is validated against its schema.
//
// The candidate document of a change is stored as an ordinary revision of
// its target scope when it is proposed (revisions never change a head), so
// publishing is one activation of that revision at base+1.
//
// Guard reserves those scopes to this package (scope-owned for anyone else)
// and refuses, with change-required, every direct write to a scope under a
// review policy (create, activate, publish, deactivate, rollback) through
// the engine's Owners, so no transport can bypass a policy. No policy
// covers a scope another subsystem of the engine reserves
// (Engine.Reserved: the access control's principals, the values service's
// configurations), so a policy never locks their administrators out.
//
// Publish decides under the policy in force when it publishes: the
// approvals it counts (distinct identities other than the author, holding
// one of the policy's roles when they approved) and the canary; a scope
// has one canary window open at a time.
//
// Concurrency contract: Service and Guard are safe for concurrent use by
// many requests and replicas; transitions race by compare-and-set on the
// change's version and the loser gets revision-conflict and changes nothing.
package control
