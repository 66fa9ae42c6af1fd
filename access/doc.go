// Package access is varplane's access control held in the store of record:
// principals, each with the SHA-256 digest of one bearer token (never the
// token), bound to request kinds, scope prefixes and roles, kept as the
// document of one reserved scope (Scope) that the access subsystem owns
// (Owner). Because it is a document, it has a history like any other, and
// every replica reads it through the store's own invalidation and
// revalidation paths: a revoked token is refused the moment the store
// installs the revoking revision.
//
// Authorizer implements varplane.Authorizer over that document; the token
// grant model (Grant, Scoped, the tokens file of serve --tokens) is the
// static side, and Combine puts it in front of the store. Service creates,
// lists and revokes principals and bootstraps the first administrator
// (httpapi serves those operations under {base}/access/tokens).
//
// Concurrency: every type here is safe for concurrent use. Writes are
// read-modify-publish guarded by the scope's generation, retried on a
// conflict, so two administrators never overwrite each other.
package access
