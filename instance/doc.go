// Package instance is the data-plane cache of seed 002: a process that
// decides with documents held in memory, read straight from the store of
// record, and that fails closed exactly where the store cannot vouch for
// what it holds.
//
// One Cache serves two uses: a Go service embeds it (New with a Decoder that
// turns a revision's bytes into the service's typed value), and `varplane
// serve --read-only` uses it as a read replica of a shared store.
//
// What a Cache promises (docs/instances.md has the whole contract):
//   - The root scope is loaded at start and never dropped; other scopes load
//     on first need, and each family (a scope prefix) keeps at most its
//     MaxCached documents, dropping the least recently used. Scopes the store
//     says have no document are remembered apart, at most 256 per family,
//     and never push out an installed document.
//   - Until the root document exists every read answers not-ready (503).
//   - A document the decoder refuses is installed as failed: its reads
//     answer document-failed (503) until a decodable revision is published.
//     So does a document that disappeared from the store after it was seen.
//   - Changes are installed from the store's invalidations (Watch), never
//     from a local copy, and confirmed by revalidation passes; a read hands
//     out one immutable *Doc, so a request that holds it never sees two
//     revisions of a document.
//   - A cold load waits at most ColdLoadTimeout, then answers
//     store-unavailable; a failed read is never remembered as absent.
//   - Reads of scopes under a fail-closed prefix answer document-stale (503)
//     once the document or the root has lagged past FailClosedMaxLag.
package instance
