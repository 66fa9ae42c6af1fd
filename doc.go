// Package varplane is the domain of the varplane control plane: scopes,
// content-addressed revisions, generations, heads, the append-only event log,
// the Store contract every storage adapter implements, the error model, and the
// Engine that applies the rules (create, validate, activate, deactivate,
// rollback, idempotency, commit notifications) on top of any Store.
//
// Values returned by reads (heads, states, events) are shared immutable
// snapshots: callers must not mutate them.
package varplane
